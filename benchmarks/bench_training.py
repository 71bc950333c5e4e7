"""What the training-numerics code costs, against peers measured in the same run.

    python3 benchmarks/bench_training.py [--repeat 3 --values 1000000]

  census        census() of --values float32 gradients in fp16 (round_to, float64)
                  peer: the same count by numpy's float32 -> float16 cast
  toy step      one emulated fp16 + master + scaling step (every tensor rounded by round_to)
                  peer: one float64 SGD-momentum step with no rounding at all
  scaler        DynamicLossScaler over 2,000 overflow events
                  peer: torch.amp.GradScaler("cpu") on the same events, when torch is installed
  full lab      labs.lossscale.run() at its default sizes (the issue's bar: under 30 s)

Prints seconds (best of --repeat) and each ratio to its peer. Nothing is asserted.
"""

from __future__ import annotations

import argparse
import os
import platform
import time

import numpy as np

from _timing import best_of


def numpy_census(values: np.ndarray) -> tuple[int, int]:
    rounded = np.abs(values.astype(np.float16))
    return int(np.count_nonzero((rounded > 0) & (rounded < 2.0**-14))), int(np.count_nonzero(rounded == 0))


def float64_steps(x: np.ndarray, y: np.ndarray, steps: int) -> np.ndarray:
    n = x.shape[0]
    w, buf = np.zeros(x.shape[1]), np.zeros(x.shape[1])
    for _ in range(steps):
        r = x @ w - y
        buf = 0.9 * buf + x.T @ (2 * r / n)
        w = w - 0.5 * buf
    return w


def torch_scaler(events: list[bool]) -> None:
    import torch

    param = torch.nn.Parameter(torch.zeros(8))
    opt = torch.optim.SGD([param], lr=0.1)
    scaler = torch.amp.GradScaler("cpu", growth_interval=50)
    for found_inf in events:
        scaler.scale(torch.tensor(1.0))
        param.grad = torch.full((8,), float("inf") if found_inf else 1.0)
        scaler.step(opt)
        scaler.update()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--values", type=int, default=1_000_000)
    args = parser.parse_args()

    from precisionlab.labs import lossscale
    from precisionlab.training import DynamicLossScaler, census, from_values, scale_trace
    from precisionlab.training.toy import TrainConfig, get_variant, make_problem, train

    print(f"python {platform.python_version()}, numpy {np.__version__}, {platform.machine()}, "
          f"{os.cpu_count()} CPUs, {time.strftime('%Y-%m-%d')}")
    rng = np.random.default_rng(0)
    grads = (rng.standard_normal(args.values) * 10.0 ** rng.uniform(-9, 0, args.values)).astype(np.float32)
    sample = from_values(grads)
    ours = best_of(lambda: census(sample, "fp16"), args.repeat)
    peer = best_of(lambda: numpy_census(grads), args.repeat)
    label = f"census of {args.values:,} values"
    print(f"{label:<28}: {ours:8.4f} s   numpy cast {peer:8.4f} s   ratio {ours / peer:6.1f}x")

    problem = make_problem()
    steps = 100
    variant = get_variant("fp16_master_scaled")
    ours = best_of(lambda: train(problem, variant, TrainConfig(steps=steps)), args.repeat) / steps
    peer = best_of(lambda: float64_steps(problem.features, problem.targets, steps), args.repeat) / steps
    print(f"{f'toy step (N={problem.samples})':<28}: {ours * 1e3:8.3f} ms  float64    {peer * 1e3:8.3f} ms  "
          f"ratio {ours / peer:6.1f}x")

    events = [bool(v) for v in rng.random(2000) < 0.05]
    ours = best_of(lambda: scale_trace(events, DynamicLossScaler(growth_interval=50)), args.repeat)
    try:
        peer = best_of(lambda: torch_scaler(events), args.repeat)
        print(f"scaler, 2,000 events        : {ours:8.4f} s   GradScaler {peer:8.4f} s   ratio {ours / peer:6.2f}x")
    except ImportError:
        print(f"scaler, 2,000 events        : {ours:8.4f} s   (torch not installed: no peer)")

    full = best_of(lambda: lossscale.run(), 1)
    print(f"full lab at default sizes   : {full:8.2f} s   (bar: 30 s)")


if __name__ == "__main__":
    main()
