"""Does the quantized layer run faster? torch's fused int8 / int4 kernels, their unfused forms and llama.cpp's Q8_0 /
Q4_0 against the fp32 and bf16 matmuls, one layer at a time, then decode tokens/s of SmolLM2 on the kernels.

    python3 benchmarks/bench_profile.py [--size 4096] [--repeats 5] [--no-model] [--tokens 32]

torch runs one thread (pinned: on a shared machine that is what reproduces). Outputs are checked first: each
fused torch kernel within models.kernels.output_bound of the exact product with its emulated weight, each llama.cpp
call within models.ggml_matmul.output_bound. Then, per M (1 and 512), the fastest of the interleaved repeats of every
variant (models.profiling.profile_linears, the lab's own measurement) and the ratios: fp32 / variant (> 1: faster
than fp32), unfused / fused, fp32 activations / bf16 activations. With the model: eval.speed's decode and prefill
tokens/s of the reference and of int8:row:scale=bf16 and int4:g128:scale=bf16 on the kernels, interleaved, with the
ratio's median and range. Load averages are printed before and after; times are printed, never asserted.
"""

from __future__ import annotations

import argparse
import os
import warnings

import numpy as np


def check_outputs(size: int) -> None:
    import torch

    from precisionlab.models import ggml_matmul, kernels, profiling
    from precisionlab.quant import quantize

    weight = profiling.random_weight(size, size)
    x = torch.randn(4, size, generator=torch.Generator().manual_seed(0))
    for scheme in (profiling.INT8_SCHEME, profiling.INT4_SCHEME):
        packed = kernels.pack(weight, scheme)
        y = kernels.kernel_matmul(packed, x.to(torch.bfloat16)).double().numpy()
        fraction = kernels.bound_fraction(y, x.numpy(), packed.emulated)
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


def layer_ratios(size: int, repeats: int) -> None:
    from precisionlab.models import profiling

    rows, skipped = profiling.profile_linears([profiling.LinearCase(f"{size}", profiling.random_weight(size, size))],
                                              (1, 512), repeats=repeats)
    for key, why in skipped.items():
        print(f"not run: {key}: {why}")
    for m in (1, 512):
        at = {r.variant: r for r in rows if r.m == m}
        fp32 = at["fp32"].ms
        print(f"\n{size}x{size}, M = {m}: ms per call (fastest of the interleaved repeats), fp32 / variant, "
              "weight MB, GB/s, conversion share")
        for r in at.values():
            print(f"  {r.variant:20} {r.ms:10.3f} ms  {fp32 / r.ms:7.3f}x  {r.weight_bytes / 1e6:8.2f} MB  "
                  f"{r.gbps:7.2f} GB/s  {r.conversion_share:6.3f}")
        print(f"  unfused int4 / fused int4 = {at['dequant_int4'].ms / at['fused_int4'].ms:.3g}; "
              f"unfused int8 / fused int8 = {at['dequant_int8'].ms / at['fused_int8'].ms:.3g}; "
              f"fp32 bytes / int4 bytes = {at['fp32'].weight_bytes / at['fused_int4'].weight_bytes:.3g}")
        if m == 1:
            for fused in ("fused_int8", "fused_int4"):
                slow = at[profiling.FP32_ACTIVATION[fused]]
                print(f"  {fused}: fp32 activations / bf16 activations = {slow.ms / at[fused].ms:.3g} "
                      f"({slow.ms:.3f} ms against {at[fused].ms:.3f} ms)")


def decode_ratios(tokens: int, repetitions: int) -> None:
    from precisionlab.eval import speed
    from precisionlab.models import load_model

    loaded = load_model("smollm2-135m")
    run = speed.speed_run(loaded, ["int8:row:scale=bf16", "int4:g128:scale=bf16"], threads=1, new_tokens=tokens,
                          repetitions=repetitions)
    part = speed.speed_part(run)
    f = part.findings
    print(f"\nSmolLM2-135M, batch 1, {run.settings['prompt_tokens']} prompt tokens then {tokens} decode steps, "
          f"{repetitions} interleaved repetitions: reference {f['eval.speed.reference.decode_tokens_per_s']:.3g} "
          f"decode tok/s, {f['eval.speed.reference.prefill_tokens_per_s']:.3g} prefill tok/s")
    for row in run.rows:
        key = f"eval.speed.{row.label}"
        print(f"  {row.label:22} {row.kernel}: decode {f[key + '.decode_tokens_per_s']:.3g} tok/s, ratio "
              f"{f[key + '.decode_ratio']:.3g} [{f[key + '.decode_ratio_min']:.3g}, {f[key + '.decode_ratio_max']:.3g}]"
              f"; prefill ratio {f[key + '.prefill_ratio']:.3g} [{f[key + '.prefill_ratio_min']:.3g}, "
              f"{f[key + '.prefill_ratio_max']:.3g}]; within {row.bound_fraction:.2f} of the bound, KL to the "
              f"emulation {row.kl_to_emulation:.2e} nats/token")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", type=int, default=4096)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--no-model", action="store_true", help="skip the SmolLM2 decode part")
    parser.add_argument("--tokens", type=int, default=32, help="decode steps per repetition")
    parser.add_argument("--repetitions", type=int, default=5)
    args = parser.parse_args()
    warnings.simplefilter("ignore")
    import torch

    torch.set_num_threads(1)
    print(f"load average at the start: {', '.join(f'{v:.2f}' for v in os.getloadavg())}; torch threads 1; "
          f"torch {torch.__version__}")
    check_outputs(min(args.size, 1024))
    layer_ratios(args.size, args.repeats)
    if not args.no_model:
        decode_ratios(args.tokens, args.repetitions)
    print(f"\nload average at the end: {', '.join(f'{v:.2f}' for v in os.getloadavg())}")


if __name__ == "__main__":
    main()
