"""Peak memory of eval and ptq on a random Llama of about 1.5 B parameters: one copy of the model, whatever the command.

    nice python3 benchmarks/bench_memory.py [--hidden 2048 --intermediate 8192 --layers 20 --vocab 49152]
        [--dir DIR] [--keep] [--size 0.05] [--calib-size 512] [--threads 2] [--cases load,eval,ptq]
        [--schemes int8:row,int4:g64]   (eval's plain candidates; "" for the recipe alone)

1. Writes a Llama config (SmolLM2's tokenizer, so the vocabulary is 49152 by default), counts its parameters
   by formula (checked against the built model), builds it with random weights (seeded) in a child process and
   saves it in fp32 with safetensors (transformers' save_pretrained) to a temporary directory (or --dir, kept
   with --keep; an existing directory with the same config is reused).
2. Runs each case in a fresh subprocess, the command's own CLI entry point (precisionlab.cli.main) in that
   process, and reads the process's peak resident memory at the end (ru_maxrss of getrusage(RUSAGE_SELF),
   and VmHWM of /proc/self/status):
       load   load_model(DIR) and nothing else (what any command pays first)
       eval   precisionlab eval --model DIR --schemes int8:row,int4:g64 --from recipe.json --tasks ppl --size S
              (three candidates: two plain schemes and a two-scheme recipe: every attention linear int8:row,
              every MLP linear int4:g64, a prepared candidate installed through ptq.install)
       ptq    precisionlab ptq --model DIR --method gptq --scheme int4:g64 --blocks 0,1 --calib-size N
              --eval-tasks ppl --eval-size S (GPTQ over two blocks, then its candidate and RTN's evaluated)
3. Prints a table: case, float bytes (parameters x 4), peak RSS, ratio, bound, PASS / FAIL. The bound is
   1.3 x the float bytes; for ptq plus one block's Hessians (sum of in_features^2 x 8 bytes over a block's
   linears: float64).

A benchmark, not a test: nothing is asserted, the table says PASS or FAIL. It takes minutes (the model is
written once, 6 GB; each case reads it).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

MARK = "BENCH-MEMORY "
BOUND = 1.3


def llama_parameters(hidden: int, intermediate: int, layers: int, vocab: int, heads: int, kv_heads: int) -> int:
    """Parameters of an untied Llama: embedding and head (vocab x hidden each), per block q, o (hidden^2),
    k, v (hidden x kv_heads * head_dim), gate, up, down (hidden x intermediate) and two norms, a final norm."""
    head_dim = hidden // heads
    attention = 2 * hidden * hidden + 2 * hidden * kv_heads * head_dim
    mlp = 3 * hidden * intermediate
    return 2 * vocab * hidden + layers * (attention + mlp + 2 * hidden) + hidden


def block_hessian_bytes(hidden: int, intermediate: int) -> int:
    """One block's GPTQ Hessians, float64: q, k, v, o, gate, up see hidden inputs, down intermediate."""
    return 8 * (6 * hidden * hidden + intermediate * intermediate)


def peak() -> dict[str, int]:
    """This process's peak resident bytes: ru_maxrss (KiB on Linux) and VmHWM."""
    out = {"ru_maxrss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                out["vmhwm"] = int(line.split()[1]) * 1024
    except OSError:
        pass
    return out


# --------------------------------------------------------------------------- children
def child_make(args: argparse.Namespace) -> None:
    import torch
    import transformers

    from precisionlab.models import load_model

    directory = Path(args.dir)
    config = transformers.LlamaConfig(vocab_size=args.vocab, hidden_size=args.hidden,
                                      intermediate_size=args.intermediate, num_hidden_layers=args.layers,
                                      num_attention_heads=args.heads, num_key_value_heads=args.kv_heads,
                                      max_position_embeddings=2048, tie_word_embeddings=False)
    config.architectures = ["LlamaForCausalLM"]
    torch.manual_seed(0)
    began = time.perf_counter()
    model = transformers.LlamaForCausalLM(config).eval()
    count = sum(p.numel() for p in model.parameters())
    expected = llama_parameters(args.hidden, args.intermediate, args.layers, args.vocab, args.heads, args.kv_heads)
    if count != expected:
        raise SystemExit(f"the built model has {count} parameters, the formula says {expected}")
    model.save_pretrained(directory, safe_serialization=True)
    del model
    load_model("smollm2-135m").tokenizer.save_pretrained(directory)
    print(MARK + json.dumps({"parameters": count, "seconds": time.perf_counter() - began, **peak()}))


def child_case(args: argparse.Namespace) -> None:
    import torch

    torch.set_num_threads(args.threads)
    began = time.perf_counter()
    rc = 0
    if args.child == "load":
        from precisionlab.models import load_model

        load_model(args.dir)
    else:
        from precisionlab.cli.main import cli

        try:
            cli.main(args=args.argv, prog_name="precisionlab", standalone_mode=False)
        except SystemExit as exc:
            rc = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 2)
    print(MARK + json.dumps({"rc": rc, "seconds": time.perf_counter() - began, **peak()}), flush=True)


# --------------------------------------------------------------------------- parent
def case_argv(case: str, directory: Path, work: Path, args: argparse.Namespace) -> list[str]:
    threads = ["--threads", str(args.threads)]
    if case == "eval":
        schemes = ["--schemes", args.schemes] if args.schemes else []  # "": the recipe alone
        return ["eval", "--model", str(directory), *schemes, "--from", str(work / "recipe.json"), "--tasks", "ppl",
                "--size", str(args.size), "--no-cache",
                "--resamples", "1000", "--out", str(work / "eval-out"), *threads]
    if case == "ptq":
        return ["ptq", "--model", str(directory), "--method", "gptq", "--scheme", "int4:g64", "--blocks", "0,1",
                "--calib-size", str(args.calib_size), "--eval-tasks", "ppl", "--eval-size", str(args.size),
                "--out", str(work / "ptq-out"), *threads]
    return []


def write_recipe(path: Path, layers: int) -> None:
    from precisionlab.search.recipes import save_recipe

    assignment = {}
    for b in range(layers):
        for name in ("q_proj", "k_proj", "v_proj", "o_proj"):
            assignment[f"model.layers.{b}.self_attn.{name}"] = "int8:row"
        for name in ("gate_proj", "up_proj", "down_proj"):
            assignment[f"model.layers.{b}.mlp.{name}"] = "int4:g64"
    save_recipe(path, assignment, model="bench-memory-llama")


def run_child(argv: list[str], log: Path) -> dict[str, object]:
    env = dict(os.environ)
    with log.open("w") as out:
        proc = subprocess.run([sys.executable, __file__, *argv], stdout=subprocess.PIPE, stderr=out, text=True,
                              env=env, check=False)
    marks = [line for line in proc.stdout.splitlines() if line.startswith(MARK)]
    if proc.returncode != 0 or not marks:
        tail = log.read_text().splitlines()[-5:]
        raise SystemExit(f"child {argv[:3]} failed (exit {proc.returncode}): {' | '.join(tail)}")
    log.with_suffix(".out").write_text(proc.stdout)
    result: dict[str, object] = json.loads(marks[-1][len(MARK):])
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hidden", type=int, default=2048)
    parser.add_argument("--intermediate", type=int, default=8192)
    parser.add_argument("--layers", type=int, default=20)
    parser.add_argument("--vocab", type=int, default=49152)
    parser.add_argument("--heads", type=int, default=16)
    parser.add_argument("--kv-heads", type=int, default=16)
    parser.add_argument("--dir", default=None)
    parser.add_argument("--keep", action="store_true")
    parser.add_argument("--size", type=float, default=0.05)
    parser.add_argument("--calib-size", type=int, default=512)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--cases", default="load,eval,ptq")
    parser.add_argument("--schemes", default="int8:row,int4:g64", help="eval's plain candidates (\"\": none)")
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    parser.add_argument("argv", nargs="*", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child == "make":
        return child_make(args)
    if args.child is not None:
        return child_case(args)

    count = llama_parameters(args.hidden, args.intermediate, args.layers, args.vocab, args.heads, args.kv_heads)
    float_bytes = 4 * count
    hessians = block_hessian_bytes(args.hidden, args.intermediate)
    print(f"Llama: hidden {args.hidden}, intermediate {args.intermediate}, {args.layers} layers, {args.heads} heads "
          f"({args.kv_heads} kv), vocabulary {args.vocab}, untied: {count:,} parameters = {float_bytes / 1e9:.3f} GB "
          f"fp32; one block's Hessians {hessians / 1e9:.3f} GB (float64)", flush=True)
    keep = args.keep or args.dir is not None
    directory = Path(args.dir) if args.dir else Path(tempfile.mkdtemp(prefix="bench-memory-"))
    work = Path(tempfile.mkdtemp(prefix="bench-memory-work-"))
    shape = ["--hidden", str(args.hidden), "--intermediate", str(args.intermediate), "--layers", str(args.layers),
             "--vocab", str(args.vocab), "--heads", str(args.heads), "--kv-heads", str(args.kv_heads)]
    try:
        config = directory / "config.json"
        same = config.exists() and json.loads(config.read_text()).get("num_hidden_layers") == args.layers and \
            json.loads(config.read_text()).get("hidden_size") == args.hidden
        if not same:
            made = run_child([*shape, "--dir", str(directory), "--child", "make"], work / "make.log")
            print(f"built and saved in {made['seconds']:.0f} s to {directory}", flush=True)
        write_recipe(work / "recipe.json", args.layers)
        rows = []
        for case in [c for c in args.cases.split(",") if c]:
            argv = [*shape, "--dir", str(directory), "--threads", str(args.threads), "--child", case, "--",
                    *case_argv(case, directory, work, args)]
            result = run_child(argv, work / f"{case}.log")
            rss = int(result["ru_maxrss"])  # type: ignore[call-overload]
            bound = BOUND * float_bytes + (hessians if case == "ptq" else 0)
            rows.append((case, rss, int(result.get("vmhwm", 0)), bound, float(result["seconds"])))  # type: ignore[arg-type]
            print(f"  {case}: peak {rss / 1e9:.2f} GB in {float(result['seconds']):.0f} s "  # type: ignore[arg-type]
                  f"(log {work / (case + '.log')})", flush=True)
        print(f"\n{'case':<6} {'float GB':>9} {'peak RSS GB':>12} {'VmHWM GB':>9} {'ratio':>6} {'bound':>6} "
              f"{'seconds':>8}  result")
        for case, rss, hwm, bound, seconds in rows:
            ratio = rss / float_bytes
            print(f"{case:<6} {float_bytes / 1e9:9.3f} {rss / 1e9:12.3f} {hwm / 1e9:9.3f} {ratio:6.3f} "
                  f"{bound / float_bytes:6.3f} {seconds:8.0f}  {'PASS' if rss <= bound else 'FAIL'}")
        load = os.getloadavg() if hasattr(os, "getloadavg") else (0.0, 0.0, 0.0)
        print(f"# {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {os.cpu_count()} CPUs, torch threads "
              f"{args.threads}, load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    finally:
        shutil.rmtree(work, ignore_errors=True) if not args.keep else None
        if not keep:
            shutil.rmtree(directory, ignore_errors=True)


if __name__ == "__main__":
    main()
