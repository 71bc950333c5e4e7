"""Quantize throughput of the gguf_* presets against gguf-py's own quantizers, same weight, same run.

    python3 benchmarks/bench_gguf_quantize.py [--rows 2048] [--cols 4096] [--repeat 3]

For Q8_0, Q4_0, Q4_1, Q5_0, Q5_1: precisionlab's `quantize(w, "gguf_<type>")` plus `tensor_bytes` (the GGML
block bytes) against `gguf.quants.quantize(w, type)`; the bytes are checked equal first and the count of
differing blocks is printed. Q4_K and Q6_K: gguf-py has no quantizer, so precisionlab alone (llama.cpp's C
reference is the tests' oracle for them, not a peer here). Times are printed, never asserted.
"""

from __future__ import annotations

import argparse
import importlib.util

import numpy as np

from _timing import best_of
from precisionlab.quant import quantize

LEGACY = ("Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1")
K_QUANTS = ("Q4_K", "Q6_K")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=2048)
    parser.add_argument("--cols", type=int, default=4096)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    if importlib.util.find_spec("gguf") is None:
        print("gguf: not installed (pip install gguf); skipped")
        return
    import gguf

    from precisionlab.interop.readers.gguf_blocks import tensor_bytes

    w = (np.random.default_rng(0).standard_normal((args.rows, args.cols)) * 0.02).astype(np.float32)
    n = w.size
    print(f"N(0, 0.02^2) float32 weight {args.rows} x {args.cols} ({n / 1e6:.1f}M elements), best of {args.repeat}")
    print("Melem/s: precisionlab quantize (a QuantizedTensor), quantize + tensor_bytes (GGML block bytes), and\n"
          "gguf-py's quantize (block bytes); ratio = gguf-py time / precisionlab's quantize + bytes time")
    print(f"{'type':6} {'differing blocks':>16} {'quantize':>9} {'+ bytes':>8} {'gguf-py':>8} {'ratio':>6}")
    for name in (*LEGACY, *K_QUANTS):
        scheme = f"gguf_{name.lower()}"
        ours_q = best_of(lambda scheme=scheme: quantize(w, scheme), args.repeat)
        ours = best_of(lambda scheme=scheme: tensor_bytes(quantize(w, scheme)), args.repeat)
        if name in K_QUANTS:  # gguf-py has no quantizer for them
            print(f"{name:6} {'(no peer)':>16} {n / ours_q / 1e6:9.1f} {n / ours / 1e6:8.1f} {'-':>8} {'-':>6}")
            continue
        qtype = gguf.GGMLQuantizationType[name]
        type_size = gguf.GGML_QUANT_SIZES[qtype][1]
        ours_bytes = tensor_bytes(quantize(w, scheme)).reshape(-1, type_size)
        theirs_bytes = gguf.quants.quantize(w, qtype).reshape(-1, type_size)
        differing = int((ours_bytes != theirs_bytes).any(axis=1).sum())
        theirs = best_of(lambda qtype=qtype: gguf.quants.quantize(w, qtype), args.repeat)
        print(f"{name:6} {differing:16d} {n / ours_q / 1e6:9.1f} {n / ours / 1e6:8.1f} {n / theirs / 1e6:8.1f} "
              f"{theirs / ours:5.2f}x")


if __name__ == "__main__":
    main()
