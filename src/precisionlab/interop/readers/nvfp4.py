"""compressed-tensors nvfp4-pack-quantized: FP4 (E2M1) codes with E4M3 block scales and a global scale.

Layout (compressed_tensors/compressors/nvfp4/): weight_packed uint8 (out, in/2), element 2k in the
low nibble and 2k + 1 in the high nibble of byte k (`pack_fp4_to_uint8`); weight_scale E4M3
(out, in/16), one scale per 16 elements of a row; weight_global_scale float32 [1].

The global scale is stored in the ENCODE direction: compressed-tensors computes it as
448 * 6 / amax(tensor) (quantization/utils/helpers.py, `generate_gparam`) and the decoder divides
by it (quantization/lifecycle/forward_helpers.py, `_dequantize`: scale = scale / global_scale).
precisionlab's nvfp4 scheme (and TensorRT-ModelOpt's weight_scale_2) store the reciprocal, the
decode direction g = amax / (6 * 448), and multiply.

Values, as the toolkit's decompressor computes them (`NVFP4PackedCompressor.decompress`): the fp4
values and the e4m3 scales are cast to bfloat16 (exact), the effective scale is the float32
quotient fp32(s_block / global_scale) (a bf16 tensor divided by a float32 tensor is float32), the
product fp32(value * effective scale) is rounded once to bfloat16.
"""

from __future__ import annotations

import numpy as np

from precisionlab.interop.checkpoint import UNKNOWN, CheckpointTensor, PartRef
from precisionlab.interop.readers.common import float_values, fp8_table, round_to

BLOCK = 16


def build_nvfp4(name: str, refs: dict[str, PartRef], notes: list[str]) -> CheckpointTensor:
    need = {"weight_packed", "weight_scale", "weight_global_scale"} - set(refs)
    wp = refs.get("weight_packed")
    problem = ""
    rows = cols = 0
    if need or wp is None:
        problem = f"nvfp4 parts missing: {', '.join(sorted(need))}"
    elif wp.stored_dtype != "U8" or len(wp.shape) != 2:
        problem = "weight_packed is not a 2-D uint8 array"
    else:
        rows, cols = wp.shape[0], wp.shape[1] * 2
        ws, gs = refs["weight_scale"], refs["weight_global_scale"]
        if ws.stored_dtype != "F8_E4M3" or ws.shape != (rows, -(-cols // BLOCK)):
            problem = f"weight_scale {ws.stored_dtype} {list(ws.shape)} is not E4M3 ({rows}, {-(-cols // BLOCK)})"
        elif gs.stored_dtype not in ("F32", "BF16", "F16") or gs.shape not in ((), (1,)):
            problem = f"weight_global_scale {gs.stored_dtype} {list(gs.shape)} is not one float"
    if problem or wp is None:
        notes.append(f"{name}: {problem}")
        first = next(iter(refs.values()))
        return CheckpointTensor(name, UNKNOWN, None, (0,), first.file, refs, None, {}, problem)
    details = {"block_size": BLOCK, "global_scale_direction": "encode (values are divided by it)",
               "out_dtype": "bfloat16"}
    return CheckpointTensor(name, "compressed-tensors:nvfp4-pack-quantized", "nvfp4", (rows, cols), wp.file, refs,
                            decode_nvfp4, details)


def nvfp4_parts(t: CheckpointTensor) -> tuple[np.ndarray, np.ndarray, float]:
    """(fp4 values (out, in) float32, e4m3 block scales (out, in/16) float32, the stored global scale)."""
    parts = t.parts()
    packed = np.asarray(parts["weight_packed"], dtype=np.uint8)
    codes = np.stack([packed & np.uint8(0x0F), packed >> np.uint8(4)], axis=-1).reshape(t.shape)
    values = fp8_table_e2m1()[codes]
    scales = fp8_table("e4m3")[np.asarray(parts["weight_scale"], dtype=np.uint8)]
    g = float(float_values(parts["weight_global_scale"], t.refs["weight_global_scale"].stored_dtype).reshape(-1)[0])
    return values, scales, g


def fp8_table_e2m1() -> np.ndarray:
    from precisionlab.rounding import decode

    return np.asarray(decode(np.arange(16, dtype=np.uint8), "e2m1"), dtype=np.float32)


def decode_nvfp4(t: CheckpointTensor) -> np.ndarray:
    values, scales, g = nvfp4_parts(t)
    effective = (scales / np.float32(g)).astype(np.float32)
    cols = t.shape[1]
    product = values * np.repeat(effective, BLOCK, axis=1)[:, :cols]
    return np.ascontiguousarray(round_to(product, t.details["out_dtype"]))
