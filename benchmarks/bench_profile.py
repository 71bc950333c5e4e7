"""Does the quantized layer run faster? torch's fused int8 / int4 kernels, their unfused forms and llama.cpp's Q8_0 /
Q4_0 against the fp32 and bf16 matmuls, one layer at a time, then decode tokens/s of SmolLM2 on the kernels; every
ratio printed with the conditions it was measured under.

    python3 benchmarks/bench_profile.py [--size 4096] [--repeats 5] [--no-model] [--tokens 32] [--threads 1]

torch runs `--threads` threads (1 by default: on a shared machine that is what reproduces). Outputs are checked
first: each torch kernel within models.kernels.output_bound of the exact product with its emulated weight (int8:row
too, its fp16 row scales multiplying the kernel's output), each llama.cpp call within models.ggml_matmul.output_bound.
Then, per M (1 and 512), the fastest of the interleaved repeats of every variant (models.profiling.profile_linears,
the lab's own measurement), the op torch.profiler saw run, and the ratios: fp32 / variant (> 1: faster than fp32),
unfused / fused, fp32 activations / bf16 activations. With the model: eval.speed's decode and prefill tokens/s of the
reference and of int8:row and int4:g128:scale=bf16 on the kernels, interleaved, with the ratio's median and range and
the kernel op's calls per forward. Each part prints its conditions: threads, the load average before and after it,
the shapes, the dtypes, the op, torch's CPU capability. Times are printed, never asserted.
"""

from __future__ import annotations

import argparse
import os
import warnings
from pathlib import Path

import numpy as np


def load() -> str:
    return ", ".join(f"{v:.2f}" for v in os.getloadavg())


def cpu_name() -> str:
    cpuinfo = Path("/proc/cpuinfo")
    for line in cpuinfo.read_text(errors="replace").splitlines() if cpuinfo.exists() else []:
        if line.lower().startswith("model name"):
            return line.split(":", 1)[1].strip()
    return "unknown CPU"


def check_outputs(size: int) -> None:
    import torch

    from precisionlab.models import ggml_matmul, kernels, profiling
    from precisionlab.quant import quantize

    weight = profiling.random_weight(size, size)
    x = torch.randn(4, size, generator=torch.Generator().manual_seed(0))
    for scheme in (profiling.INT8_SCHEME, "int8:row", profiling.INT4_SCHEME):
        packed = kernels.pack(weight, scheme)
        y = kernels.kernel_matmul(packed, x.to(torch.bfloat16)).double().numpy()
        fraction = kernels.bound_fraction(y, x.numpy(), packed.emulated, kernels.output_rounding(packed))
        print(f"check {scheme:22} on {packed.kernel}: max deviation / stated bound = {fraction:.3f}")
        assert fraction <= 1.0, scheme
    if ggml_matmul.missing_reason():
        print(f"llama.cpp: skipped ({ggml_matmul.missing_reason()})")
        return
    for kind in ("Q8_0", "Q4_0"):
        with ggml_matmul.GgmlMatmul(weight.numpy(), kind, 4) as mm:
            mm.set_input(x.numpy())
            mm.run()
            y = mm.output().astype(np.float64)
        emulated = quantize(weight.numpy(), f"gguf_{kind.lower()}").dequantize()
        exact, bound = ggml_matmul.output_bound(x.numpy(), emulated)
        fraction = float((np.abs(y - exact) / bound).max())
        print(f"check llama.cpp {kind:12}: max deviation / stated bound = {fraction:.3f}")
        assert fraction <= 1.0, kind


def layer_ratios(size: int, repeats: int, threads: int) -> None:
    from precisionlab.models import profiling

    before = load()
    rows, skipped = profiling.profile_linears([profiling.LinearCase(f"{size}", profiling.random_weight(size, size))],
                                              (1, 512), repeats=repeats, threads=threads)
    after = load()
    for key, why in skipped.items():
        print(f"not run: {key}: {why}")
    for m in (1, 512):
        at = {r.variant: r for r in rows if r.m == m}
        fp32 = at["fp32"].ms
        print(f"\n{size}x{size} (N = K = {size}), M = {m}: ms per call (fastest of the interleaved repeats), "
              "fp32 / variant, weight MB, GB/s, conversion share, activations, weights, the op that ran")
        for r in at.values():
            print(f"  {r.variant:20} {r.ms:10.3f} ms  {fp32 / r.ms:7.3f}x  {r.weight_bytes / 1e6:8.2f} MB  "
                  f"{r.gbps:7.2f} GB/s  {r.conversion_share:6.3f}  {r.activation:21}  {r.weights:39}  {r.op}"
                  f"{'  NOTE: ' + r.note if r.note else ''}")
        print(f"  unfused int4 / fused int4 = {at['dequant_int4'].ms / at['fused_int4'].ms:.3g}; "
              f"unfused int8 / fused int8 = {at['dequant_int8'].ms / at['fused_int8'].ms:.3g}; "
              f"fp32 bytes / int4 bytes = {at['fp32'].weight_bytes / at['fused_int4'].weight_bytes:.3g}")
        if m == 1:
            for fused in ("fused_int8", "fused_int4"):
                slow = at[profiling.FP32_ACTIVATION[fused]]
                print(f"  {fused}: fp32 activations / bf16 activations = {slow.ms / at[fused].ms:.3g} "
                      f"({slow.ms:.3f} ms against {at[fused].ms:.3f} ms)")
    print(f"  conditions: {threads} torch thread(s); load average {before} before the layer, {after} after")


def decode_ratios(tokens: int, repetitions: int, threads: int) -> None:
    from precisionlab.eval import speed
    from precisionlab.models import load_model

    loaded = load_model("smollm2-135m")
    run = speed.speed_run(loaded, ["int8:row", "int4:g128:scale=bf16"], threads=threads, new_tokens=tokens,
                          repetitions=repetitions)
    part = speed.speed_part(run)
    f = part.findings
    print(f"\nSmolLM2-135M, batch 1, {run.settings['prompt_tokens']} prompt tokens then {tokens} decode steps, "
          f"{repetitions} interleaved repetitions: reference {f['eval.speed.reference.decode_tokens_per_s']:.3g} "
          f"decode tok/s, {f['eval.speed.reference.prefill_tokens_per_s']:.3g} prefill tok/s")
    for row in run.rows:
        key = f"eval.speed.{row.label}"
        print(f"  {row.label:22} {row.kernel} ({row.op} x {row.op_calls} a forward, {row.layers} layers): decode "
              f"{f[key + '.decode_tokens_per_s']:.3g} tok/s, ratio "
              f"{f[key + '.decode_ratio']:.3g} [{f[key + '.decode_ratio_min']:.3g}, {f[key + '.decode_ratio_max']:.3g}]"
              f"; prefill ratio {f[key + '.prefill_ratio']:.3g} [{f[key + '.prefill_ratio_min']:.3g}, "
              f"{f[key + '.prefill_ratio_max']:.3g}]; within {row.bound_fraction:.2f} of the bound, KL to the "
              f"emulation {row.kl_to_emulation:.2e} nats/token{'; ' + row.note if row.note else ''}")
    print(f"  {speed.conditions_line(run.settings)}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", type=int, default=4096)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--no-model", action="store_true", help="skip the SmolLM2 decode part")
    parser.add_argument("--tokens", type=int, default=32, help="decode steps per repetition")
    parser.add_argument("--repetitions", type=int, default=5)
    args = parser.parse_args()
    warnings.simplefilter("ignore")
    import torch

    from precisionlab import peers
    from precisionlab.labs.profile import last_level_cache_mb
    from precisionlab.models.kernels import cpu_capability

    print(f"load average at the start: {load()}; torch threads {args.threads}; torch {torch.__version__}; "
          f"{cpu_name()}, {os.cpu_count()} CPUs, torch CPU capability {cpu_capability()}, last-level cache "
          f"{last_level_cache_mb()} MB")
    with peers.torch_threads(args.threads):
        check_outputs(min(args.size, 1024))
        layer_ratios(args.size, args.repeats, args.threads)
        if not args.no_model:
            decode_ratios(args.tokens, args.repetitions, args.threads)
    print(f"\nload average at the end: {load()}")


if __name__ == "__main__":
    main()
