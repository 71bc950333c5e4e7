"""Integer codes packed into int32 words: GPTQ, AWQ (GEMM) and compressed-tensors pack-quantized.

Word packing (little-endian bit order within a 32-bit word; `per` = 32 / bits codes per word):

    sequential   code k of a word sits at bits [bits*k, bits*(k+1)): GPTQ (qweight along the input
                 dimension, qzeros along the output dimension), compressed-tensors
    AWQ          the word of output columns 8w .. 8w+7 holds, in nibble k, column 8w + AWQ_ORDER[k],
                 AWQ_ORDER = 0, 2, 4, 6, 1, 3, 5, 7 (AutoAWQ awq/modules/linear/gemm.py, `order_map`)
    dense        compressed-tensors >= 0.10 packs any width 1..8 densely: element i of a row at bit
                 i*bits of the row's words, a code may straddle two words (for 2, 4 and 8 bits this is
                 the sequential layout)

Dequantization, each as its toolkit computes it (codes and zero points are small integers, so the
product with an fp16 / bf16 scale is exact in float32 and rounded once to the scale's dtype):

    GPTQ (AutoGPTQ qlinear_cuda_old.py, GPTQModel nn_modules/qlinear/__init__.py)
        w[i, j] = fp16(scales[g_idx[i], j] * (q[i, j] - z[g_idx[i], j]))
        v1 ("checkpoint_format": "gptq"): z = stored nibble + 1;  v2 ("gptq_v2"): z = stored nibble
    AWQ GEMM (AutoAWQ awq/utils/packing_utils.py, dequantize_gemm)
        w[i, j] = fp16((q[i, j] - z[i // G, j]) * scales[i // G, j])
    compressed-tensors pack-quantized (compressed_tensors/compressors/pack_quantized/helpers.py,
    quantization/lifecycle/forward_helpers.py `_dequantize`)
        stored = q + 2^(b-1);  w = (q - z) * s  in the scale's dtype

GPTQ and AWQ store the weight transposed ((in, out) with in = the Linear's input features); the
readers return the Linear's (out, in) weight.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from precisionlab.interop.checkpoint import UNKNOWN, CheckpointTensor, Decoder, PartRef
from precisionlab.interop.readers.common import FLOAT_DTYPES, canonical_scheme, float_values, round_to

AWQ_ORDER = (0, 2, 4, 6, 1, 3, 5, 7)
"""AutoAWQ's nibble order: nibble k of a word holds column 8w + AWQ_ORDER[k]."""
WORD_BITS = 32


def unpack_words(words: np.ndarray, bits: int, axis: int, order: tuple[int, ...] | None = None) -> np.ndarray:
    """int32 words -> uint8 codes, the packed axis grown by 32 / bits (bits dividing 32).

    order: the position within each word's group of codes that nibble k fills (None: k itself)."""
    per = WORD_BITS // bits
    u = np.ascontiguousarray(words).view(np.uint32)
    shifts = (np.arange(per, dtype=np.uint32) * np.uint32(bits))
    mask = np.uint32((1 << bits) - 1)
    if axis == 0:
        codes = ((u[:, None, :] >> shifts[None, :, None]) & mask).astype(np.uint8)  # (rows, per, cols)
        if order is not None:
            codes = codes[:, np.argsort(order), :]
        return codes.reshape(u.shape[0] * per, u.shape[1])
    codes = ((u[:, :, None] >> shifts[None, None, :]) & mask).astype(np.uint8)  # (rows, cols, per)
    if order is not None:
        codes = codes[:, :, np.argsort(order)]
    return codes.reshape(u.shape[0], u.shape[1] * per)


def unpack_dense(words: np.ndarray, bits: int, count: int) -> np.ndarray:
    """compressed-tensors' dense row packing: (rows, words) int32 -> (rows, count) uint8 codes."""
    if WORD_BITS % bits == 0:
        return unpack_words(words, bits, axis=1)[:, :count]
    u = np.ascontiguousarray(words).view(np.uint32)
    rows = u.shape[0]
    bit_planes = np.unpackbits(u.view(np.uint8).reshape(rows, -1), axis=1, bitorder="little")[:, : count * bits]
    weights = (1 << np.arange(bits)).astype(np.uint8)
    return (bit_planes.reshape(rows, count, bits) * weights).sum(axis=2).astype(np.uint8)


def _ints(cfg: dict[str, Any], *keys: str) -> int | None:
    for key in keys:
        value = cfg.get(key)
        if isinstance(value, bool):
            continue
        if isinstance(value, int):
            return value
    return None


def _unknown(name: str, refs: dict[str, PartRef], why: str, notes: list[str], shape: tuple[int, ...] = (0,)
             ) -> CheckpointTensor:
    notes.append(f"{name}: {why}")
    first = next(iter(refs.values()))
    return CheckpointTensor(name, UNKNOWN, None, shape, first.file, refs, None, {}, why)


def _scale_option(stored_dtype: str) -> str:
    """The scheme option for an integer scheme's scale format (fp16 is the default)."""
    return {"F16": "", "BF16": ":scale=bf16", "F32": ":scale=fp32"}.get(stored_dtype, "")


# --------------------------------------------------------------------------- GPTQ
def gptq_version(cfg: dict[str, Any]) -> tuple[str, str]:
    """("v1" | "v2", how it was decided) from quantize_config / quantization_config.

    GPTQModel writes "format" (older releases and AutoGPTQ: "checkpoint_format"); "gptq" is v1
    (zero points stored minus one), "gptq_v2" is v2. A config without either is AutoGPTQ's v1."""
    for key in ("checkpoint_format", "format"):
        value = cfg.get(key)
        if isinstance(value, str):
            if value.lower() == "gptq_v2":
                return "v2", f"{key} = gptq_v2"
            if value.lower() == "gptq":
                return "v1", f"{key} = gptq"
    return "v1", "no checkpoint_format / format in the config: AutoGPTQ's default, gptq (v1)"


def gptq_symmetry(cfg: dict[str, Any], qzeros: PartRef, bits: int, out: int) -> tuple[bool, str]:
    """(symmetric, how it was decided): the config's "sym" when it has one; otherwise from the zero points,
    as AutoGPTQ writes them: a symmetric file holds one zero point (2^(b-1), or 2^(b-1) - 1 stored by v1),
    an asymmetric one as many as its groups need."""
    value = cfg.get("sym")
    if isinstance(value, bool):
        return value, "config"
    distinct = np.unique(unpack_words(np.asarray(qzeros.load()), bits, axis=1)[:, :out]).size
    if distinct == 1:
        return True, "no 'sym' in the config: read as symmetric (every zero point is the same)"
    return False, f"no 'sym' in the config: read as asymmetric (the zero points take {distinct} distinct values)"


def build_gptq(name: str, refs: dict[str, PartRef], cfg: dict[str, Any], notes: list[str]) -> CheckpointTensor:
    """A GPTQ Linear (qweight, qzeros, scales, optional g_idx) as one tensor of shape (out, in)."""
    need = {"qweight", "qzeros", "scales"} - set(refs)
    if need:
        return _unknown(name, refs, f"GPTQ parts missing: {', '.join(sorted(need))}", notes)
    qw, qz, sc = refs["qweight"], refs["qzeros"], refs["scales"]
    if (qw.stored_dtype, qz.stored_dtype) != ("I32", "I32") or sc.stored_dtype not in FLOAT_DTYPES or \
            len(qw.shape) != 2 or len(qz.shape) != 2 or len(sc.shape) != 2:
        return _unknown(name, refs, "GPTQ parts are not 2-D int32 qweight / qzeros and float scales", notes)
    out = qw.shape[1]
    n_groups = sc.shape[0]
    if sc.shape[1] != out or qz.shape[0] != n_groups or out == 0:
        return _unknown(name, refs, f"GPTQ shapes disagree: qweight {list(qw.shape)}, qzeros {list(qz.shape)}, "
                        f"scales {list(sc.shape)}", notes)
    bits = _ints(cfg, "bits", "w_bit")
    inferred = qz.shape[1] * WORD_BITS // out if (qz.shape[1] * WORD_BITS) % out == 0 else None
    if bits is None:
        bits = inferred
    if bits not in (2, 4, 8) or inferred != bits:
        return _unknown(name, refs, f"GPTQ with {bits}-bit codes (qzeros {list(qz.shape)} for {out} outputs): "
                        "this reader decodes 2, 4 and 8 bits", notes)
    inputs = qw.shape[0] * WORD_BITS // bits
    group = _ints(cfg, "group_size", "q_group_size")
    if group is None or group <= 0:
        group = inputs if (group == -1 or n_groups == 1) else -(-inputs // n_groups)
    if -(-inputs // group) != n_groups:
        return _unknown(name, refs, f"GPTQ group size {group} over {inputs} inputs gives {-(-inputs // group)} "
                        f"groups, scales hold {n_groups}", notes)
    if "g_idx" in refs and (refs["g_idx"].shape != (inputs,) or refs["g_idx"].stored_dtype not in ("I32", "I64")):
        return _unknown(name, refs, f"GPTQ g_idx {list(refs['g_idx'].shape)} does not index {inputs} inputs", notes)
    version, why = gptq_version(cfg)
    sym, sym_source = gptq_symmetry(cfg, qz, bits, out)
    if sym_source != "config":
        notes.append(f"{name}: {sym_source}")
    desc_act = False
    if "g_idx" in refs:  # act order: the groups follow g_idx, not runs of the input dimension
        g_idx = np.asarray(refs["g_idx"].load(), dtype=np.int64)
        desc_act = not np.array_equal(g_idx, np.arange(inputs) // group)
    details = {"bits": bits, "group_size": group, "in_features": inputs, "out_features": out, "version": version,
               "version_source": why, "sym": sym, "sym_source": sym_source, "desc_act": desc_act,
               "scale_dtype": FLOAT_DTYPES[sc.stored_dtype], "int_range": "full" if sym else None}
    gran = "row" if n_groups == 1 else f"g{group}"
    asym = f"uint{bits}:{gran}" if bits in (4, 8) else f"int{bits}:{gran}:asym"  # no uint2 element: same grid
    scheme = (f"int{bits}:{gran}:range=full" if sym else asym) + _scale_option(sc.stored_dtype)
    return CheckpointTensor(name, f"gptq:{version}", None if desc_act else canonical_scheme(scheme), (out, inputs),
                            qw.file, refs,
                            decode_gptq, details)


def gptq_codes(t: CheckpointTensor, version: str | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray,
                                                                          np.ndarray]:
    """(q (in, out), zero points (groups, out) under `version`, scales float32 (groups, out), g_idx)."""
    d = t.details
    parts = t.parts()
    bits = d["bits"]
    q = unpack_words(parts["qweight"], bits, axis=0)
    z = unpack_words(parts["qzeros"], bits, axis=1)[:, : d["out_features"]].astype(np.int16)
    if (version or d["version"]) == "v1":
        z = z + np.int16(1)
    scales = float_values(parts["scales"], t.refs["scales"].stored_dtype)
    if "g_idx" in parts:
        g_idx = np.asarray(parts["g_idx"], dtype=np.int64)
    else:
        g_idx = np.arange(d["in_features"]) // d["group_size"]
    if g_idx.size and (g_idx.min() < 0 or g_idx.max() >= scales.shape[0]):
        raise ValueError(f"{t.name}: g_idx points outside the {scales.shape[0]} groups")
    return q, z, scales, g_idx


ROWS_PER_CHUNK = 1024
"""Input rows decoded at a time by the GPTQ / AWQ decoders (bounds their temporaries)."""


def decode_gptq(t: CheckpointTensor) -> np.ndarray:
    d = t.details
    parts = t.parts()
    bits = d["bits"]
    per = WORD_BITS // bits
    z = unpack_words(parts["qzeros"], bits, axis=1)[:, : d["out_features"]].astype(np.int16)
    if d["version"] == "v1":
        z = z + np.int16(1)
    scales = float_values(parts["scales"], t.refs["scales"].stored_dtype)
    g_idx = (np.asarray(parts["g_idx"], dtype=np.int64) if "g_idx" in parts
             else np.arange(d["in_features"]) // d["group_size"])
    if g_idx.size and (g_idx.min() < 0 or g_idx.max() >= scales.shape[0]):
        raise ValueError(f"{t.name}: g_idx points outside the {scales.shape[0]} groups")
    out = np.empty(t.shape, dtype=np.float32)  # (out, in)
    words = parts["qweight"]
    step = max(per, ROWS_PER_CHUNK // per * per)
    for r0 in range(0, d["in_features"], step):
        q = unpack_words(np.asarray(words[r0 // per : (r0 + step) // per]), bits, axis=0)
        g = g_idx[r0 : r0 + q.shape[0]]
        w = scales[g] * (q.astype(np.int16) - z[g]).astype(np.float32)
        out[:, r0 : r0 + q.shape[0]] = round_to(w, d["scale_dtype"]).T
    return out


# --------------------------------------------------------------------------- AWQ
def build_awq(name: str, refs: dict[str, PartRef], cfg: dict[str, Any], notes: list[str]) -> CheckpointTensor:
    """An AutoAWQ GEMM Linear (qweight (in, out/8), qzeros (groups, out/8), scales (groups, out))."""
    need = {"qweight", "qzeros", "scales"} - set(refs)
    if need:
        return _unknown(name, refs, f"AWQ parts missing: {', '.join(sorted(need))}", notes)
    version = str(cfg.get("version", "gemm")).lower()
    if version != "gemm":
        return _unknown(name, refs, f"AWQ version {version}: this reader decodes the GEMM layout", notes)
    qw, qz, sc = refs["qweight"], refs["qzeros"], refs["scales"]
    bits = _ints(cfg, "bits", "w_bit") or 4
    if bits != 4 or qw.stored_dtype != "I32" or qz.stored_dtype != "I32" or sc.stored_dtype not in FLOAT_DTYPES \
            or len(qw.shape) != 2 or len(sc.shape) != 2:
        return _unknown(name, refs, f"AWQ GEMM with {bits}-bit codes or unexpected dtypes: this reader decodes "
                        "4-bit int32 qweight / qzeros and float scales", notes)
    inputs, out = qw.shape[0], qw.shape[1] * 8
    n_groups = sc.shape[0]
    if sc.shape[1] != out or qz.shape != (n_groups, qw.shape[1]) or n_groups == 0 or inputs % n_groups:
        return _unknown(name, refs, f"AWQ shapes disagree: qweight {list(qw.shape)}, qzeros {list(qz.shape)}, "
                        f"scales {list(sc.shape)}", notes)
    group = inputs // n_groups
    cfg_group = _ints(cfg, "group_size", "q_group_size")
    if cfg_group not in (None, -1, group):
        notes.append(f"{name}: the config says group size {cfg_group}, the scales imply {group}; the scales win")
    zero_point = cfg.get("zero_point", True) is not False
    details = {"bits": 4, "group_size": group, "in_features": inputs, "out_features": out, "zero_point": zero_point,
               "scale_dtype": FLOAT_DTYPES[sc.stored_dtype], "nibble_order": list(AWQ_ORDER)}
    gran = "row" if n_groups == 1 else f"g{group}"
    return CheckpointTensor(name, "awq:gemm", canonical_scheme(f"uint4:{gran}" + _scale_option(sc.stored_dtype)),
                            (out, inputs),
                            qw.file, refs, decode_awq, details)


def awq_codes(t: CheckpointTensor, order: tuple[int, ...] | None = AWQ_ORDER, zero_order: tuple[int, ...] | None
              = AWQ_ORDER) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(q (in, out), zero points (groups, out), scales float32 (groups, out)) under the given nibble orders."""
    parts = t.parts()
    q = unpack_words(parts["qweight"], 4, axis=1, order=order)
    z = unpack_words(parts["qzeros"], 4, axis=1, order=zero_order).astype(np.int16)
    scales = float_values(parts["scales"], t.refs["scales"].stored_dtype)
    return q, z, scales


def decode_awq(t: CheckpointTensor) -> np.ndarray:
    d = t.details
    parts = t.parts()
    z = unpack_words(parts["qzeros"], 4, axis=1, order=AWQ_ORDER).astype(np.int16)
    scales = float_values(parts["scales"], t.refs["scales"].stored_dtype)
    out = np.empty(t.shape, dtype=np.float32)  # (out, in)
    for r0 in range(0, d["in_features"], ROWS_PER_CHUNK):
        q = unpack_words(np.asarray(parts["qweight"][r0 : r0 + ROWS_PER_CHUNK]), 4, axis=1, order=AWQ_ORDER)
        g = np.arange(r0, r0 + q.shape[0]) // d["group_size"]
        w = (q.astype(np.int16) - z[g]).astype(np.float32) * scales[g]
        out[:, r0 : r0 + q.shape[0]] = round_to(w, d["scale_dtype"]).T
    return out


# --------------------------------------------------------------------------- compressed-tensors
def build_pack_quantized(name: str, refs: dict[str, PartRef], args: dict[str, Any], notes: list[str]
                         ) -> CheckpointTensor:
    """compressed-tensors pack-quantized: weight_packed int32 (out, ceil(in*b/32)), weight_scale,
    weight_shape, and weight_zero_point (packed along the output dimension) when asymmetric."""
    need = {"weight_packed", "weight_scale", "weight_shape"} - set(refs)
    if need:
        return _unknown(name, refs, f"pack-quantized parts missing: {', '.join(sorted(need))}", notes)
    wp, ws, shape_ref = refs["weight_packed"], refs["weight_scale"], refs["weight_shape"]
    if wp.stored_dtype != "I32" or len(wp.shape) != 2 or ws.stored_dtype not in FLOAT_DTYPES or \
            shape_ref.stored_dtype not in ("I32", "I64") or shape_ref.shape != (2,):
        return _unknown(name, refs, "pack-quantized parts are not a 2-D int32 weight_packed, float weight_scale and "
                        "a 2-element weight_shape", notes)
    rows, cols = (int(v) for v in shape_ref.load())
    if rows != wp.shape[0] or cols <= 0:
        return _unknown(name, refs, f"weight_shape {[rows, cols]} does not match weight_packed {list(wp.shape)}", notes)
    candidates = [b for b in range(1, 9) if -(-cols * b // WORD_BITS) == wp.shape[1]]
    bits = _ints(args, "num_bits")
    if bits is None and len(candidates) == 1:
        bits = candidates[0]
    if bits not in candidates:
        return _unknown(name, refs, f"weight_packed {list(wp.shape)} does not hold {cols} codes of {bits} bits", notes)
    return _ct_int_tensor(name, refs, rows, cols, bits, "compressed-tensors:pack-quantized", decode_pack_quantized,
                          notes)


def build_int_quantized(name: str, refs: dict[str, PartRef], notes: list[str]) -> CheckpointTensor:
    """compressed-tensors int-quantized (its naive compressor, e.g. W8A8 checkpoints): weight int8 (out, in)
    holding the codes as they are, weight_scale, and an unpacked weight_zero_point when asymmetric."""
    w, ws = refs["weight"], refs.get("weight_scale")
    if ws is None or w.stored_dtype != "I8" or len(w.shape) != 2 or ws.stored_dtype not in FLOAT_DTYPES:
        return _unknown(name, refs, "int-quantized parts are not a 2-D int8 weight with a float weight_scale", notes)
    return _ct_int_tensor(name, refs, w.shape[0], w.shape[1], 8, "compressed-tensors:int-quantized",
                          decode_pack_quantized, notes)


def _ct_int_tensor(name: str, refs: dict[str, PartRef], rows: int, cols: int, bits: int, layout: str, decoder: Decoder,
                   notes: list[str]) -> CheckpointTensor:
    """The strategy (tensor, channel, group) from weight_scale's shape, and the tensor."""
    ws = refs["weight_scale"]
    first = refs.get("weight_packed", refs.get("weight"))
    assert first is not None
    scale_shape = ws.shape if ws.shape else (1,)
    if scale_shape == (rows, 1):
        strategy, group, gran = "channel", cols, "row"
    elif len(scale_shape) == 2 and scale_shape[0] == rows and cols % scale_shape[1] == 0 and scale_shape[1] > 1:
        strategy, group = "group", cols // scale_shape[1]
        gran = f"g{group}"
    elif ws.shape in ((), (1,)):
        strategy, group, gran = "tensor", cols, ""
    else:
        return _unknown(name, refs, f"weight_scale {list(ws.shape)} fits no strategy for a {[rows, cols]} weight",
                        notes)
    symmetric = "weight_zero_point" not in refs
    details = {"bits": bits, "strategy": strategy, "group_size": group, "symmetric": symmetric,
               "scale_dtype": FLOAT_DTYPES[ws.stored_dtype], "int_range": "full" if symmetric else None}
    scheme = None
    if bits in (2, 4, 8):
        head = f"int{bits}" + (f":{gran}" if gran else "")
        scheme = head + (":range=full" if symmetric else ":asym") + _scale_option(ws.stored_dtype)
    return CheckpointTensor(name, layout, canonical_scheme(scheme), (rows, cols), first.file, refs, decoder, details)


def pack_quantized_codes(t: CheckpointTensor) -> tuple[np.ndarray, np.ndarray | None, np.ndarray]:
    """(signed codes (out, in) int16, zero points (out, groups) or None, scales float32 (out, groups))."""
    d = t.details
    parts = t.parts()
    rows, cols = t.shape
    offset = 1 << (d["bits"] - 1)
    if "weight" in parts:  # int-quantized: the int8 codes as they are
        q = np.asarray(parts["weight"], dtype=np.int16).reshape(rows, cols)
    else:
        q = unpack_dense(parts["weight_packed"], d["bits"], cols).astype(np.int16) - np.int16(offset)
    scales = float_values(parts["weight_scale"], t.refs["weight_scale"].stored_dtype).reshape(rows, -1) \
        if d["strategy"] != "tensor" else float_values(parts["weight_scale"], t.refs["weight_scale"].stored_dtype
                                                       ).reshape(1, 1)
    z = None
    if "weight_zero_point" in parts:
        groups = scales.shape[1]
        zp = np.asarray(parts["weight_zero_point"])
        if t.refs["weight_zero_point"].stored_dtype == "I32" and zp.ndim == 2 and "weight" not in parts:
            z = unpack_dense(np.ascontiguousarray(zp.T), d["bits"], rows).T.astype(np.int16) - np.int16(offset)
        else:
            z = np.asarray(zp, dtype=np.int16).reshape(rows, groups)
    return q, z, scales


def decode_pack_quantized(t: CheckpointTensor) -> np.ndarray:
    q, z, scales = pack_quantized_codes(t)
    rows, cols = t.shape
    group = t.details["group_size"]
    s = np.repeat(scales, group, axis=1) if scales.shape[1] > 1 or t.details["strategy"] == "group" else scales
    if z is not None:
        zz = np.repeat(z, group, axis=1) if z.shape[1] * group == cols else z
        codes = (q - zz).astype(np.float32)
    else:
        codes = q.astype(np.float32)
    return np.ascontiguousarray(round_to(codes * s, t.details["scale_dtype"]).reshape(rows, cols))
