"""Quantize + dequantize speed and peak memory on one Llama-3-8B MLP weight, against torchao.

    python3 benchmarks/bench_quant.py [--rows 4096 --cols 14336 --repeat 3] [--no-memory]

Identical computations only. torchao's quant_primitives use, for signed integers, the full code
range with a float32 scale: int4 codes -8..7 with s = amax / 7.5, int8 -128..127 with
s = amax / 127.5 (MappingType.SYMMETRIC, quant_min / quant_max left to the dtype). precisionlab
is timed with the same conventions (`range=full:scale=fp32`), next to its own defaults (±7 with
s = amax / 7 and an fp16 scale), which compute something else and have no peer. MX (mxfp4) and
NVFP4 (minscale=normal: torchao floors block scales at 2^-6) follow the same published rules in
both.

Before any timing, each pair's outputs are compared bit for bit and the differing count is
printed. A handful of differences is expected: torchao multiplies by the float32 reciprocal
1/s, precisionlab rounds the exact quotient x / s once, and the two disagree where x·fl(1/s)
lands on the other side of a rounding boundary; for the integer pairs that is the element holding
its block's amax, where x / s = ±(2^(b-1) - 1/2) up to the rounding of s (the count is printed).

Times: quantize and dequantize as one call (what a user runs), for both libraries, in
interleaved rounds after a warm-up each; medians. NVFP4: quantize only (torchao has no
stand-alone dequantize for it). Peak memory: the high-water mark of resident memory above the
input, in a fresh process per contender (tracemalloc cannot see torch's allocations), as a
multiple of the input's size; a dequantized float32 output counts 1.00x of it. Nothing is asserted.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from _timing import interleaved
from precisionlab.quant import quantize

PAIRS = {
    "int4 g128, -8..7, fp32 s = amax/7.5": ("int4:g128:range=full:scale=fp32", "int4"),
    "int8 per row, -128..127, fp32 s = amax/127.5": ("int8:row:range=full:scale=fp32", "int8"),
    "mxfp4": ("mxfp4", "mxfp4"),
    "nvfp4, quantize only": ("nvfp4:minscale=normal", "nvfp4"),
}
OWN = ["int4:g128", "int8:row", "mxfp4", "nvfp4", "dsv3_weight"]
"""precisionlab's defaults, timed on their own (no peer computes the same thing)."""


def weight(rows: int, cols: int) -> np.ndarray:
    w = np.random.default_rng(0).standard_normal((rows, cols), dtype=np.float32)
    w *= np.float32(0.02)  # in place: no second copy in the process's peak memory
    return w


def ours(scheme: str, w: np.ndarray) -> Callable[[], Any]:
    if scheme.startswith("nvfp4"):
        return lambda: quantize(w, scheme)
    return lambda: quantize(w, scheme).dequantize()


def torchao_available() -> bool:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            import torchao.quantization.quant_primitives  # noqa: F401
    except Exception:
        return False
    return True


def theirs(kind: str, w: np.ndarray) -> Callable[[], Any]:
    import torch

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from torchao.prototype.mx_formats import mx_tensor, nvfp4_tensor
        from torchao.quantization.quant_primitives import (
            MappingType,
            choose_qparams_affine,
            dequantize_affine,
            quantize_affine,
        )
    t = torch.from_numpy(w)
    if kind in ("int4", "int8"):
        block = (1, 128) if kind == "int4" else (1, w.shape[1])
        low, high = (-8, 7) if kind == "int4" else (-128, 127)

        def affine() -> Any:
            s, z = choose_qparams_affine(t, MappingType.SYMMETRIC, block, torch.int8, low, high)
            q = quantize_affine(t, block, s, z, torch.int8, low, high)
            return dequantize_affine(q, block, s, z, torch.int8, low, high)

        return affine
    if kind == "mxfp4":
        elem = torch.float4_e2m1fn_x2

        def mx() -> Any:
            scale, data = mx_tensor.to_mx(t, elem, 32)
            return mx_tensor.to_dtype(data, scale, elem, 32, torch.float32)

        return mx

    def nv() -> Any:
        g = nvfp4_tensor.per_tensor_amax_to_scale(t.abs().max())
        return nvfp4_tensor.nvfp4_quantize(t, 16, g)

    return nv


def differing(ours_out: Any, theirs_out: Any) -> tuple[int, int]:
    """(outputs whose bits differ, outputs compared)."""
    if isinstance(theirs_out, tuple):  # nvfp4: (e4m3 block scales, packed e2m1 codes)
        import torch

        scales, packed = theirs_out
        a = np.concatenate([ours_out.scale_codes.reshape(-1), ours_out.packed.reshape(-1)])
        b = np.concatenate([scales.view(torch.uint8).numpy().reshape(-1), packed.view(torch.uint8).numpy().reshape(-1)])
    else:
        a = np.asarray(ours_out, dtype=np.float32).reshape(-1).view(np.uint32)
        b = np.asarray(theirs_out.numpy(), dtype=np.float32).reshape(-1).view(np.uint32)
    return int(np.count_nonzero(a != b)), a.size


def peak_extra(label: str, rows: int, cols: int) -> float | None:
    """Peak resident memory above the input, as a multiple of its size, in a fresh process."""
    done = subprocess.run([sys.executable, __file__, "--peak", label, "--rows", str(rows), "--cols", str(cols)],
                          capture_output=True, text=True, env=os.environ | {"PYTHONPATH": os.pathsep.join(sys.path)})
    if done.returncode:
        print(f"  (peak memory of {label}: not measured: {done.stderr.strip().splitlines()[-1:]})")
        return None
    return float(json.loads(done.stdout.strip().splitlines()[-1])["peak"])


def _status_kib(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise OSError(f"no {field} in /proc/self/status")


def measure_peak(label: str, rows: int, cols: int) -> None:
    """Prints {"peak": resident high-water mark during one run above the resident size before it,
    over the input's bytes}. Linux: writing 5 to /proc/self/clear_refs resets the high-water mark."""
    w = weight(rows, cols)
    kind, name = label.split(":", 1)
    run = ours(name, w) if kind == "pl" else theirs(name, w)
    Path("/proc/self/clear_refs").write_text("5")
    before = _status_kib("VmRSS")
    run()
    print(json.dumps({"peak": (_status_kib("VmHWM") - before) * 1024 / w.nbytes}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=4096)
    parser.add_argument("--cols", type=int, default=14336)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--no-memory", action="store_true", help="skip the peak-memory subprocesses")
    parser.add_argument("--peak", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.peak:
        measure_peak(args.peak, args.rows, args.cols)
        return
    w = weight(args.rows, args.cols)
    n = w.size
    load = " ".join(f"{v:.1f}" for v in os.getloadavg())
    print(f"# {datetime.date.today()} on {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, "
          f"load average {load}; input {args.rows}x{args.cols} float32 = {w.nbytes / 2**20:.0f} MiB; "
          f"median of {args.repeat} interleaved rounds; Melem/s")
    memory = not args.no_memory
    print(f"\n{'computation':<46} {'precisionlab':>12} {'torchao':>9} {'pl/torchao':>10} {'differing':>22}"
          + (f" {'peak pl':>8} {'peak torchao':>12}" if memory else ""))
    if not torchao_available():
        print("torchao: not installed (no peer comparison)")
    else:
        for label, (scheme, kind) in PAIRS.items():
            mine, peer = ours(scheme, w), theirs(kind, w)
            diff, total = differing(quantize(w, scheme) if kind == "nvfp4" else mine(), peer())
            integer = kind in ("int4", "int8") and diff
            at_amax = f" ({_at_block_amax(w, scheme, kind)} at a block amax)" if integer else ""
            times = interleaved({"pl": mine, "torchao": peer}, args.repeat)
            line = (f"{label:<46} {n / times['pl'] / 1e6:12.1f} {n / times['torchao'] / 1e6:9.1f} "
                    f"{times['torchao'] / times['pl']:9.2f}x {diff:>9} of {total:<10}{at_amax}")
            if memory:
                mine_peak, peer_peak = peak_extra(f"pl:{scheme}", args.rows, args.cols), \
                    peak_extra(f"torchao:{kind}", args.rows, args.cols)
                line += f" {_x(mine_peak):>8} {_x(peer_peak):>12}"
            print(line)
    print("\nprecisionlab's own defaults (no peer computes these): quantize + dequantize, Melem/s"
          + (", peak memory above the input" if memory else ""))
    times = interleaved({scheme: ours(scheme, w) for scheme in OWN}, args.repeat)
    for scheme in OWN:
        q = quantize(w, scheme)
        peak = f"  peak {_x(peak_extra(f'pl:{scheme}', args.rows, args.cols))}" if memory else ""
        what = "quantize only" if scheme.startswith("nvfp4") else "q+dq"
        print(f"{scheme:<14} {q.bits_per_element:7.4f} bits/element  {what:<13} {n / times[scheme] / 1e6:8.1f}{peak}")


def _at_block_amax(w: np.ndarray, scheme: str, kind: str) -> int:
    """How many of the differing outputs are the element holding their block's amax: x / s is then
    ±(2^(b-1) - 1/2) up to the rounding of s, a rounding boundary that fl(1/s) moves."""
    mine = np.asarray(quantize(w, scheme).dequantize(), dtype=np.float32)
    peer = theirs(kind, w)().numpy()
    group = 128 if kind == "int4" else w.shape[1]
    blocks = np.abs(w).reshape(-1, group)
    is_amax = (blocks == blocks.max(axis=1, keepdims=True)).reshape(w.shape)
    return int(np.count_nonzero((mine != peer) & is_amax))


def _x(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.2f}x"


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    main()
