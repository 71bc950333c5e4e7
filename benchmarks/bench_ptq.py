"""GPTQ speed and memory: one large layer against a plain torch GPTQ in the same run, and every linear of SmolLM2.

    python3 benchmarks/bench_ptq.py                      # both parts
    python3 benchmarks/bench_ptq.py layer [--size 4096 --tokens 512]
    python3 benchmarks/bench_ptq.py model [--tokens 4096 --blocks 0,1]
    python3 benchmarks/bench_ptq.py methods [--blocks 0,15,29 --tokens 2048]

layer: GPTQ (int4 g128, symmetric, fp16 scales) of one size x size weight from `size`-wide
  synthetic activations with channels of log-normal scale, by precisionlab.ptq and by a plain
  torch implementation written here in the shape of the reference code (Cholesky inverse,
  lazy batches of 128, the same grid rule): codes compared first (the number that differ is
  printed: float32 sweeps may flip a code at a rounding tie and then diverge along that row),
  then both times and their ratio, the factorisation alone, and peak memory. Target: under 60 s
  for 4096 x 4096 and 512 tokens on 2 cores.
model: GPTQ of every linear in SmolLM2-135M's blocks (210 layers) from the calibration part of
  the built-in data, with the output error against RTN on the calibration tokens and on held-out
  evaluation text, per block and layer type. Target: under 10 minutes on 2 cores.
methods: every method of precisionlab.ptq on the chosen blocks, summary per method.

Times and memory are printed, never asserted. Peak memory is the process's resident-set high
water mark above where the section started (Linux), which counts torch and numpy buffers alike.
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from typing import Any

import numpy as np

from precisionlab.ptq import CalibrationWarning, gptq_quantize, run_method, token_batches
from precisionlab.ptq.gptq import inverse_hessian_factor
from precisionlab.ptq.measure import MemoryMeter
from precisionlab.quant import quantize


# --------------------------------------------------------------------------- a plain torch GPTQ (the peer)
def torch_gptq_int4_g128(weight: Any, hessian: Any, group: int = 128, block: int = 128,
                         percdamp: float = 0.01, dtype: str = "float32") -> np.ndarray:
    """GPTQ as the reference code lays it out, in torch (float32 by default): H^-1 by Cholesky, its upper
    factor, lazy batches, group scales s = fp16(amax / 7) fitted on arrival. Returns int codes (M, N)."""
    import torch

    if block % group:
        raise ValueError("this plain peer keeps each group inside one block: block must be a multiple of group")
    work = getattr(torch, dtype)
    w = torch.as_tensor(weight).to(work).clone()
    h = torch.as_tensor(hessian).to(work).clone()
    m, n = w.shape
    idx = torch.arange(n)
    h[idx, idx] += percdamp * torch.mean(torch.diag(h))
    hinv = torch.linalg.cholesky(torch.cholesky_inverse(torch.linalg.cholesky(h)), upper=True)
    codes = torch.zeros((m, n), dtype=torch.int8)
    scale = torch.ones(m, dtype=work)
    for i1 in range(0, n, block):
        i2 = min(i1 + block, n)
        w1 = w[:, i1:i2].clone()
        err1 = torch.zeros_like(w1)
        h1 = hinv[i1:i2, i1:i2]
        for i in range(i2 - i1):
            col = w1[:, i]
            if (i1 + i) % group == 0:  # groups inside blocks (block % group == 0): w1 holds their current values
                amax = w1[:, i : i + group].abs().amax(dim=1)
                scale = (amax.double() / 7).half().to(work)
                scale = torch.where(scale > 0, scale, torch.ones_like(scale))
            q = torch.clamp(torch.round(col / scale), -7, 7)
            codes[:, i1 + i] = q.to(torch.int8)
            e = (col - q * scale) / h1[i, i]
            w1[:, i:] -= e[:, None] * h1[i, i:][None, :]
            err1[:, i] = e
        w[:, i2:] -= err1 @ hinv[i1:i2, i2:]
    return codes.numpy()


def synthetic_layer(size: int, tokens: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal((tokens, size)) * np.exp(0.8 * rng.standard_normal(size))).astype(np.float32)
    w = (rng.standard_normal((size, size)) * 0.02).astype(np.float32)
    x64 = x.astype(np.float64)
    return w, 2.0 * x64.T @ x64 / tokens


def bench_layer(size: int, tokens: int) -> None:
    import torch

    print(f"== GPTQ of one {size} x {size} layer, {tokens} calibration tokens, int4:g128 "
          f"({torch.get_num_threads()} torch threads)")
    small_w, small_h = synthetic_layer(512, 256, seed=1)
    exact = gptq_quantize(small_w, small_h, "int4:g128", dtype="float64", act_order=False,
                          static_groups=False).quantized  # the peer sweeps in the natural order
    assert exact is not None
    small = exact.codes[:, :512].astype(np.int16)
    small = np.where(small >= 8, small - 16, small)
    peer64 = torch_gptq_int4_g128(small_w, small_h, dtype="float64")
    print(f"  float64 sweeps, 512 x 512: codes differing from the torch peer: {int(np.count_nonzero(small != peer64))}"
          f" of {small.size}")
    w, h = synthetic_layer(size, tokens)
    meter = MemoryMeter()
    with meter.section() as fact:
        inverse_hessian_factor(h)
    with meter.section() as ours:
        result = gptq_quantize(w, h, "int4:g128", act_order=False, static_groups=False)
    with meter.section() as peer:
        peer_codes = torch_gptq_int4_g128(w, h)
    assert result.quantized is not None and result.weight is not None
    mine = result.quantized.codes[:, :size].astype(np.int16)
    mine = np.where(mine >= 8, mine - 16, mine)
    differ = int(np.count_nonzero(mine != peer_codes))
    rows = int(np.count_nonzero((mine != peer_codes).any(axis=1)))
    d = result.weight.astype(np.float64) - w
    d_rtn = quantize(w, "int4:g128").dequantize().astype(np.float64) - w
    err = np.sqrt(np.einsum("ij,ij->", d @ h, d) / np.einsum("ij,ij->", w @ h, w))
    err_rtn = np.sqrt(np.einsum("ij,ij->", d_rtn @ h, d_rtn) / np.einsum("ij,ij->", w @ h, w))
    print(f"  float32 sweeps: codes differing from the torch peer: {differ} of {mine.size} ({rows} rows)")
    print(f"  precisionlab.ptq  {ours.seconds:7.1f} s   peak +{ours.peak_mb:6.0f} MB   (factorisation alone "
          f"{fact.seconds:.1f} s)")
    print(f"  torch peer        {peer.seconds:7.1f} s   peak +{peer.peak_mb:6.0f} MB   ratio ours/peer "
          f"{ours.seconds / peer.seconds:.2f}x")
    print(f"  output error: GPTQ {err:.4f}  RTN {err_rtn:.4f}  (ratio {err / err_rtn:.3f});  target < 60 s: "
          f"{'met' if ours.seconds < 60 else 'NOT met'}")


# --------------------------------------------------------------------------- SmolLM2
def smollm2() -> Any:
    from precisionlab.models import load_model

    return load_model("smollm2-135m")


def data(tokenizer: Any, tokens: int, eval_tokens: int) -> tuple[list[Any], list[Any]]:
    from precisionlab.eval.data import builtin_split, calibration_documents, ppl_documents

    split = builtin_split()
    cal = token_batches(tokenizer, calibration_documents(split), tokens, 512)
    ev = token_batches(tokenizer, ppl_documents(split, 120), eval_tokens, 512)
    return cal, ev


def bench_model(tokens: int, blocks: list[int] | None) -> None:
    loaded = smollm2()
    cal, ev = data(loaded.tokenizer, tokens, 2048)
    print(f"== GPTQ int4:g128 of {'every' if blocks is None else 'the selected'} SmolLM2-135M linear, "
          f"{tokens} calibration tokens (calibration part), 2048 held-out tokens")
    start = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", CalibrationWarning)
        result = run_method(loaded.model, "gptq", "int4:g128", cal, evaluation=ev, blocks=blocks,
                            progress=_progress)
    seconds = time.perf_counter() - start
    print()
    f = result.findings()
    print(f"  {f['ptq.gptq.layers_total']} layers in {seconds:.1f} s (target < 600 s: "
          f"{'met' if seconds < 600 else 'NOT met'}), peak +{result.peak_mb:.0f} MB ({result.memory_source})")
    print(f"  improved on calibration tokens: {f['ptq.gptq.layers_improved']} / {f['ptq.gptq.layers_total']}, "
          f"failed: {f['ptq.gptq.layers_failed']}")
    print(f"  mean GPTQ / RTN output error: calibration {f['ptq.gptq.output_error_ratio']:.3f}, held-out "
          f"{f['ptq.gptq.eval_output_error_ratio']:.3f}")
    held_out_worse = [r.name for r in result.layers if r.eval_ratio is not None and r.eval_ratio >= 1]
    print(f"  held-out error not below RTN's: {len(held_out_worse)} layers {held_out_worse[:6]}")
    _per_block(result)


def _per_block(result: Any) -> None:
    kinds: list[str] = []
    table: dict[int, dict[str, Any]] = {}
    for r in result.layers:
        parts = r.name.split(".")
        block, kind = int(parts[2]), parts[-1]
        if kind not in kinds:
            kinds.append(kind)
        table.setdefault(block, {})[kind] = r
    print("  ratio GPTQ / RTN output error, calibration (held-out), per block:")
    print("  block " + "".join(f"{k:>17s}" for k in kinds))
    for block, row in sorted(table.items()):
        cells = []
        for k in kinds:
            r = row.get(k)
            cells.append(f"{r.ratio:8.3f} ({r.eval_ratio:5.3f})" if r is not None and r.ratio is not None else
                         f"{'-':>17s}")
        print(f"  {block:5d} " + "".join(f"{c:>17s}" for c in cells))


def _progress(step: str, done: int, total: int) -> None:
    if sys.stderr.isatty():
        print(f"\r  {done}/{total} {step[:50]:50s}", end="", file=sys.stderr, flush=True)


def bench_methods(tokens: int, blocks: list[int]) -> None:
    loaded = smollm2()
    cal, ev = data(loaded.tokenizer, tokens, 1024)
    long_texts = token_batches(loaded.tokenizer, _ppl(), 4 * 512, 512)
    runs = [("rtn", "int4:g128", None), ("gptq", "int4:g128", None), ("awq", "int4:g128", None),
            ("smoothquant", "int8", {"act_scheme": "int8"}), ("smoothquant", "int8", None),
            ("smoothquant", "int8", {"alpha": "auto"}), ("llm_int8", None, None),
            ("llm_int8", None, {"outlier_weights": "fp16"}), ("kivi", "int4", {"max_kl": 0.05}),
            ("kivi", "int2", {"max_kl": 0.05})]
    print(f"== every method on blocks {blocks}, {tokens} calibration tokens, 1024 held-out tokens")
    for method, scheme, options in runs:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", CalibrationWarning)
            evaluation = long_texts if method == "kivi" else ev
            r = run_method(loaded.model, method, scheme, cal, evaluation=evaluation, blocks=blocks, options=options)
        f = r.findings()
        label = f"{method} {scheme or ''} {options or ''}".strip()
        print(f"  {label:48s} improved {f[f'ptq.{method}.layers_improved']:3d}/{f[f'ptq.{method}.layers_total']:3d}"
              f"  ratio {f[f'ptq.{method}.output_error_ratio']:.3f}  held-out "
              f"{_fmt(f.get(f'ptq.{method}.eval_output_error_ratio'))}  {r.seconds:6.1f} s  +{r.peak_mb:.0f} MB")
        if method == "llm_int8":
            for layer in r.layers:
                if layer.details["outlier_columns"]:
                    print(f"      {layer.name:36s} outlier columns {layer.details['outlier_columns']:4d}  error vs "
                          f"fp16 {layer.output_error:.4f}  plain int8 {layer.rtn_output_error:.4f}")
        if method == "kivi":
            s = r.summary
            print(f"      KL mean {s['kl_mean']:.4f} nats [{s.get('kl_ci_low', float('nan')):.4f}, "
                  f"{s.get('kl_ci_high', float('nan')):.4f}] over {s['decoded_positions']} decoded tokens, top-1 "
                  f"agreement {s['top1_agreement']:.3f}, verdict at 0.05: {s.get('kl_verdict')}, cache "
                  f"{s['cache_bytes'] / 1e6:.2f} MB vs fp16 {s['fp16_cache_bytes'] / 1e6:.2f} MB")


def _ppl() -> list[Any]:
    from precisionlab.eval.data import builtin_split, ppl_documents

    return ppl_documents(builtin_split(), 120)


def _fmt(value: float | None) -> str:
    return "  -  " if value is None else f"{value:.3f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("part", nargs="?", choices=("all", "layer", "model", "methods"), default="all")
    parser.add_argument("--size", type=int, default=4096)
    parser.add_argument("--tokens", type=int, default=None, help="calibration tokens")
    parser.add_argument("--blocks", default=None, help="comma-separated block numbers (model, methods)")
    args = parser.parse_args()
    blocks = None if args.blocks is None else [int(b) for b in args.blocks.split(",")]
    if args.part in ("all", "layer"):
        bench_layer(args.size, args.tokens or 512)
    if args.part in ("all", "model"):
        bench_model(args.tokens or 4096, blocks)
    if args.part == "methods":
        bench_methods(args.tokens or 2048, blocks or [0, 15, 29])


if __name__ == "__main__":
    main()
