"""Rounding throughput: precisionlab against ml_dtypes, torch's native cast and a memory copy.

Rounds N float32 values (default 16M, standard normal) to e4m3, e5m2, e2m1 and bf16 and
prints Melem/s (best of --repeat runs) for:
  precisionlab on a numpy array, precisionlab on a torch tensor,
  ml_dtypes' astype round trip (float32 -> format -> float32),
  torch's native .to(dtype).to(float32) round trip where torch has the dtype,
  a plain copy of the same bytes (the memory-bound ceiling),
and the ratios the README records. Then the IEEE P3109 formats and the rounding modes: each
against precisionlab's own e4m3 nearest-even rate (the 8-bit table path serves them all), with
gfloat's round_ndarray (the P3109 reference) timed on N/16 values after its outputs are compared
with precisionlab's (differing outputs counted). Nothing is asserted: machines are noisy.

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
P3109 = ("binary8p3se", "binary8p4se", "binary8p3uf", "binary8p4sf", "binary6p3se", "binary8p1ue", "binary8p8ue")
"""binary8p1ue and binary8p8ue are the family's exceptions to the 8-bit table path (see the README)."""
MODES = ("nearest_even", "toward_zero", "toward_positive", "toward_negative", "to_odd")
GFLOAT_MODES = {"nearest_even": "TiesToEven", "toward_zero": "TowardZero", "toward_positive": "TowardPositive",
                "toward_negative": "TowardNegative"}  # gfloat 0.5 has no ToOdd


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
    p3109_and_modes(x, args.repeat, torch)


def p3109_and_modes(x: np.ndarray, repeat: int, torch: object) -> None:
    """P3109 formats and rounding modes against precisionlab's e4m3 nearest-even rate, and gfloat."""
    try:
        import gfloat
        from gfloat.formats import format_info_p3109
        from gfloat.types import Domain, RoundMode, Signedness
    except ImportError:
        gfloat = None
    n = x.size
    small = x[: max(n // 16, 1)]
    base = best_rate(lambda: pl.round_to(x, "e4m3"), n, repeat)
    print(f"\nIEEE P3109 formats and rounding modes; 'vs e4m3': against precisionlab e4m3 nearest_even "
          f"({base:.0f} Melem/s, measured again here); gfloat on {small.size} values")
    print(f"{'format':<12} {'mode':<16} {'pl numpy':>9} {'pl torch':>9} {'vs e4m3':>8} {'gfloat':>8} "
          f"{'vs gfloat':>10} {'differ':>7}")
    rows = [("e4m3", mode) for mode in MODES] + [(name, "nearest_even") for name in P3109]
    rows += [("binary8p3se", mode) for mode in MODES[1:]]
    tx = torch.from_numpy(x.copy()) if torch is not None else None  # type: ignore[attr-defined]
    for name, mode in rows:
        ours = best_rate(lambda name=name, mode=mode: pl.round_to(x, name, rounding=mode), n, repeat)
        ours_t = float("nan")
        if tx is not None:
            ours_t = best_rate(lambda name=name, mode=mode: pl.round_to(tx, name, rounding=mode), n, repeat)
        peer, differ = float("nan"), ""
        fmt = pl.get_format(name)
        if gfloat is not None and name.startswith("binary") and mode in GFLOAT_MODES:
            fi = format_info_p3109(fmt.bits, fmt.man_bits + 1, Signedness.Signed if fmt.signed else Signedness.Unsigned,
                                   Domain.Extended if fmt.extended else Domain.Finite)
            rnd = getattr(RoundMode, GFLOAT_MODES[mode])
            sample = small if fmt.signed else np.abs(small)  # gfloat passes negatives to unsigned formats through
            with np.errstate(over="ignore"):
                theirs = gfloat.round_ndarray(fi, sample, rnd)
            mine = pl.round_to(sample, fmt, rounding=mode)
            differ = str(int(np.count_nonzero(~((mine == theirs) | (np.isnan(mine) & np.isnan(theirs))))))
            with np.errstate(over="ignore"):
                peer = best_rate(lambda fi=fi, rnd=rnd, s=sample: gfloat.round_ndarray(fi, s, rnd), sample.size, repeat)
        print(f"{fmt.name:<12} {mode:<16} {ours:9.0f} {ours_t:9.0f} {ours / base:7.2f}x {peer:8.1f} "
              f"{ours / peer:9.0f}x {differ:>7}")


if __name__ == "__main__":
    main()
