"""bitsandbytes 4-bit NF4 (Params4bit, QLoRA), as saved by `QuantState.as_dict(packed=True)`.

Parts of a weight W (bitsandbytes/functional.py, QuantState):

    W                                   uint8 (ceil(n/2), 1): two codes per byte, HIGH nibble first
                                        (element 2k = byte >> 4, element 2k + 1 = byte & 15)
    W.absmax                            float32 per block of `blocksize` (default 64) elements; with
                                        nested quantization (compress_statistics) uint8 codes instead
    W.quant_map                         the 16 NF4 values (float32)
    W.nested_absmax, W.nested_quant_map float32 absmax per 256 absmax codes and the 256-value dynamic
                                        map, with `nested_offset` (the mean subtracted before nesting)
    W.quant_state.bitsandbytes__nf4     uint8 bytes of a JSON object: quant_type, blocksize, dtype,
                                        shape, nested_blocksize, nested_offset

Dequantization (backends/default/ops.py `_dequantize_4bit_compute`, the CPU kernels alike):
absmax = nested_quant_map[code] * nested_absmax[i // 256] + nested_offset when nested (float32),
then w = NF4[code] * absmax[i // blocksize] in float32, cast to the stored dtype.

Scheme: `nf4:g<blocksize>:bnb` (bitsandbytes' own arithmetic for choosing codes, so quantizing the
weights again with the tensor's scheme writes the file's codes); None with nested absmax (the grammar
has no 8-bit dynamic scale format) or when the rows are not whole blocks (blocks then run across rows,
which the grammar's groups do not).

NF4 table: bitsandbytes' own float32 constants (`get_4bit_type("nf4")`), which it keeps
hard-coded; they differ from a float32 rounding of the exact normal quantiles (precisionlab's
`nf4` codebook) in the last bit of nine entries, so the reader uses the toolkit's values (the
tests check them against bitsandbytes and against each file's stored quant_map).
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np

from precisionlab.interop.checkpoint import UNKNOWN, CheckpointTensor, PartRef
from precisionlab.interop.readers.common import round_to

BNB_NF4 = np.array([
    -1.0, -0.6961928009986877, -0.5250730514526367, -0.39491748809814453, -0.28444138169288635,
    -0.18477343022823334, -0.09105003625154495, 0.0, 0.07958029955625534, 0.16093020141124725,
    0.24611230194568634, 0.33791524171829224, 0.44070982933044434, 0.5626170039176941,
    0.7229568362236023, 1.0,
], dtype=np.float32)
"""bitsandbytes' NF4 values (functional.py, get_4bit_type), exactly as it stores them."""

STATE_SUFFIX = ".quant_state.bitsandbytes__"
DTYPE_NAMES = {"float32": "float32", "float16": "float16", "bfloat16": "bfloat16"}


def build_bnb(name: str, refs: dict[str, PartRef], state_role: str, notes: list[str]) -> CheckpointTensor:
    """A bitsandbytes 4-bit weight: refs by role ('weight', 'absmax', 'quant_map', 'nested_absmax',
    'nested_quant_map', and the JSON state under `state_role`)."""
    try:
        state = json.loads(bytes(np.asarray(refs[state_role].load(), dtype=np.uint8)).decode("utf-8"))
        if not isinstance(state, dict):
            raise ValueError("not a JSON object")
    except (ValueError, UnicodeDecodeError) as exc:
        return _unknown(name, refs, f"unreadable bitsandbytes quant_state ({exc})", notes)
    quant_type = state.get("quant_type")
    shape = state.get("shape")
    blocksize = state.get("blocksize")
    dtype = DTYPE_NAMES.get(str(state.get("dtype")))
    if quant_type != "nf4":
        return _unknown(name, refs, f"bitsandbytes {quant_type!r} weight: this reader decodes nf4", notes)
    if (not isinstance(shape, list) or not all(type(d) is int and d > 0 for d in shape)
            or type(blocksize) is not int or blocksize <= 0 or dtype is None):
        return _unknown(name, refs, f"bitsandbytes quant_state {state} lacks a shape, blocksize or dtype", notes)
    n = int(np.prod(shape))
    blocks = -(-n // blocksize)
    weight, absmax = refs["weight"], refs.get("absmax")
    nested = "nested_absmax" in refs
    problem = ""
    if weight.stored_dtype != "U8" or int(np.prod(weight.shape)) != -(-n // 2):
        problem = f"weight holds {int(np.prod(weight.shape))} {weight.stored_dtype}, {-(-n // 2)} uint8 expected"
    elif absmax is None or int(np.prod(absmax.shape)) != blocks or \
            absmax.stored_dtype != ("U8" if nested else "F32"):
        problem = f"absmax does not hold {blocks} {'uint8' if nested else 'float32'} values"
    elif nested and ("nested_quant_map" not in refs or not isinstance(state.get("nested_offset"), (int, float))
                     or type(state.get("nested_blocksize")) is not int):
        problem = "nested absmax without its nested_quant_map, nested_blocksize or nested_offset"
    if problem:
        return _unknown(name, refs, problem, notes)
    details: dict[str, Any] = {"quant_type": "nf4", "blocksize": blocksize, "dtype": dtype, "nested": nested}
    if nested:
        details.update(nested_blocksize=state["nested_blocksize"], nested_offset=float(state["nested_offset"]))
    if "quant_map" in refs:
        stored = np.asarray(refs["quant_map"].load(), dtype=np.float32).reshape(-1)
        if stored.shape != BNB_NF4.shape or not np.array_equal(stored.view(np.uint32), BNB_NF4.view(np.uint32)):
            notes.append(f"{name}: its stored quant_map differs from bitsandbytes' NF4 table; bitsandbytes decodes "
                         "with its own table, and so does this reader")
    # blocks run over the flattened weight: they are the grammar's groups (along rows) when rows are whole blocks
    rows_are_blocks = shape[-1] % blocksize == 0
    scheme = None if nested or not rows_are_blocks else f"nf4:g{blocksize}:bnb"
    return CheckpointTensor(name, "bnb:nf4", scheme, tuple(shape), weight.file, refs, decode_bnb, details)


def _unknown(name: str, refs: dict[str, PartRef], why: str, notes: list[str]) -> CheckpointTensor:
    notes.append(f"{name}: {why}")
    return CheckpointTensor(name, UNKNOWN, None, (0,), refs["weight"].file, refs, None, {}, why)


def bnb_codes(t: CheckpointTensor) -> np.ndarray:
    """The NF4 codes in element order (high nibble first), length n."""
    packed = np.asarray(t.refs["weight"].load(), dtype=np.uint8).reshape(-1)
    codes = np.stack([packed >> np.uint8(4), packed & np.uint8(0x0F)], axis=1).reshape(-1)
    return codes[: t.size]


def bnb_absmax(t: CheckpointTensor) -> np.ndarray:
    """The per-block absmax as bitsandbytes uses it (float32), de-nested when nested."""
    d = t.details
    raw = np.asarray(t.refs["absmax"].load()).reshape(-1)
    if not d["nested"]:
        return np.asarray(raw, dtype=np.float32)
    code = np.asarray(t.refs["nested_quant_map"].load(), dtype=np.float32).reshape(-1)
    nested_absmax = np.asarray(t.refs["nested_absmax"].load(), dtype=np.float32).reshape(-1)
    block = np.arange(raw.size) // d["nested_blocksize"]
    return (code[raw.astype(np.int64)] * nested_absmax[block]) + np.float32(d["nested_offset"])


def decode_bnb(t: CheckpointTensor) -> np.ndarray:
    codes = bnb_codes(t)
    absmax = bnb_absmax(t)
    block = np.arange(t.size) // t.details["blocksize"]
    values = BNB_NF4[codes] * absmax[block]
    return np.ascontiguousarray(round_to(values, t.details["dtype"]).reshape(t.shape))
