"""Per scale group: how far a tensor's stored codes reach, as each layout defines a group.

A scale s stands for a group whose dequantized amax is s times the convention's top code value, so
for every layout written by a round-to-nearest quantizer (min-max, absmax) each group's extreme
element lands on the top code: `Reach.at_top` is then true for (nearly) every group. A transposed
code matrix, codes paired with another channel's scales, or scales computed for another range break
that. `group_reach(t, transpose=True)` measures the same with the (square) code matrix transposed
first, so a check can test the hypothesis "the codes were stored transposed" directly.

    layout                      group                     reach (1 = the convention's top)     at_top
    gptq (sym)                  (group of inputs, output) max|q - z| / 2^(b-1)                  >= 2^(b-1) - 1
    gptq / awq (asym)           (group of inputs, output) (max q - min q) / (2^b - 1)           >= 2^b - 2
    compressed-tensors int      (output, group of inputs) as gptq, codes stored signed
    fp8 (tensor / row / block)  its scale's block          max|value| / the element's max       >= 0.97
    nvfp4                       1 x 16 block               max|value| / 6                        == 1
    bnb nf4                     block of `blocksize`       max|NF4[code]|                        == 1
    gguf Q8_0 / Q4_0 / Q4_1     32-element block           max|q| / 127, max|q - 8| / 8, span / 15
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from precisionlab.interop.checkpoint import CheckpointTensor

FP8_AT_TOP = 0.97
"""An fp8 group is at the top when its largest code is the element's max (e4m3's next value is 416/448)."""


@dataclass
class Reach:
    values: np.ndarray
    """Per group: reach of its codes / the convention's top (flat)."""
    at_top: np.ndarray
    """Per group: True when the group's extreme sits on the convention's top code."""
    nonzero: np.ndarray
    """Per group: True unless every code of the group is the zero code."""
    description: str

    @property
    def top_fraction(self) -> float:
        """Share of the nonzero groups whose extreme sits on the top code (nan when there are none)."""
        n = int(np.count_nonzero(self.nonzero))
        return float(np.count_nonzero(self.at_top & self.nonzero)) / n if n else float("nan")


def _reduce_groups(rel: np.ndarray, g: np.ndarray, groups: int) -> tuple[np.ndarray, np.ndarray]:
    """(min, max) of rel (rows = elements along the grouped axis, columns = channels) per (group, column)."""
    order = np.argsort(g, kind="stable")
    bounds = np.searchsorted(g[order], np.arange(groups + 1))
    present = np.diff(bounds) > 0
    rel = rel[order]
    starts = bounds[:-1][present]
    return np.minimum.reduceat(rel, starts, axis=0), np.maximum.reduceat(rel, starts, axis=0)


def int_reach(rel: np.ndarray, g: np.ndarray, groups: int, bits: int, symmetric: bool) -> Reach:
    """rel: q - z (rows along the grouped axis, columns = channels); g: the group of each row."""
    lo, hi = _reduce_groups(rel.astype(np.int64), g, groups)
    nonzero = ((lo != 0) | (hi != 0)).reshape(-1)
    if symmetric:
        top = np.maximum(-lo, hi).reshape(-1)
        half = 1 << (bits - 1)
        return Reach(top / float(half), top >= half - 1, nonzero, f"2^(b-1) = {half} (symmetric)")
    span = (hi - lo).reshape(-1)
    steps = (1 << bits) - 1
    return Reach(span / float(steps), span >= steps - 1, nonzero, f"{steps} steps (asymmetric span)")


def signed_extremes(t: CheckpointTensor) -> tuple[np.ndarray, np.ndarray, int] | None:
    """(min, max) of the signed codes q - z per scale group and the element's bits, for symmetric integer
    layouts (GPTQ sym, compressed-tensors without zero points); None for the others."""
    from precisionlab.interop.readers import packed_int as pi

    if t.layout.startswith("gptq:") and t.details.get("sym"):
        q, z, _, g = pi.gptq_codes(t)
        if not np.all(z == 1 << (t.details["bits"] - 1)):
            return None  # zero points read off by one: gptq_zero_offset speaks for the file, the codes would mislead
        lo, hi = _reduce_groups(q.astype(np.int64) - z[g].astype(np.int64), g, z.shape[0])
        return lo.reshape(-1), hi.reshape(-1), int(t.details["bits"])
    if t.layout in ("compressed-tensors:pack-quantized", "compressed-tensors:int-quantized") \
            and t.details.get("symmetric"):
        qs, _, scales = pi.pack_quantized_codes(t)
        rel, g, groups = _ct_rows(t, qs.T.astype(np.int64), scales)
        lo, hi = _reduce_groups(rel, g, groups)
        return lo.reshape(-1), hi.reshape(-1), int(t.details["bits"])
    return None


def _ct_rows(t: CheckpointTensor, rel: np.ndarray, scales: np.ndarray) -> tuple[np.ndarray, np.ndarray, int]:
    """compressed-tensors codes as (inputs, outputs) with the group of each input row."""
    if t.details["strategy"] == "tensor":  # one scale: one group of every element
        return rel.reshape(-1, 1), np.zeros(rel.size, dtype=np.int64), 1
    groups = scales.shape[1]
    return rel, np.arange(rel.shape[0]) // t.details["group_size"] if groups > 1 else \
        np.zeros(rel.shape[0], dtype=np.int64), groups


def _square(q: np.ndarray) -> bool:
    return q.ndim == 2 and q.shape[0] == q.shape[1]


def group_reach(t: CheckpointTensor, transpose: bool = False) -> Reach | None:
    """The reach of every scale group (see the module doc); None where the layout has no such groups, or,
    with transpose=True, where the code matrix is not square (its transpose cannot meet the same scales)."""
    from precisionlab.interop.readers import packed_int as pi

    layout = t.layout
    if layout.startswith("gptq:") or layout == "awq:gemm":
        if layout == "awq:gemm":
            q, z, _ = pi.awq_codes(t)
            g = np.arange(q.shape[0]) // t.details["group_size"]
            bits, symmetric = 4, False
        else:
            q, z, _, g = pi.gptq_codes(t)
            bits, symmetric = t.details["bits"], bool(t.details["sym"])
        if transpose:
            if not _square(q):
                return None
            q = q.T
        return int_reach(q.astype(np.int64) - z[g].astype(np.int64), g, z.shape[0], bits, symmetric)
    if layout in ("compressed-tensors:pack-quantized", "compressed-tensors:int-quantized"):
        qs, zs, scales = pi.pack_quantized_codes(t)
        if transpose:
            if not _square(qs):
                return None
            qs = qs.T
        rel = qs.T.astype(np.int64)
        if zs is not None:
            g = np.arange(rel.shape[0]) // t.details["group_size"]
            rel = rel - zs.T[g].astype(np.int64)
        rel, g, groups = _ct_rows(t, rel, scales)
        return int_reach(rel, g, groups, t.details["bits"], zs is None)
    if layout.startswith("fp8:") or layout == "compressed-tensors:float-quantized":
        return _fp8_reach(t, transpose)
    if transpose:
        return None
    if layout == "compressed-tensors:nvfp4-pack-quantized":
        from precisionlab.interop.readers.nvfp4 import BLOCK, nvfp4_parts

        values, _, _ = nvfp4_parts(t)
        rows, cols = values.shape
        padded = np.zeros((rows, -(-cols // BLOCK) * BLOCK), dtype=np.float32)
        padded[:, :cols] = np.abs(values)
        reach = padded.reshape(rows, -1, BLOCK).max(axis=2).reshape(-1) / 6.0
        return Reach(reach, reach == 1.0, reach > 0, "6 (e2m1 max) per block of 16")
    if layout == "bnb:nf4":
        from precisionlab.interop.readers.bnb import BNB_NF4, bnb_codes

        codes = bnb_codes(t)
        bs = t.details["blocksize"]
        mags = np.abs(BNB_NF4[codes])
        padded = np.zeros(-(-mags.size // bs) * bs, dtype=np.float32)
        padded[: mags.size] = mags
        reach = padded.reshape(-1, bs).max(axis=1)
        return Reach(reach, reach == 1.0, reach > 0, "1 (nf4's +-1 at the block absmax)")
    if layout in ("gguf:Q8_0", "gguf:Q4_0", "gguf:Q4_1"):
        return _gguf_reach(t)
    return None


def _fp8_reach(t: CheckpointTensor, transpose: bool) -> Reach | None:
    from precisionlab.interop.readers.fp8 import fp8_values
    from precisionlab.rounding import decode

    if t.details.get("scale_role") is None:
        return None
    values = np.abs(fp8_values(t))
    values = np.where(np.isnan(values), 0.0, values)
    if transpose:
        if not _square(values) or t.details["granularity"] == "tensor":
            return None
        values = values.T
    element = t.details["element"]
    top = float(np.nanmax(np.asarray(decode(np.arange(128, dtype=np.uint8), element), dtype=np.float64)))
    gran = t.details["granularity"]
    if gran == "tensor" or values.ndim != 2:
        reach = np.array([values.max()])
    elif gran == "row":
        reach = values.max(axis=1)
    elif gran == "col":
        reach = values.max(axis=0)
    else:
        br, bc = t.details["block"]
        rows, cols = values.shape
        padded = np.zeros((-(-rows // br) * br, -(-cols // bc) * bc), dtype=np.float32)
        padded[:rows, :cols] = values
        reach = padded.reshape(padded.shape[0] // br, br, -1, bc).max(axis=(1, 3)).reshape(-1)
    reach = reach / top
    return Reach(reach, reach >= FP8_AT_TOP, reach > 0, f"{top:g} ({element} max)")


def _gguf_reach(t: CheckpointTensor) -> Reach:
    blocks = np.asarray(t.refs["blocks"].load(), dtype=np.uint8).reshape(-1, t.details["block_bytes"])
    kind = t.details["ggml_type"]
    if kind == "Q8_0":
        top = np.abs(blocks[:, 2:34].view(np.int8).astype(np.int16)).max(axis=1)
        return Reach(top / 127.0, top == 127, top > 0, "127 (int8)")
    data = blocks[:, 2:18] if kind == "Q4_0" else blocks[:, 4:20]
    q = np.concatenate([data & np.uint8(15), data >> np.uint8(4)], axis=1).astype(np.int16)
    if kind == "Q4_0":
        top = np.abs(q - 8).max(axis=1)
        return Reach(top / 8.0, top == 8, top > 0, "8 (Q4_0's -8)")
    span = q.max(axis=1) - q.min(axis=1)
    return Reach(span / 15.0, span == 15, span > 0, "15 steps (Q4_1 span)")
