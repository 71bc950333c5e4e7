"""Quantization: scheme strings, scales, packed codes, honest bytes, golden references.

    from precisionlab.quant import quantize
    q = quantize(w, "int4:g128")        # or "int8:row:asym", "mxfp4:rceil", "nvfp4", "dsv3_weight",
                                        # "uint4:g32:min=fp16" (a float block offset), "gguf_q4_k"
    w_hat = q.dequantize()
    q.nbytes, q.bits_per_element, q.codes, q.scales, q.scheme
    bits_per_element("int4:g128:asym", (4096, 4096))   # the same byte model, without data

Modules, one job each: `scheme` (grammar, presets), `blocks` (granularity -> block
shape), `qparams` (choose scales / zero points), `elements` (codes of scaled values),
`packing` (bit packing), `core` (quantize / dequantize), `ggml` (llama.cpp's reference quantizers
for the gguf_* presets), `ggml_types` (which GGML tensor type holds a scheme exactly), `tensor`
(QuantizedTensor and byte accounting), `safetensors_io` (tagged files), `scalers` (FP8 current /
delayed scaling), `metrics` (error measures).
"""

from precisionlab.quant.core import quantize, quantize_dequantize
from precisionlab.quant.dequant import dequantize
from precisionlab.quant.diagnostics import QuantizationWarning, ScaleDiagnostics
from precisionlab.quant.metrics import ErrorMetrics, error_metrics
from precisionlab.quant.scalers import CurrentScaler, DelayedScaler
from precisionlab.quant.scheme import PRESETS, Granularity, MXRule, Scheme, parse_scheme
from precisionlab.quant.tensor import QuantizedTensor, bits_per_element, stored_bytes

__all__ = [
    "PRESETS",
    "CurrentScaler",
    "DelayedScaler",
    "ErrorMetrics",
    "Granularity",
    "MXRule",
    "QuantizationWarning",
    "QuantizedTensor",
    "ScaleDiagnostics",
    "Scheme",
    "bits_per_element",
    "dequantize",
    "error_metrics",
    "parse_scheme",
    "quantize",
    "quantize_dequantize",
    "stored_bytes",
]
