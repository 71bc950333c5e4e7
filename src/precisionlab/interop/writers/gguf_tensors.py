"""A quantized layer as the bytes of its GGML tensor type (the type from quant.ggml_types, the blocks from the
GGUF block layouts the readers decode: interop.readers.gguf_blocks)."""

from __future__ import annotations

import numpy as np

from precisionlab.quant.ggml_types import as_preset, ggml_type
from precisionlab.quant.tensor import QuantizedTensor


def quantized_rows(q: QuantizedTensor) -> tuple[str, np.ndarray]:
    """(GGML type, its block bytes as a (rows, bytes per row) uint8 array) of a 2-D QuantizedTensor."""
    from precisionlab.interop.readers.gguf_blocks import tensor_bytes

    if len(q.shape) != 2:
        raise ValueError(f"GGUF export writes 2-D quantized weights; got shape {q.shape}")
    kind = ggml_type(q.scheme, 2)
    flat = tensor_bytes(as_preset(q))
    return kind, flat.reshape(q.shape[0], -1)
