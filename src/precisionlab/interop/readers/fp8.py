"""FP8 weights with their scales: OCP E4M3 (e4m3fn), AMD's E4M3FNUZ, E5M2; per tensor, per output
channel or in 2-D blocks (DeepSeek-V3's 128 x 128).

Conventions and their sources:

  - the scale multiplies: w = value(code) * scale (per tensor, per row (out, 1), per column (1, in),
    or per 2-D block). DeepSeek-V3 names it `weight_scale_inv` and
    still multiplies (inference/kernel.py, weight_dequant: y = x * s per 128 x 128 block); HF's
    FP8 checkpoints (quant_method "fp8", weight_block_size [128, 128]) keep that name; per-tensor and
    per-channel checkpoints (compressed-tensors float-quantized, fbgemm) call it `weight_scale`.
  - E4M3 (OCP, max 448, NaN 0x7F / 0xFF, -0 = 0x80) and E4M3FNUZ (max 240, NaN 0x80, no -0) give
    the same bits values a factor of two apart (fnuz has exponent bias 8, fn bias 7). Servers that
    move OCP weights to FNUZ hardware keep the bits, map 0x80 (fn's -0, fnuz's NaN) to 0 and double
    the scale (vLLM, model_executor/layers/quantization/utils/w8a8_utils.py,
    normalize_e4m3fn_to_e4m3fnuz), so the dequantized weights are unchanged.
  - values: the exact product fp32(value * scale), the float32 product DeepSeek-V3's kernel
    computes; compressed-tensors float-quantized computes it in the scale's dtype
    (`_dequantize`: x_q.to(scale.dtype) * scale), so a bf16 scale gives bf16-rounded weights.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from precisionlab.interop.checkpoint import UNKNOWN, CheckpointTensor, PartRef
from precisionlab.interop.readers.common import FLOAT_DTYPES, FP8_FORMATS, float_values, fp8_table, round_to
from precisionlab.quant.scheme import parse_scheme

LAYOUT_NAMES = {"e4m3": "e4m3fn", "e4m3fnuz": "e4m3fnuz", "e5m2": "e5m2", "e5m2fnuz": "e5m2fnuz"}
SCALE_OPTIONS = {"F32": "", "BF16": ":scale=bf16", "F16": ":scale=fp16"}


def _granularity(shape: tuple[int, ...], scale_shape: tuple[int, ...], block: list[int] | None
                 ) -> tuple[str, tuple[int, int]] | None:
    """(grammar granularity, (block rows, block cols)) of a scale array for a 2-D weight, or None."""
    if len(scale_shape) == 0 or scale_shape == (1,) or scale_shape == (1, 1):
        return "", (shape[0] if shape else 1, shape[-1] if shape else 1)
    if len(shape) != 2:
        return None
    rows, cols = shape
    if scale_shape in ((rows, 1), (rows,)):
        return "row", (1, cols)
    if scale_shape == (1, cols) or (scale_shape == (cols, 1) and rows != cols):
        return "col", (rows, 1)  # (cols, 1): the per-row scales of the transposed weight (noted by build_fp8)
    if len(scale_shape) == 2:
        sizes = [block] if block else [[128, 128]]
        inferred = [-(-rows // scale_shape[0]), -(-cols // scale_shape[1])]
        if all(v > 0 and v & (v - 1) == 0 for v in inferred):  # power-of-two blocks only, when guessing
            sizes.append(inferred)
        for br, bc in sizes:
            if br > 0 and bc > 0 and (-(-rows // br), -(-cols // bc)) == scale_shape:
                return f"block{br}x{bc}", (br, bc)
    return None


def build_fp8(name: str, refs: dict[str, PartRef], cfg: dict[str, Any], notes: list[str], layout_prefix: str,
              out_dtype: str | None) -> CheckpointTensor:
    """An FP8 weight (role 'weight') and its optional scale (role 'weight_scale' or 'weight_scale_inv')."""
    w = refs["weight"]
    element = FP8_FORMATS[w.stored_dtype]
    scale_role = next((r for r in ("weight_scale", "weight_scale_inv") if r in refs), None)
    details: dict[str, Any] = {"element": element, "encoding": LAYOUT_NAMES[element], "scale_role": scale_role}
    layout = f"{layout_prefix}:{LAYOUT_NAMES[element]}" if layout_prefix == "fp8" else layout_prefix
    if scale_role is None:
        details.update(block=None, out_dtype="float32")
        return CheckpointTensor(name, layout, None, w.shape, w.file, refs, decode_fp8, details)
    s = refs[scale_role]
    if s.stored_dtype not in FLOAT_DTYPES:
        why = f"{scale_role} is {s.stored_dtype}, not a float"
        notes.append(f"{name}: {why}")
        return CheckpointTensor(name, UNKNOWN, None, w.shape, w.file, refs, None, details, why)
    block_cfg = cfg.get("weight_block_size")
    block_size = [int(v) for v in block_cfg] if isinstance(block_cfg, list) and len(block_cfg) == 2 else None
    gran = _granularity(w.shape, s.shape, block_size)
    if gran is None:
        why = f"{scale_role} {list(s.shape)} fits no per-tensor, per-row or block layout of a {list(w.shape)} weight"
        notes.append(f"{name}: {why}")
        return CheckpointTensor(name, UNKNOWN, None, w.shape, w.file, refs, None, details, why)
    text, block = gran
    if text == "col" and s.shape == (w.shape[1], 1):
        notes.append(f"{name}: {scale_role} {list(s.shape)} holds one scale per column of the {list(w.shape)} weight, "
                     "shaped as the per-row scales of its transpose: read as per-column scales")
        details["scale_fits_transpose"] = True
    details.update(block=list(block), granularity=text or "tensor", scale_dtype=FLOAT_DTYPES[s.stored_dtype],
                   out_dtype=out_dtype or "float32")
    scheme = str(parse_scheme(element + (f":{text}" if text else "") + SCALE_OPTIONS.get(s.stored_dtype, "")))
    return CheckpointTensor(name, layout, scheme, w.shape, w.file, refs, decode_fp8, details)


def fp8_values(t: CheckpointTensor) -> np.ndarray:
    """The decoded fp8 codes (unscaled), float32, in the tensor's shape."""
    return fp8_table(t.details["element"])[np.asarray(t.refs["weight"].load(), dtype=np.uint8)]


def scale_grid(t: CheckpointTensor) -> np.ndarray | None:
    """The scale expanded to the weight's shape (float32), or None when the file has no scale."""
    role = t.details.get("scale_role")
    if role is None:
        return None
    ref = t.refs[role]
    s = float_values(ref.load(), ref.stored_dtype)
    gran = t.details["granularity"]
    if gran == "tensor":
        return np.broadcast_to(s.reshape(()), t.shape)
    rows, cols = t.shape
    if gran == "row":
        return np.broadcast_to(s.reshape(rows, 1), t.shape)
    if gran == "col":
        return np.broadcast_to(s.reshape(1, cols), t.shape)
    br, bc = t.details["block"]
    return np.repeat(np.repeat(s, br, axis=0), bc, axis=1)[:rows, :cols]


def decode_fp8(t: CheckpointTensor) -> np.ndarray:
    values = fp8_values(t)
    s = scale_grid(t)
    if s is None:
        return np.array(values, dtype=np.float32)
    out_dtype = t.details["out_dtype"]
    return np.ascontiguousarray(round_to(values * s, out_dtype), dtype=np.float32)
