"""Rounding speed: precisionlab against ml_dtypes, torch, numpy's own casts and a memory copy.

Every contender's output is compared with precisionlab's, bit for bit, before it is timed, and
the number of differing outputs is printed next to its time. Contenders are timed in
interleaved rounds after one warm-up call each, and medians are compared. Sections:

  throughput  --n float32 values (default 2^24, standard normal) rounded to a format and back:
              precisionlab on a numpy array; "pl on torch", precisionlab's round_to on a torch
              tensor, which is torch's own cast (plus one overflow-policy pass where torch's
              policy differs, as for e4m3) or, where torch has no dtype (e2m1), the numpy engine
              on a host copy; ml_dtypes' astype round trip; torch's .to(dtype).to(float32); for
              fp16 numpy's own astype(float16) round trip; a plain copy (the memory ceiling).
  small       time per call at n = 1, 10, 100, 256, 1000 and 10^4 against ml_dtypes (numpy's cast for
              fp16), alternated call by call; bf16 and fp16 also with overflow="saturate" (against the
              peer's plain cast); and float64 input's time over float32's at each n.
  float64     float64 input against float32 input, for every format of 8 bits or fewer and bf16 / fp16 (also
              saturating), at 2^21, 2^22 and 2^23 elements with the page faults of each call (torch, and
              ml_dtypes before 0.7, round float64 twice, through float32, so they are not timed).
  threads     the chunk kernels on one thread and on the pool (PRECISIONLAB_THREADS, else the
              CPUs), 2^18 to 2^26 elements, and the smallest size where the pool was faster.
  p3109       the IEEE P3109 formats and the rounding modes against precisionlab's own e4m3
              nearest-even rate, and gfloat's round_ndarray (the P3109 reference) on n/16 values
              after its outputs are compared with precisionlab's; then every 8-bit P3109 format
              in every deterministic mode against e4m3 in the same mode (issue 17's bar: within
              10%), with the kernel that serves it.
  targets     each target of the engine-speed work: met or missed, with the measured ratio.

Nothing is asserted: the machine may be shared (its load average is printed first and last).

    python3 benchmarks/bench_rounding.py [--n 16777216] [--repeat 7] [--only throughput,small,...]
"""

from __future__ import annotations

import argparse
import datetime
import math
import os
import platform
import resource
from collections.abc import Callable
from functools import partial
from typing import Any

import numpy as np

import precisionlab as pl
from _timing import interleaved, paired_calls
from precisionlab import parallel
from precisionlab.formats import p3109_formats
from precisionlab.rounding import chunks, dispatch

THROUGHPUT = {"e4m3": ("float8_e4m3fn", "float8_e4m3fn"), "e5m2": ("float8_e5m2", "float8_e5m2"),
              "e2m1": ("float4_e2m1fn", None), "bf16": ("bfloat16", "bfloat16"), "fp16": (None, "float16")}
"""format: (ml_dtypes type, torch dtype); fp16's ml_dtypes column is numpy's own float16."""
SMALL = {"e4m3": "float8_e4m3fn", "e5m2": "float8_e5m2", "e4m3fnuz": "float8_e4m3fnuz",
         "e5m2fnuz": "float8_e5m2fnuz", "e3m2": "float6_e3m2fn", "e2m3": "float6_e2m3fn", "e2m1": "float4_e2m1fn",
         "ue8m0": "float8_e8m0fnu", "bf16": "bfloat16", "fp16": None}
SATURATING = ("bf16", "fp16")
"""Also timed with overflow="saturate" (PTX .satfinite, Triton's casts), against the peer's plain cast."""
SMALL_SIZES = (1, 10, 100, 256, 1000, 10_000)
"""256 is the binary search's largest size (float32), where it costs the most; 100 lies between it and bf16's
direct integer kernel (from 129 elements)."""
FRESH_FAULTS = 100
"""Page faults per call above which an output counts as mapped fresh (one that reuses heap memory
takes 0-25 here; a fresh 32 MiB one about 530)."""
FLOAT64_SIZES = (1 << 21, 1 << 22, 1 << 23)
"""float64 against float32 input: below, at and above the size where only the float64 output is mapped fresh."""
EIGHT_BIT = ("e4m3", "e5m2", "e4m3fnuz", "e5m2fnuz", "e3m2", "e2m3", "e2m1", "ue8m0", "int8", "int4", "uint8")
THREAD_SIZES = tuple(1 << k for k in (18, 20, 22, 24, 26))
P3109 = ("binary8p3se", "binary8p4se", "binary8p3uf", "binary8p4sf", "binary6p3se", "binary8p1ue", "binary8p1uf",
         "binary8p8ue", "binary8p8uf")
P3109_8BIT = tuple(f.name for f in p3109_formats(8))
"""Every 8-bit P3109 format (signed and unsigned, finite and extended, p1 to p8), timed in every mode of MODES."""
MODES = ("nearest_even", "toward_zero", "toward_positive", "toward_negative", "to_odd")
GFLOAT_MODES = {"nearest_even": "TiesToEven", "toward_zero": "TowardZero", "toward_positive": "TowardPositive",
                "toward_negative": "TowardNegative"}  # gfloat 0.5 has no ToOdd
SECTIONS = ("throughput", "small", "float64", "threads", "p3109")

OVERHEAD_MAX = 3.0
P3109_MIN = 0.9
"""Issue 17: the P3109 formats' speed within 10% of e4m3's (e4m3's time over theirs >= 0.9)."""
FLOAT64_MAX = 2.0
MOONSHOT = 0.5

Target = tuple[str, float, bool]  # (what, measured ratio, met)


def differing(ours: np.ndarray, other: Any) -> int:
    """Outputs whose bits differ (two NaNs count as equal: payloads are conventions)."""
    a = np.asarray(ours, dtype=np.float32).reshape(-1)
    b = np.asarray(other.float().numpy() if hasattr(other, "numpy") else other, dtype=np.float32).reshape(-1)
    same = (a.view(np.uint32) == b.view(np.uint32)) | (np.isnan(a) & np.isnan(b))
    return int(a.size - np.count_nonzero(same))


def peers() -> tuple[Any, Any]:
    try:
        import ml_dtypes
    except ImportError:
        ml_dtypes = None
    try:
        import torch
    except ImportError:
        torch = None
    return ml_dtypes, torch


def load() -> str:
    return " ".join(f"{v:.1f}" for v in os.getloadavg()) if hasattr(os, "getloadavg") else "n/a"


def throughput(n: int, repeat: int, ml_dtypes: Any, torch: Any) -> list[Target]:
    x = np.random.default_rng(0).standard_normal(n).astype(np.float32)
    tx = torch.from_numpy(x.copy()) if torch is not None else None
    copy = interleaved({"copy": x.copy}, repeat)["copy"]
    print(f"\n## throughput: {n} float32 values, Melem/s (median of {repeat} interleaved rounds)")
    print(f"memory copy: {n / copy / 1e6:.0f} Melem/s")
    print("format  contender                                   Melem/s   differing  vs ml_dtypes  vs torch  of copy")
    targets: list[Target] = []
    for name, (ml_name, torch_name) in THROUGHPUT.items():
        ours = pl.round_to(x, name)
        contenders: dict[str, Callable[[], object]] = {"precisionlab (numpy)": lambda name=name: pl.round_to(x, name)}
        outputs: dict[str, Any] = {}
        if tx is not None:
            contenders["pl on torch (torch's cast + policy pass)" if torch_name else "pl on torch (numpy engine)"] = (
                lambda name=name: pl.round_to(tx, name))
        if ml_name is not None and ml_dtypes is not None:
            peer = getattr(ml_dtypes, ml_name)
            contenders["ml_dtypes astype round trip"] = lambda peer=peer: x.astype(peer).astype(np.float32)
        if name == "fp16":
            contenders["numpy astype(float16) round trip"] = lambda: x.astype(np.float16).astype(np.float32)
        if torch_name is not None and tx is not None:
            dtype = getattr(torch, torch_name)
            contenders["torch .to(dtype).to(float32)"] = lambda dtype=dtype: tx.to(dtype).to(torch.float32)
        for label, fn in contenders.items():
            outputs[label] = differing(ours, fn())
        times = interleaved(contenders, repeat)
        ml_label = "numpy astype(float16) round trip" if name == "fp16" else "ml_dtypes astype round trip"
        torch_label = "torch .to(dtype).to(float32)"
        for label, seconds in times.items():
            vs_ml = times[ml_label] / seconds if ml_label in times else float("nan")
            vs_torch = times[torch_label] / seconds if torch_label in times else float("nan")
            print(f"{name:<7} {label:<42} {n / seconds / 1e6:8.0f} {outputs[label]:>10}  {vs_ml:11.2f}x "
                  f"{vs_torch:8.2f}x {copy / seconds:7.2f}")
        ratio = times[ml_label] / times["precisionlab (numpy)"] if ml_label in times else float("nan")
        if name == "bf16":
            targets.append(("bf16 from float32: >= 1.0x ml_dtypes' round trip", ratio, ratio >= 1.0))
        if name == "fp16":
            targets.append(("fp16 from float32: >= 1.0x numpy's astype round trip", ratio, ratio >= 1.0))
        if name == "e4m3":
            share = copy / times["precisionlab (numpy)"]
            targets.append(("moonshot: e4m3 round trip >= 50% of copy bandwidth", share, share >= MOONSHOT))
    return targets


def small(ml_dtypes: Any, calls: int) -> list[Target]:
    print(f"\n## small arrays: microseconds per call (median of {calls} calls, alternated with the peer's), and "
          "float64 input's time over float32's (alternated likewise)")
    print("format         peer                          " + "".join(f"   n={n:<6} ratio  f64" for n in SMALL_SIZES))
    targets: list[Target] = []
    rng = np.random.default_rng(1)
    rows = [(name, ml_name, None) for name, ml_name in SMALL.items()]
    rows += [(name, SMALL[name], "saturate") for name in SATURATING]
    for name, ml_name, overflow in rows:
        if ml_name is None:
            peer_type, peer_label = np.float16, "numpy astype(float16)"
        elif ml_dtypes is None:
            continue
        else:
            peer_type, peer_label = getattr(ml_dtypes, ml_name), f"ml_dtypes {ml_name}"
        cells, worst, worst64 = [], 0.0, 0.0
        for n in SMALL_SIZES:
            x = rng.standard_normal(n).astype(np.float32)
            x64 = x.astype(np.float64)
            with np.errstate(invalid="ignore"):  # ue8m0: negatives have no code (NaN in both)
                diff = differing(pl.round_to(x, name, overflow=overflow), x.astype(peer_type).astype(np.float32))
                diff += differing(pl.round_to(x64, name, overflow=overflow), pl.round_to(x, name, overflow=overflow))
                ours = partial(pl.round_to, x, name, overflow=overflow)
                ours_s, peer_s = paired_calls(ours, lambda x=x, t=peer_type: x.astype(t).astype(np.float32), calls)
                wide_s, narrow_s = paired_calls(partial(pl.round_to, x64, name, overflow=overflow), ours, calls)
            ratio, wide = ours_s / peer_s, wide_s / narrow_s
            if n <= 1000:
                worst = max(worst, ratio)
            worst64 = max(worst64, wide)
            flag = "" if diff == 0 else f" ({diff} differ)"
            cells.append(f" {ours_s * 1e6:6.2f}/{peer_s * 1e6:<6.2f} {ratio:4.1f} {wide:4.2f}{flag}")
        label = name + (" sat" if overflow else "")
        print(f"{label:<14} {peer_label:<30}" + "".join(cells))
        targets.append((f"per-call time, n <= 1000, {label}: <= {OVERHEAD_MAX:g}x {peer_label}", worst,
                        worst <= OVERHEAD_MAX))
        targets.append((f"per-call time, float64 input, {label}: within {FLOAT64_MAX:g}x of float32 at every n",
                        worst64, worst64 <= FLOAT64_MAX))
    print("(cells: precisionlab / peer microseconds, their ratio, then float64 input's time over float32's; "
          "'sat': overflow='saturate', against the peer's plain cast; 'differ': outputs unlike the peer's or the "
          "float32 input's)")
    return targets


def faults_per_call(call: Callable[[], Any], calls: int = 5) -> float:
    """Minor page faults per call (the kernel mapping fresh memory for a new output array)."""
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(calls):
        call()
    return (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before) / calls


def float64(sizes: tuple[int, ...], repeat: int) -> list[Target]:
    print(f"\n## float64 input against float32 input, Melem/s (median of {repeat} interleaved rounds), page faults "
          "per call")
    print("A new output of 32 MiB or more is mapped fresh by glibc on every call (its mmap threshold tops out there) "
          "and pays its page faults; a smaller one reuses freed heap memory. At 2^22 elements only the float64 "
          "output (32 MiB) is that large, so that row compares allocations as much as rounding; the target reads "
          "the sizes where both outputs are allocated alike (2^21: neither faults, 2^23: both do).")
    print("format    " + "".join(f"  n=2^{n.bit_length() - 1}: f32  f64 ratio (faults f32/f64)" for n in sizes))
    rng = np.random.default_rng(2)
    inputs = {n: rng.standard_normal(n).astype(np.float32) for n in sizes}
    targets: list[Target] = []
    rows = [(name, None) for name in EIGHT_BIT] + [(name, overflow) for name in SATURATING for overflow in
                                                   (None, "saturate")]
    for name, overflow in rows:
        cells, worst = [], 0.0
        for n, x32 in inputs.items():
            x64 = x32.astype(np.float64)
            narrow_call = partial(pl.round_to, x32, name, overflow=overflow)
            wide_call = partial(pl.round_to, x64, name, overflow=overflow)
            same = differing(narrow_call(), wide_call())
            times = interleaved({"32": narrow_call, "64": wide_call}, repeat)
            ratio = times["64"] / times["32"]
            faults = (faults_per_call(narrow_call), faults_per_call(wide_call))
            alike = (faults[0] > FRESH_FAULTS) == (faults[1] > FRESH_FAULTS)
            if alike:
                worst = max(worst, ratio)
            flag = "" if same == 0 else f" {same} differ"
            cells.append(f"  {n / times['32'] / 1e6:10.0f} {n / times['64'] / 1e6:4.0f} {ratio:5.2f} "
                         f"({faults[0]:.0f}/{faults[1]:.0f}){'' if alike else '*'}{flag}")
        label = name + (" sat" if overflow else "")
        print(f"{label:<9} " + "".join(cells))
        targets.append((f"float64 input, {label}: within {FLOAT64_MAX:g}x of float32 (sizes allocated alike)", worst,
                        worst <= FLOAT64_MAX))
    print("(*: only one side's output was mapped fresh; not in the target)")
    return targets


def threads(repeat: int) -> list[Target]:
    workers = parallel.pool_size()
    start = chunks.PARALLEL_MIN
    print(f"\n## threads: chunk kernels on 1 thread and on the pool ({workers} threads), Melem/s "
          f"(median of {repeat} interleaved rounds); round_to uses the pool from 2^{start.bit_length() - 1} elements")
    if workers < 2:
        print("one worker configured: nothing to compare")
        return []
    rng = np.random.default_rng(3)
    used: list[float] = []
    for name in ("e4m3", "bf16", "fp16"):
        pl.round_to(np.ones(4, np.float32), name)
        kernel = dispatch.find(name, np.dtype(np.float32), "nearest_even", None, "raise")
        assert kernel is not None and kernel.chunk is not None
        speedups = {}
        for size in THREAD_SIZES:
            x = rng.standard_normal(size).astype(np.float32)
            out = np.empty(size, dtype=kernel.out_dtype)
            times = interleaved({
                "one": lambda x=x, out=out, k=kernel.chunk: chunks.run_chunked(k, x, out, parallel_min=1 << 62),
                "pool": lambda x=x, out=out, k=kernel.chunk: chunks.run_chunked(k, x, out, parallel_min=0)}, repeat)
            speedups[size] = times["one"] / times["pool"]
            if size >= start:
                used.append(speedups[size])
            print(f"{name:<6} n=2^{size.bit_length() - 1:<3} 1 thread {size / times['one'] / 1e6:7.0f}   "
                  f"{workers} threads {size / times['pool'] / 1e6:7.0f}   speedup {speedups[size]:5.2f}")
        pays = [s for s in THREAD_SIZES if all(speedups[t] >= 1.1 for t in THREAD_SIZES if t >= s)]
        since = f"2^{pays[0].bit_length() - 1}" if pays else "no size"
        print(f"{name:<6} the pool was >= 1.1x faster from: {since}")
    if not used:
        return [(f"threads: pool never slower (not measured at >= 2^{start.bit_length() - 1}, where it is used)",
                 float("nan"), True)]
    worst = min(used)
    return [(f"threads: pool never slower than one thread where used (>= 2^{start.bit_length() - 1})", worst,
             worst >= 1.0)]


def p3109(n: int, repeat: int) -> list[Target]:
    """P3109 formats and rounding modes against precisionlab's e4m3, and gfloat."""
    try:
        import gfloat
        from gfloat.formats import format_info_p3109
        from gfloat.types import Domain, RoundMode, Signedness
    except ImportError:
        gfloat = None
    x = np.random.default_rng(4).standard_normal(n).astype(np.float32)
    small = x[: max(n // 16, 1)]
    rows = [("e4m3", mode) for mode in MODES] + [(name, "nearest_even") for name in P3109]
    rows += [("binary8p3se", mode) for mode in MODES[1:]]
    def timed(pairs: list[tuple[str, str]]) -> dict[tuple[str, str], float]:
        # few enough keys per interleaved group that the kernel cache (dispatch.CACHE_LIMIT) keeps them all
        contenders = {(name, mode): (lambda name=name, mode=mode: pl.round_to(x, name, rounding=mode))
                      for name, mode in dict.fromkeys(pairs)}
        return interleaved(contenders, repeat)  # type: ignore[arg-type]

    times = timed(rows)
    base = times[("e4m3", "nearest_even")]
    print(f"\n## P3109 formats and rounding modes: {n} float32 values, Melem/s (median of {repeat} interleaved "
          f"rounds); 'vs e4m3': time of e4m3 nearest_even over this row's; gfloat on {small.size} values")
    print(f"{'format':<12} {'mode':<16} {'precisionlab':>12} {'vs e4m3':>8} {'gfloat':>8} {'vs gfloat':>10} "
          f"{'differing':>10}")
    for name, mode in rows:
        peer, differ = float("nan"), ""
        fmt = pl.get_format(name)
        if gfloat is not None and name.startswith("binary") and mode in GFLOAT_MODES:
            info = format_info_p3109(fmt.bits, fmt.man_bits + 1,
                                     Signedness.Signed if fmt.signed else Signedness.Unsigned,
                                     Domain.Extended if fmt.extended else Domain.Finite)
            rnd = getattr(RoundMode, GFLOAT_MODES[mode])
            sample = small if fmt.signed else np.abs(small)  # gfloat passes negatives to unsigned formats through
            with np.errstate(over="ignore"):
                theirs = gfloat.round_ndarray(info, sample, rnd)
                differ = str(differing(pl.round_to(sample, fmt, rounding=mode), theirs))
                run = {"gfloat": lambda i=info, r=rnd, s=sample: gfloat.round_ndarray(i, s, r)}
                peer = sample.size / interleaved(run, max(1, repeat // 2))["gfloat"] / 1e6
        ours = n / times[(name, mode)] / 1e6
        print(f"{fmt.name:<12} {mode:<16} {ours:12.0f} {base / times[(name, mode)]:7.2f}x {peer:8.1f} "
              f"{ours / peer:9.0f}x {differ:>10}")
    print("\nevery 8-bit P3109 format: time of e4m3 in the same mode over this format's (interleaved with e4m3's "
          "five modes, format by format)")
    print(f"{'format':<12} {'kernel':<10}" + "".join(f" {mode:>16}" for mode in MODES) + f" {'geo. mean':>10}")
    targets: list[Target] = []
    for name in P3109_8BIT:
        group = timed([("e4m3", mode) for mode in MODES] + [(name, mode) for mode in MODES])
        ratios = [group[("e4m3", mode)] / group[(name, mode)] for mode in MODES]
        kernel = dispatch.find(name, np.dtype(np.float32), "nearest_even", None, "raise")
        chunk = kernel.chunk if kernel is not None else None
        path = "general" if chunk is None else f"{type(chunk).__name__}" + (
            f"/{chunk.index.width}" if hasattr(chunk, "index") else "")
        mean = math.exp(sum(math.log(r) for r in ratios) / len(ratios))
        print(f"{name:<12} {path:<10}" + "".join(f" {r:15.2f}x" for r in ratios) + f" {mean:9.2f}x")
        targets.append((f"P3109 {name}: within 10% of e4m3 (geometric mean of {len(MODES)} modes, each against "
                        f"e4m3 in it; worst {min(ratios):.2f})", mean, mean >= P3109_MIN))
    print("(kernel: the chunk kernel round_to uses above the binary search; Table32/16 and /15: the 2^17- and "
          "2^18-entry tables. Every row runs the same four integer passes and gather as e4m3, so a single ratio "
          "scatters with the machine's load; the target reads the mean over the modes)")
    return targets


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=1 << 24)
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--calls", type=int, default=3000, help="calls per size in the small-array section")
    parser.add_argument("--only", default=",".join(SECTIONS), help=f"comma-separated sections of {SECTIONS}")
    args = parser.parse_args()
    chosen = [s.strip() for s in args.only.split(",") if s.strip()]
    ml_dtypes, torch = peers()
    print(f"# {datetime.date.today()} on {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, "
          f"load average {load()}; numpy {np.__version__}"
          + (f", ml_dtypes {ml_dtypes.__version__}" if ml_dtypes else ", no ml_dtypes")
          + (f", torch {torch.__version__}" if torch else ", no torch"))
    targets: list[Target] = []
    if "throughput" in chosen:
        targets += throughput(args.n, args.repeat, ml_dtypes, torch)
    if "small" in chosen:
        targets += small(ml_dtypes, args.calls)
    if "float64" in chosen:
        targets += float64(FLOAT64_SIZES, args.repeat)
    if "threads" in chosen:
        targets += threads(args.repeat)
    if "p3109" in chosen:
        targets += p3109(min(args.n, 1 << 22), args.repeat)
    print(f"\n## targets (load average now {load()})")
    for what, ratio, met in targets:
        print(f"{'met   ' if met else 'MISSED'}  {ratio:8.2f}  {what}")


if __name__ == "__main__":
    main()
