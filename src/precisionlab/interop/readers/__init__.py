"""One module per toolkit layout; `DECODERS` maps a tensor's decoder name to its dequantizer.

    gguf_file, gguf_blocks   GGUF (llama.cpp): F32/F16/BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q6_K
    packed_int               GPTQ (v1 / v2), AWQ GEMM, compressed-tensors pack-quantized
    nvfp4                    compressed-tensors nvfp4-pack-quantized
    fp8                      FP8 OCP / FNUZ weights with per-tensor, per-channel or block scales
    bnb                      bitsandbytes NF4 (nested absmax included)
    floats                   plain float tensors
    safetensors_files        safetensors files, shards, index JSON, configs
    layouts                  which layout a safetensors entry belongs to
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from precisionlab.interop.checkpoint import CheckpointTensor
from precisionlab.interop.readers import bnb, floats, fp8, gguf_file, nvfp4, packed_int

DECODERS: dict[str, Callable[[CheckpointTensor], np.ndarray]] = {
    "gguf": gguf_file.decode,
    "float": floats.decode_float,
    "fp8": fp8.decode_fp8,
    "gptq": packed_int.decode_gptq,
    "awq": packed_int.decode_awq,
    "pack_quantized": packed_int.decode_pack_quantized,
    "nvfp4": nvfp4.decode_nvfp4,
    "bnb": bnb.decode_bnb,
}
