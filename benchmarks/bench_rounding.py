"""Rounding throughput: precisionlab against ml_dtypes, torch's native cast and a memory copy.

Rounds N float32 values (default 16M, standard normal) to e4m3, e5m2, e2m1 and bf16 and
prints Melem/s (best of --repeat runs) for:
  precisionlab on a numpy array, precisionlab on a torch tensor,
  ml_dtypes' astype round trip (float32 -> format -> float32),
  torch's native .to(dtype).to(float32) round trip where torch has the dtype,
  a plain copy of the same bytes (the memory-bound ceiling),
and the ratios the README records. Nothing is asserted: machines are noisy.

    python3 benchmarks/bench_rounding.py [--n 16777216] [--repeat 5]
"""

from __future__ import annotations

import argparse
import os
import platform
from collections.abc import Callable

import numpy as np

import precisionlab as pl
from _timing import best_of

FORMATS = {"e4m3": ("float8_e4m3fn", "float8_e4m3fn"), "e5m2": ("float8_e5m2", "float8_e5m2"),
           "e2m1": ("float4_e2m1fn", None), "bf16": ("bfloat16", "bfloat16")}


def best_rate(func: Callable[[], object], n: int, repeat: int) -> float:
    func()  # warm-up: builds tables, starts the thread pool
    return n / best_of(func, repeat) / 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=1 << 24)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()

    x = np.random.default_rng(0).standard_normal(args.n).astype(np.float32)
    try:
        import ml_dtypes
    except ImportError:
        ml_dtypes = None
    try:
        import torch

        tx = torch.from_numpy(x.copy())
    except ImportError:
        torch = None

    copy_rate = best_rate(lambda: x.copy(), args.n, args.repeat)
    print(f"# {args.n} float32 values, best of {args.repeat}; {platform.processor() or platform.machine()}, "
          f"{os.cpu_count()} cores; numpy {np.__version__}"
          + (f", ml_dtypes {ml_dtypes.__version__}" if ml_dtypes else "")
          + (f", torch {torch.__version__}" if torch else ""))
    print(f"memory copy: {copy_rate:.0f} Melem/s")
    header = f"{'format':<6} {'pl numpy':>9} {'pl torch':>9} {'ml_dtypes':>10} {'torch':>8} {'vs ml_dtypes':>13} " \
             f"{'vs torch':>9} {'of copy':>8}"
    print(header)
    for name, (ml_name, torch_name) in FORMATS.items():
        ours = best_rate(lambda name=name: pl.round_to(x, name), args.n, args.repeat)
        ours_t = peer_ml = peer_t = float("nan")
        if torch is not None:
            ours_t = best_rate(lambda name=name: pl.round_to(tx, name), args.n, args.repeat)
            if torch_name is not None:
                dtype = getattr(torch, torch_name)
                peer_t = best_rate(lambda dtype=dtype: tx.to(dtype).to(torch.float32), args.n, args.repeat)
        if ml_dtypes is not None:
            dtype = getattr(ml_dtypes, ml_name)
            peer_ml = best_rate(lambda dtype=dtype: x.astype(dtype).astype(np.float32), args.n, args.repeat)
        print(f"{name:<6} {ours:9.0f} {ours_t:9.0f} {peer_ml:10.0f} {peer_t:8.0f} {ours / peer_ml:12.2f}x "
              f"{ours_t / peer_t:8.2f}x {ours / copy_rate:7.2f}x")


if __name__ == "__main__":
    main()
