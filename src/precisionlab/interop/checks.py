"""Convention checks: evidence that a tensor was written under one convention and is read under another.

Each check returns a `CheckResult` (name, flagged, evidence, message); `run_checks` runs those that
apply to a tensor's layout. The mix-ups they look for produce plausible wrong numbers, not errors:

  fp8_encoding                 OCP E4M3 (e4m3fn, max 448, NaN 0x7F/0xFF) and E4M3FNUZ (max 240, NaN 0x80)
                               give the same bits values two times apart. Flags a tensor whose codes are
                               NaN under its tag but not under the other encoding (fn's -0 code 0x80 in
                               a fnuz tensor: OCP bits relabelled without vLLM's 0x80 -> 0), or whose top
                               code is the other format's saturation point (fnuz-tagged codes topping
                               out at 0x7E, fn's 448; fn-tagged codes topping out at 240, fnuz's max).
  gptq_zero_offset             GPTQ v1 stores zero points minus one. Symmetric files have one zero point,
                               2^(b-1): read as 2^(b-1) - 1 (v1 read as v2) or + 1 (v2 read as v1) is
                               flagged. Asymmetric: real weights are centred, so the mean of q - z over
                               the tensor is near 0 steps; a mean nearer to +-1 (the other version's
                               reading) is flagged.
  nibble_order                 4-bit codes unpacked in the wrong order (AWQ's 0,2,4,6,1,3,5,7 read as
                               sequential, or the reverse; bitsandbytes' high-nibble-first bytes read
                               low nibble first). Two measurements under each candidate order:
                               zero alignment (asymmetric: rms over groups of mean(q - z), in steps;
                               codes paired with another channel's zero point are off by whole steps)
                               and neighbour smoothness (mean |w[k+1] - w[k]| over neighbours sharing a
                               word / over pairs a word apart). Measured on SmolLM2-135M's weights the
                               smoothness ratio is 0.99 to 1.07 under either order: trained LLM weights
                               have no neighbour smoothness, so an order applied consistently to codes
                               and zero points cannot be seen there; the check says so rather than pass.
  nvfp4_global_scale_direction compressed-tensors stores NVFP4's global scale in the encode direction
                               (448 * 6 / amax; values are divided by it), precisionlab and ModelOpt in
                               the decode direction. The decoded block scales then imply the tensor's
                               amax = 6 * max(block scale) / G; a stored scale whose reading implies an
                               amax beyond 6 * 448 = 2688 (no weight tensor is that large) while its
                               reciprocal does not is flagged.
  scale_vs_amax                A scale s stands for a group whose dequantized amax is s * (the top code
                               value of the convention): 127 for int8, 2^(b-1) for the full int ranges,
                               448 / 240 for e4m3 / e4m3fnuz, 6 for fp4, 1 for nf4; asymmetric groups
                               span 2^b - 1 steps. Since dequantized = code * s, this compares the codes'
                               reach with the convention: a median group reaching under 75% of it means
                               the scales were computed for another range (fnuz's 240 on OCP codes),
                               and a dequantized amax beyond 1e4 means a scale read in the wrong
                               direction or dtype.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from precisionlab.interop.checkpoint import CheckpointTensor

SMOOTH_MARGIN = 0.1
"""A candidate order must be this much smoother (ratio difference) than the declared one to flag."""
ZERO_ALIGNMENT_STEPS = 0.5
MIN_FILL = 0.75
MAX_PLAUSIBLE_AMAX = 1e4
NVFP4_LIMIT = 6.0 * 448.0


@dataclass
class CheckResult:
    """One convention check on one tensor."""

    name: str
    flagged: bool
    evidence: dict[str, float | str] = field(default_factory=dict)
    message: str = ""


def run_checks(tensor: CheckpointTensor, checkpoint: Any = None) -> list[CheckResult]:
    """Every check that applies to the tensor's layout (none for plain floats and unknown layouts)."""
    del checkpoint  # the checks read one tensor; kept for checks that compare tensors
    layout = tensor.layout
    results: list[CheckResult] = []
    if layout in ("fp8:e4m3fn", "fp8:e4m3fnuz") or (layout == "compressed-tensors:float-quantized"
                                                   and tensor.details.get("element") in ("e4m3", "e4m3fnuz")):
        results.append(fp8_encoding(tensor))
    if layout.startswith("gptq:"):
        results.append(gptq_zero_offset(tensor))
    if (layout.startswith("gptq:") and tensor.details.get("bits") == 4) or layout == "awq:gemm" or (
            layout == "compressed-tensors:pack-quantized" and tensor.details.get("bits") == 4) or layout == "bnb:nf4":
        results.append(nibble_order(tensor))
    if layout == "compressed-tensors:nvfp4-pack-quantized":
        results.append(nvfp4_global_scale_direction(tensor))
    if layout != "unknown" and not layout.startswith("float:") and layout not in ("gguf:F32", "gguf:F16",
                                                                                   "gguf:BF16"):
        fill = scale_vs_amax(tensor)
        if fill is not None:
            results.append(fill)
    return results


# --------------------------------------------------------------------------- fp8_encoding
FN_NAN = (0x7F, 0xFF)
FNUZ_NAN = (0x80,)
FN_TOP, FNUZ_TOP = 0x7E, 0x7F


def fp8_encoding(t: CheckpointTensor) -> CheckResult:
    from precisionlab.interop.readers.common import fp8_table

    codes = np.asarray(t.refs["weight"].load(), dtype=np.uint8).reshape(-1)
    counts = np.bincount(codes, minlength=256)
    tagged = "e4m3fnuz" if t.details["element"] == "e4m3fnuz" else "e4m3"
    other = "e4m3" if tagged == "e4m3fnuz" else "e4m3fnuz"
    nan = {"e4m3": FN_NAN, "e4m3fnuz": FNUZ_NAN}
    nan_tagged = int(sum(counts[c] for c in nan[tagged]))
    nan_other = int(sum(counts[c] for c in nan[other]))
    magnitudes = np.nonzero(counts.reshape(2, 128).sum(axis=0))[0]
    usable = [m for m in magnitudes if not (tagged == "e4m3" and m == 0x7F)]
    top = int(max(usable)) if usable else 0
    top_value = {fmt: float(fp8_table(fmt)[top]) for fmt in ("e4m3", "e4m3fnuz")}
    evidence: dict[str, float | str] = {
        "tagged": "e4m3fn" if tagged == "e4m3" else "e4m3fnuz", "nan_codes_tagged": nan_tagged,
        "nan_codes_other": nan_other, "top_magnitude_code": f"0x{top:02X}",
        "top_value_e4m3fn": top_value["e4m3"], "top_value_e4m3fnuz": top_value["e4m3fnuz"],
    }
    reasons = []
    if nan_tagged and not nan_other:
        reasons.append(f"{nan_tagged} codes are NaN as {evidence['tagged']} but ordinary values in the other E4M3 "
                       + ("(0x80: fn's -0, which vLLM maps to 0 before relabelling OCP bits as FNUZ)"
                          if tagged == "e4m3fnuz" else "(0x7F / 0xFF: fnuz's +-240)"))
    if tagged == "e4m3fnuz" and top == FN_TOP:
        reasons.append("the codes top out at 0x7E, e4m3fn's max (448) and 224 in fnuz, never fnuz's max 0x7F (240): "
                       "OCP-quantized bits tagged FNUZ (the scale must then be doubled, as vLLM's "
                       "normalize_e4m3fn_to_e4m3fnuz does)")
    if tagged == "e4m3" and top_value["e4m3"] == 240.0:
        reasons.append("the codes top out at 240, e4m3fnuz's max: quantized for FNUZ's range, stored as OCP")
    flagged = bool(reasons)
    message = "; ".join(reasons) if flagged else (
        f"the codes fit {evidence['tagged']}: no NaN codes, top code {evidence['top_magnitude_code']}")
    return CheckResult("fp8_encoding", flagged, evidence, message)


# --------------------------------------------------------------------------- gptq_zero_offset
def gptq_zero_offset(t: CheckpointTensor) -> CheckResult:
    from precisionlab.interop.readers.packed_int import gptq_codes

    d = t.details
    bits, version = d["bits"], d["version"]
    q, z, _, g_idx = gptq_codes(t)
    other = "v2" if version == "v1" else "v1"
    shift = 1 if version == "v2" else -1  # reading under the other version adds this to every zero point
    # mean over all elements of q - z[g_idx] (rows of q are inputs; z[g_idx] is each input's zero point row)
    mean_offset = float(q.astype(np.float64).mean() - z[g_idx].astype(np.float64).mean())
    other_offset = mean_offset - shift
    unique_z = np.unique(z)
    half = 1 << (bits - 1)
    out_of_range = float(np.mean((z < 0) | (z > (1 << bits) - 1)))
    evidence: dict[str, float | str] = {
        "version_read": version, "mean_code_minus_zero_steps": round(mean_offset, 4),
        f"mean_code_minus_zero_steps_as_{other}": round(other_offset, 4), "zero_min": float(z.min()),
        "zero_max": float(z.max()), "zeros_outside_code_range": round(out_of_range, 6),
        "distinct_zero_points": float(unique_z.size),
    }
    if d.get("sym") and unique_z.size == 1:
        value = int(unique_z[0])
        evidence["symmetric_zero_point_read"] = float(value)
        if value == half:
            return CheckResult("gptq_zero_offset", False, evidence,
                               f"symmetric {bits}-bit: every zero point reads {half} = 2^(b-1), as {version} should")
        if value == half - shift:
            return CheckResult("gptq_zero_offset", True, evidence,
                               f"symmetric {bits}-bit: every zero point reads {value}, not {half}; the file follows "
                               f"{other} (read as {version})")
        return CheckResult("gptq_zero_offset", True, evidence,
                           f"symmetric {bits}-bit: every zero point reads {value}, neither v1's nor v2's {half}")
    flagged = abs(mean_offset) > ZERO_ALIGNMENT_STEPS and abs(other_offset) < abs(mean_offset)
    if flagged:
        message = (f"the codes sit {mean_offset:+.2f} steps from their zero points on average (real weights are "
                   f"centred: near 0); read as {other} they sit {other_offset:+.2f}: the file looks {other}")
    else:
        message = f"the codes are centred on their zero points ({mean_offset:+.2f} steps on average) as {version}"
    return CheckResult("gptq_zero_offset", flagged, evidence, message)


# --------------------------------------------------------------------------- nibble_order
SEQUENTIAL: tuple[int, ...] = tuple(range(8))


def _orders() -> dict[str, tuple[int, ...]]:
    from precisionlab.interop.readers.packed_int import AWQ_ORDER

    return {"sequential": SEQUENTIAL, "awq": AWQ_ORDER}


def _permute(a: np.ndarray, axis: int, order: tuple[int, ...], declared: tuple[int, ...]) -> np.ndarray:
    """Codes unpacked under `declared` re-read as if the word lanes followed `order` instead."""
    # lane k holds logical position declared[k]; under `order` it would hold order[k]
    n = a.shape[axis]
    idx = np.arange(n).reshape(-1, 8)
    src = np.empty_like(idx)
    src[:, list(order)] = idx[:, list(declared)]
    return np.take(a, src.reshape(-1), axis=axis)


def _sequence_smoothness(x: np.ndarray) -> float:
    """mean |x[i+1] - x[i]| / mean |x[i+4] - x[i]| over a flat sequence (1: no smoothness). A swap of
    the two codes of every byte turns half the neighbour pairs into pairs three apart."""
    v = np.asarray(x, dtype=np.float64).reshape(-1)
    far = np.abs(v[4:] - v[:-4]).mean() if v.size > 4 else math.nan
    return float(np.abs(np.diff(v)).mean() / far) if far > 0 else math.nan


def _smoothness(w: np.ndarray, axis: int, lanes: int = 8) -> float:
    """mean |w[k+1] - w[k]| over neighbours in one word of `lanes` codes / mean |w[k+lanes] - w[k]|
    (1: no smoothness)."""
    x = np.moveaxis(w, axis, 0).astype(np.float64)
    n = x.shape[0] // lanes * lanes
    x = x[:n].reshape(n // lanes, lanes, -1)
    near = np.abs(np.diff(x, axis=1)).mean()
    far = np.abs(x[1:] - x[:-1]).mean() if x.shape[0] > 1 else math.nan
    return float(near / far) if far > 0 else math.nan


def _zero_alignment(q: np.ndarray, z: np.ndarray, group_of_row: np.ndarray) -> float:
    """rms over (group, column) of mean(q - z) in steps; q (rows, cols), z (groups, cols)."""
    groups = z.shape[0]
    order = np.argsort(group_of_row, kind="stable")
    bounds = np.searchsorted(group_of_row[order], np.arange(groups + 1))
    counts = np.diff(bounds)
    present = counts > 0
    sums = np.add.reduceat(q[order].astype(np.float64), bounds[:-1][present], axis=0)
    means = sums / counts[present][:, None]
    return float(np.sqrt(np.mean((means - z[present]) ** 2)))


def _bnb_nibble_order(t: CheckpointTensor) -> CheckResult:
    """bitsandbytes packs the high nibble first; read low nibble first, neighbouring pairs swap."""
    from precisionlab.interop.readers.bnb import BNB_NF4, bnb_absmax, bnb_codes

    codes = bnb_codes(t)
    absmax = bnb_absmax(t)[np.arange(codes.size) // t.details["blocksize"]]
    n = codes.size // 2 * 2
    swapped = codes.copy()
    swapped[:n] = codes[:n].reshape(-1, 2)[:, ::-1].reshape(-1)
    smooth = {name: _sequence_smoothness(BNB_NF4[c] * absmax) for name, c in (("high_first", codes),
                                                                                 ("low_first", swapped))}
    evidence: dict[str, float | str] = {"declared_order": "high_first",
                                        "smoothness_declared": round(smooth["high_first"], 4),
                                        "smoothness_other": round(smooth["low_first"], 4)}
    discriminating = min(smooth.values()) < 1 - SMOOTH_MARGIN
    evidence["smoothness_discriminates"] = "yes" if discriminating else "no"
    if smooth["low_first"] < smooth["high_first"] - SMOOTH_MARGIN and smooth["low_first"] < 1 - SMOOTH_MARGIN:
        return CheckResult("nibble_order", True, evidence,
                           f"neighbouring weights are smoother read low nibble first ({smooth['low_first']:.2f} vs "
                           f"{smooth['high_first']:.2f}): the file was packed low nibble first, bitsandbytes reads the "
                           "high nibble first")
    if discriminating:
        return CheckResult("nibble_order", False, evidence,
                           f"high nibble first (bitsandbytes' order) is the smoothest ({smooth['high_first']:.2f})")
    return CheckResult("nibble_order", False, evidence,
                       f"the weights have no neighbour smoothness ({smooth['high_first']:.2f} / "
                       f"{smooth['low_first']:.2f}), so the nibble order cannot be told from them")


def nibble_order(t: CheckpointTensor) -> CheckResult:
    from precisionlab.interop.readers import packed_int as pi

    if t.layout == "bnb:nf4":
        return _bnb_nibble_order(t)

    orders = _orders()
    layout = t.layout
    declared: tuple[int, ...]
    z: np.ndarray | None
    if layout == "awq:gemm":
        q, z, scales = pi.awq_codes(t)
        declared = pi.AWQ_ORDER
        code_axis, zero_packed = 1, True
        g = np.arange(t.details["in_features"]) // t.details["group_size"]
    elif layout.startswith("gptq:"):
        q, z, scales, g = pi.gptq_codes(t)
        declared = SEQUENTIAL
        code_axis, zero_packed = 0, True
    else:  # compressed-tensors pack-quantized, (out, in), codes along the input dimension
        qs, zs, scales = pi.pack_quantized_codes(t)
        q = qs.T
        z = None if zs is None else zs.T
        scales = scales.T
        declared = SEQUENTIAL
        code_axis, zero_packed = 0, True
        group = t.details["group_size"]
        g = np.arange(q.shape[0]) // group
    evidence: dict[str, float | str] = {"declared_order": next(k for k, v in orders.items() if v == declared)}
    # zero alignment over (code order, zero order) pairs, where the file has packed zero points
    alignment: dict[str, float] = {}
    if z is not None and zero_packed and z.shape[1] % 8 == 0:
        for cname, corder in orders.items():
            qc = _permute(q, code_axis, corder, declared)
            for zname, zorder in orders.items():
                zc = _permute(z, 1, zorder, declared)
                alignment[f"{cname}/{zname}"] = _zero_alignment(qc.astype(np.int64), zc.astype(np.float64), g)
        decl = f"{evidence['declared_order']}/{evidence['declared_order']}"
        evidence["zero_alignment_declared_steps"] = round(alignment[decl], 4)
        best = min((v, k) for k, v in alignment.items() if k != decl)
        evidence["zero_alignment_best_other_steps"] = round(best[0], 4)
        evidence["zero_alignment_best_other"] = best[1]
    # neighbour smoothness of the dequantized weights along the packed axis under each code order
    smooth: dict[str, float] = {}
    s_rows = scales[g] if scales.shape[0] != q.shape[0] else scales
    zz = None if z is None else (z[g] if z.shape[0] != q.shape[0] else z)
    for cname, corder in orders.items():
        qc = _permute(q, code_axis, corder, declared).astype(np.float32)
        values = (qc - zz) * s_rows if zz is not None else qc * s_rows
        smooth[cname] = _smoothness(np.asarray(values, dtype=np.float32), code_axis)
    decl_name = str(evidence["declared_order"])
    evidence["smoothness_declared"] = round(smooth[decl_name], 4)
    other_name = next(k for k in orders if k != decl_name)
    evidence["smoothness_other"] = round(smooth[other_name], 4)
    reasons = []
    if alignment:
        decl_align = float(evidence["zero_alignment_declared_steps"])
        best_align = float(evidence["zero_alignment_best_other_steps"])
        if decl_align > ZERO_ALIGNMENT_STEPS and best_align * 2 < decl_align:
            reasons.append(f"codes and zero points disagree by {decl_align:.2f} steps (rms of group means) under "
                           f"the declared order, {best_align:.2f} under {evidence['zero_alignment_best_other']} "
                           "(codes/zeros)")
    if smooth[other_name] < smooth[decl_name] - SMOOTH_MARGIN and smooth[other_name] < 1 - SMOOTH_MARGIN:
        reasons.append(f"neighbouring weights are smoother under the {other_name} order ({smooth[other_name]:.2f} vs "
                       f"{smooth[decl_name]:.2f}, 1 = no smoothness)")
    discriminating = min(smooth.values()) < 1 - SMOOTH_MARGIN
    evidence["smoothness_discriminates"] = "yes" if discriminating else "no"
    if reasons:
        return CheckResult("nibble_order", True, evidence, "; ".join(reasons))
    if discriminating:
        message = f"the declared {decl_name} order is the smoothest ({smooth[decl_name]:.2f})"
    else:
        message = (f"codes align with their zero points; the weights have no neighbour smoothness "
                   f"({smooth[decl_name]:.2f} / {smooth[other_name]:.2f}), so an order applied to codes and zero "
                   "points alike cannot be told from the weights")
    return CheckResult("nibble_order", False, evidence, message)


# --------------------------------------------------------------------------- nvfp4_global_scale_direction
def nvfp4_global_scale_direction(t: CheckpointTensor) -> CheckResult:
    from precisionlab.interop.readers.nvfp4 import nvfp4_parts

    _, scales, g = nvfp4_parts(t)
    top = float(np.max(scales[np.isfinite(scales)])) if np.isfinite(scales).any() else 0.0
    as_read = 6.0 * top / g if g else math.inf
    reciprocal = 6.0 * top * g
    evidence: dict[str, float | str] = {
        "global_scale_stored": g, "direction_read": "encode (divide)", "max_block_scale": top,
        "implied_amax": as_read, "implied_amax_if_reciprocal": reciprocal,
    }
    flagged = not (as_read <= NVFP4_LIMIT) and reciprocal <= NVFP4_LIMIT
    if flagged:
        message = (f"divided by, the stored global scale {g:.4g} implies |w| up to {as_read:.4g}, beyond "
                   f"6 * 448 = {NVFP4_LIMIT:g}; its reciprocal implies {reciprocal:.4g}: it was written in the decode "
                   "direction (amax / 2688, precisionlab / ModelOpt) and is read in compressed-tensors' encode "
                   "direction")
    else:
        message = f"the global scale implies |w| up to {as_read:.4g}, consistent with its encode direction"
    return CheckResult("nvfp4_global_scale_direction", flagged, evidence, message)


# --------------------------------------------------------------------------- scale_vs_amax
def _group_reach(t: CheckpointTensor) -> tuple[np.ndarray, str] | None:
    """(per scale group: reach of its codes / the convention's top, a description of the top)."""
    from precisionlab.interop.readers import packed_int as pi

    layout = t.layout
    if layout.startswith("gptq:"):
        q, z, _, g = pi.gptq_codes(t)
        return _int_reach(q.astype(np.int64) - z[g].astype(np.int64), g, z.shape[0], t.details["bits"],
                          t.details["sym"])
    if layout == "awq:gemm":
        q, z, _ = pi.awq_codes(t)
        g = np.arange(q.shape[0]) // t.details["group_size"]
        return _int_reach(q.astype(np.int64) - z[g].astype(np.int64), g, z.shape[0], 4, False)
    if layout in ("compressed-tensors:pack-quantized", "compressed-tensors:int-quantized"):
        qs, zs, scales = pi.pack_quantized_codes(t)
        group = t.details["group_size"]
        rel = qs.T.astype(np.int64)
        groups = scales.shape[1] if t.details["strategy"] != "tensor" else 1
        g = np.arange(rel.shape[0]) // group if groups > 1 else np.zeros(rel.shape[0], dtype=np.int64)
        if zs is not None:
            rel = rel - zs.T[g].astype(np.int64)
        if t.details["strategy"] == "tensor":  # one scale: one group of every element
            rel = rel.reshape(-1, 1)
            g = np.zeros(rel.shape[0], dtype=np.int64)
        return _int_reach(rel, g, groups, t.details["bits"], zs is None)
    if layout.startswith("fp8:") or layout == "compressed-tensors:float-quantized":
        return _fp8_reach(t)
    if layout == "compressed-tensors:nvfp4-pack-quantized":
        from precisionlab.interop.readers.nvfp4 import BLOCK, nvfp4_parts

        values, _, _ = nvfp4_parts(t)
        rows, cols = values.shape
        padded = np.zeros((rows, -(-cols // BLOCK) * BLOCK), dtype=np.float32)
        padded[:, :cols] = np.abs(values)
        return padded.reshape(rows, -1, BLOCK).max(axis=2).reshape(-1) / 6.0, "6 (e2m1 max) per block of 16"
    if layout == "bnb:nf4":
        from precisionlab.interop.readers.bnb import BNB_NF4, bnb_codes

        codes = bnb_codes(t)
        bs = t.details["blocksize"]
        mags = np.abs(BNB_NF4[codes])
        padded = np.zeros(-(-mags.size // bs) * bs, dtype=np.float32)
        padded[: mags.size] = mags
        return padded.reshape(-1, bs).max(axis=1), "1 (nf4's +-1 at the block absmax)"
    if layout in ("gguf:Q8_0", "gguf:Q4_0", "gguf:Q4_1"):
        return _gguf_reach(t)
    return None


def _int_reach(rel: np.ndarray, g: np.ndarray, groups: int, bits: int, symmetric: bool) -> tuple[np.ndarray, str]:
    """rel: q - z (rows = elements along the grouped axis, columns = channels); g: group of each row."""
    order = np.argsort(g, kind="stable")
    bounds = np.searchsorted(g[order], np.arange(groups + 1))
    rel = rel[order]
    if symmetric:
        top = np.maximum.reduceat(np.abs(rel), bounds[:-1], axis=0)
        return (top / float(1 << (bits - 1))).reshape(-1), f"2^(b-1) = {1 << (bits - 1)} (symmetric, full range)"
    span = np.maximum.reduceat(rel, bounds[:-1], axis=0) - np.minimum.reduceat(rel, bounds[:-1], axis=0)
    return (span / float((1 << bits) - 1)).reshape(-1), f"{(1 << bits) - 1} steps (asymmetric span)"


def _fp8_reach(t: CheckpointTensor) -> tuple[np.ndarray, str] | None:
    from precisionlab.interop.readers.fp8 import fp8_values
    from precisionlab.rounding import decode

    if t.details.get("scale_role") is None:
        return None
    values = np.abs(fp8_values(t))
    values = np.where(np.isnan(values), 0.0, values)
    element = t.details["element"]
    top = float(np.nanmax(np.asarray(decode(np.arange(128, dtype=np.uint8), element), dtype=np.float64)))
    gran = t.details["granularity"]
    if gran == "tensor" or values.ndim != 2:
        reach = np.array([values.max()])
    elif gran == "row":
        reach = values.max(axis=1)
    else:
        br, bc = t.details["block"]
        rows, cols = values.shape
        padded = np.zeros((-(-rows // br) * br, -(-cols // bc) * bc), dtype=np.float32)
        padded[:rows, :cols] = values
        reach = padded.reshape(padded.shape[0] // br, br, -1, bc).max(axis=(1, 3)).reshape(-1)
    return reach / top, f"{top:g} ({element} max)"


def _gguf_reach(t: CheckpointTensor) -> tuple[np.ndarray, str]:
    blocks = np.asarray(t.refs["blocks"].load(), dtype=np.uint8).reshape(-1, t.details["block_bytes"])
    kind = t.details["ggml_type"]
    if kind == "Q8_0":
        q = np.abs(blocks[:, 2:34].view(np.int8).astype(np.int16))
        return q.max(axis=1) / 127.0, "127 (int8)"
    data = blocks[:, 2:18] if kind == "Q4_0" else blocks[:, 4:20]
    q = np.concatenate([data & np.uint8(15), data >> np.uint8(4)], axis=1).astype(np.int16)
    if kind == "Q4_0":
        return np.abs(q - 8).max(axis=1) / 8.0, "8 (Q4_0's -8)"
    return (q.max(axis=1) - q.min(axis=1)) / 15.0, "15 steps (Q4_1 span)"


def scale_vs_amax(t: CheckpointTensor) -> CheckResult | None:
    reach_desc = _group_reach(t)
    if reach_desc is None:
        return None
    reach, desc = reach_desc
    nonzero = reach[reach > 0]
    if nonzero.size == 0:
        return CheckResult("scale_vs_amax", False, {"groups": float(reach.size)}, "every group is zero")
    median = float(np.median(nonzero))
    amax = float(np.nanmax(np.abs(t.dequantize()))) if t.size else 0.0
    evidence: dict[str, float | str] = {
        "convention_top": desc, "groups": float(reach.size), "median_reach": round(median, 4),
        "p10_reach": round(float(np.percentile(nonzero, 10)), 4), "max_reach": round(float(nonzero.max()), 4),
        "groups_under_half": round(float(np.mean(nonzero < 0.5)), 6), "dequantized_amax": amax,
    }
    reasons = []
    if median < MIN_FILL:
        reasons.append(f"the median group's codes reach {median:.0%} of the convention's top {desc}: the scales were "
                       "chosen for a wider range than these codes use")
    if not math.isfinite(amax) or amax > MAX_PLAUSIBLE_AMAX:
        reasons.append(f"the dequantized amax {amax:.4g} is implausible for weights (> {MAX_PLAUSIBLE_AMAX:g}): "
                       "a scale read in the wrong direction or dtype")
    if reasons:
        return CheckResult("scale_vs_amax", True, evidence, "; ".join(reasons))
    return CheckResult("scale_vs_amax", False, evidence,
                       f"the scales match their groups: the median group reaches {median:.0%} of {desc}")
