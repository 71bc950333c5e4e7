"""Quantize + dequantize throughput and peak extra memory on one Llama-3-8B MLP weight.

    python3 benchmarks/bench_quant.py [--rows 4096 --cols 14336 --repeat 3]

For each scheme: Melem/s of quantize, of dequantize, and of the two together; peak
extra memory (tracemalloc, numpy allocations) against the input's size. Where torchao
is importable, the same int4 g128 / int8 row operations through torchao's
quant_primitives run in the same process, and the ratio is printed. Times are printed,
never asserted.
"""

from __future__ import annotations

import argparse
import tracemalloc

import numpy as np

from _timing import timed
from precisionlab.quant import quantize

SCHEMES = ["int4:g128", "int8:row", "mxfp4", "nvfp4", "dsv3_weight"]


def _peak_extra(fn) -> int:
    tracemalloc.start()
    tracemalloc.reset_peak()
    result = fn()
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    del result
    return peak


def bench(w: np.ndarray, scheme: str, repeat: int) -> dict[str, float]:
    n = w.size
    tq, q = timed(lambda: quantize(w, scheme), repeat)
    td, _ = timed(lambda: q.dequantize(), repeat)  # type: ignore[union-attr]
    peak_q = _peak_extra(lambda: quantize(w, scheme))
    peak_d = _peak_extra(lambda: q.dequantize())  # type: ignore[union-attr]
    return {
        "quant": n / tq / 1e6, "dequant": n / td / 1e6, "both": n / (tq + td) / 1e6,
        "peak_q": peak_q / w.nbytes, "peak_qd": max(peak_q, peak_d) / w.nbytes,
        "bits": q.bits_per_element,  # type: ignore[union-attr]
    }


def torchao_peer(w: np.ndarray, repeat: int) -> dict[str, float] | None:
    try:
        import torch
        from torchao.quantization.quant_primitives import (  # type: ignore[import-not-found]
            MappingType,
            choose_qparams_affine,
            dequantize_affine,
            quantize_affine,
        )
    except Exception:
        return None
    t = torch.from_numpy(w)
    out: dict[str, float] = {}
    for name, block, qmin, qmax in (("int4:g128", (1, 128), -8, 7), ("int8:row", (1, w.shape[1]), -127, 127)):
        def run(block=block, qmin=qmin, qmax=qmax):  # type: ignore[no-untyped-def]
            s, z = choose_qparams_affine(t, MappingType.SYMMETRIC, block, torch.int8, qmin, qmax)
            qd = quantize_affine(t, block, s, z, torch.int8, qmin, qmax)
            return dequantize_affine(qd, block, s, z, torch.int8, qmin, qmax)
        tt, _ = timed(run, repeat)
        out[name] = w.size / tt / 1e6
    out.update(_torchao_block_peers(t, repeat))
    return out


def _torchao_block_peers(t: object, repeat: int) -> dict[str, float]:
    """mxfp4 quantize + dequantize (to_mx / to_dtype) and nvfp4 quantize only, where torchao has them."""
    import torch

    out: dict[str, float] = {}
    try:
        from torchao.prototype.mx_formats import mx_tensor  # type: ignore[import-not-found]

        elem = torch.float4_e2m1fn_x2

        def mx() -> object:
            scale, data = mx_tensor.to_mx(t, elem, 32)
            return mx_tensor.to_dtype(data, scale, elem, 32, torch.float32)

        tt, _ = timed(mx, repeat)
        out["mxfp4"] = t.numel() / tt / 1e6  # type: ignore[attr-defined]
    except Exception as exc:  # a peer that fails to run is reported, not fatal
        print(f"torchao mxfp4: not run ({type(exc).__name__}: {exc})")
    try:
        from torchao.prototype.mx_formats import nvfp4_tensor  # type: ignore[import-not-found]

        def nv() -> object:
            g = nvfp4_tensor.per_tensor_amax_to_scale(t.abs().max())  # type: ignore[attr-defined]
            return nvfp4_tensor.nvfp4_quantize(t, 16, g)

        tt, _ = timed(nv, repeat)
        out["nvfp4 (quantize only)"] = t.numel() / tt / 1e6  # type: ignore[attr-defined]
    except Exception as exc:
        print(f"torchao nvfp4: not run ({type(exc).__name__}: {exc})")
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=4096)
    parser.add_argument("--cols", type=int, default=14336)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    w = np.random.default_rng(0).standard_normal((args.rows, args.cols), dtype=np.float32) * 0.02
    print(f"input {args.rows}x{args.cols} float32 = {w.nbytes / 2**20:.0f} MiB")
    print(f"{'scheme':<12} {'bits/el':>8} {'quant':>9} {'dequant':>9} {'q+dq':>9} {'peak/input':>11}  (Melem/s)")
    results = {}
    for scheme in SCHEMES:
        r = bench(w, scheme, args.repeat)
        results[scheme] = r
        print(f"{scheme:<12} {r['bits']:8.4f} {r['quant']:9.1f} {r['dequant']:9.1f} {r['both']:9.1f} "
              f"{r['peak_qd']:10.2f}x")
    peer = torchao_peer(w, args.repeat)
    if peer is None:
        print("torchao: not installed (no peer comparison)")
    else:
        for name, rate in peer.items():
            ours = results["nvfp4"]["quant"] if name.startswith("nvfp4") else results[name]["both"]
            kind = "q   " if name.startswith("nvfp4") else "q+dq"
            print(f"torchao {name:<22} {kind} {rate:9.1f} Melem/s   precisionlab / torchao = {ours / rate:.2f}x")


if __name__ == "__main__":
    main()
