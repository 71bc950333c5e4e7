"""Quantization-aware training: the fake quantization against torchao's QAT fake quantizer on the same int4 group
grid, and the seconds per training step on SmolLM2.

    python3 benchmarks/bench_qat.py                       # both parts
    python3 benchmarks/bench_qat.py layer [--rows 1536 --cols 576 --group 64 --repeat 20]
    python3 benchmarks/bench_qat.py step [--blocks 1 --tokens 128 --steps 5]

layer: one weight (SmolLM2's MLP shape by default) on int4 groups of 64 with fp16 scales (precisionlab's
  round-to-nearest scales), fake-quantized forward and backward (straight-through) by precisionlab.qat and by
  torchao's `_fake_quantize_per_channel_group` with the same scales, zero points 0 and codes -7 .. 7. Outputs are
  compared first: precisionlab rounds the exact quotient w / s, torchao rounds w * (1 / s), so the two may differ
  where w / s lies within an ulp of a tie (the count is printed); then the gradients, then the times (interleaved
  medians) and their ratio.
step: `qat.train` steps on SmolLM2-135M with the given blocks trained, distillation loss (teacher forward, student
  forward and backward, Adam) and next-token loss (no teacher), seconds per step.

Times are printed, never asserted.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _timing import interleaved


def layer(rows: int, cols: int, group: int, repeat: int) -> None:
    import torch

    from precisionlab.qat.fakequant import LayerGrid, fake_quantize
    from precisionlab.quant import quantize

    try:
        from torchao.quantization.qat.utils import _fake_quantize_per_channel_group
    except ImportError as exc:
        print(f"layer: skipped, torchao's QAT fake quantizer is not importable ({exc})")
        return
    rng = np.random.default_rng(0)
    w = (rng.standard_normal((rows, cols)) * 0.02).astype(np.float32)
    q = quantize(w, f"int4:g{group}")
    grid = LayerGrid.of(q)
    expanded = grid.expanded(torch)
    scales = torch.from_numpy(q.scale_values[0].astype(np.float32))
    zeros = torch.zeros_like(scales, dtype=torch.int32)
    upstream = torch.from_numpy(rng.standard_normal((rows, cols)).astype(np.float32))
    moved = torch.from_numpy(w + (rng.standard_normal(w.shape) * 0.004).astype(np.float32))  # a trained weight

    def ours() -> Any:
        x = moved.clone().requires_grad_(True)
        out = fake_quantize(x, grid, expanded)
        (out * upstream).sum().backward()
        return out.detach(), x.grad

    def torchao() -> Any:
        x = moved.clone().requires_grad_(True)
        out = _fake_quantize_per_channel_group(x, scales, zeros, -7, 7, group)
        (out * upstream).sum().backward()
        return out.detach(), x.grad

    (a, ga), (b, gb) = ours(), torchao()
    differ = int((a != b).sum())
    inside = torch.from_numpy(np.abs(moved.numpy() / np.repeat(q.scale_values[0], group, axis=1)[:, :cols]) <= 7.5)
    print(f"layer {rows}x{cols} int4:g{group}: outputs differ at {differ} of {a.numel()} elements "
          f"(ties of w / s against w * (1 / s)); exact against quant.dequantize: "
          f"{bool(np.array_equal(grid.quantized(moved).dequantize(), a.numpy()))}")
    rel = float(((ga[inside] - gb[inside]).abs() / gb[inside].abs().clamp_min(1e-30)).max())
    print(f"  gradients where both pass them (|w / s| <= 7.5): largest relative difference {rel:.2g} (torchao's is "
          f"upstream * s * (1 / s) in float32, precisionlab's the upstream itself); "
          f"beyond the range precisionlab passes 0 (clipped STE), torchao "
          f"{'0' if bool((gb[~inside] == 0).all()) else 'the upstream gradient'} ({int((~inside).sum())} elements)")
    times = interleaved({"precisionlab": ours, "torchao": torchao}, repeat)
    print(f"  forward + backward: precisionlab {times['precisionlab'] * 1e3:.2f} ms, torchao "
          f"{times['torchao'] * 1e3:.2f} ms, ratio {times['precisionlab'] / times['torchao']:.2f}x")


def step(blocks: list[int], tokens: int, steps: int) -> None:
    import torch

    from precisionlab.eval.overlap import BUILTIN, calibration_data
    from precisionlab.models import load_model
    from precisionlab.ptq import token_batches
    from precisionlab.qat.run import run_qat
    from precisionlab.qat.train import TrainConfig

    torch.set_num_threads(1)
    loaded = load_model("smollm2-135m")
    batches = token_batches(loaded.tokenizer, calibration_data(BUILTIN), tokens * steps, tokens)
    for loss in ("kl", "nll"):
        began = time.perf_counter()
        result = run_qat(loaded.model, "int4:g64", batches, TrainConfig(steps=steps, lr=1e-4, loss=loss), blocks=blocks)
        print(f"step: SmolLM2 blocks {blocks}, {tokens} tokens per step, {loss}: {result.seconds_per_step:.2f} s per "
              f"step (median {np.median(result.history.step_seconds):.2f} s; {time.perf_counter() - began:.1f} s "
              f"with the setup), {result.memory.trained if result.memory else 0:,} trained parameters, 1 thread")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("part", nargs="?", choices=("layer", "step", "all"), default="all")
    parser.add_argument("--rows", type=int, default=1536)
    parser.add_argument("--cols", type=int, default=576)
    parser.add_argument("--group", type=int, default=64)
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--blocks", default="1")
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--steps", type=int, default=5)
    args = parser.parse_args()
    if args.part in ("layer", "all"):
        layer(args.rows, args.cols, args.group, args.repeat)
    if args.part in ("step", "all"):
        step([int(b) for b in args.blocks.split(",")], args.tokens, args.steps)


if __name__ == "__main__":
    main()
