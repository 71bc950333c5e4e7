"""nibble_order: 4-bit codes unpacked in another lane order than they were packed in."""

from __future__ import annotations

import math

import numpy as np

from precisionlab.interop.checkpoint import CheckpointTensor
from precisionlab.interop.checks.result import CheckResult

SMOOTH_MARGIN = 0.1
"""A candidate order must be this much smoother (ratio difference) than the declared one to flag."""
ZERO_ALIGNMENT_STEPS = 0.5


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


