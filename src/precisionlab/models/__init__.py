"""Real models: load (Hugging Face directory, GGUF file, packaged name), fake-quantize linear
weights with a quant scheme, and hooks for activation and KV-cache quantization.

    from precisionlab.models import load_model, quantized_weights
    loaded = load_model("smollm2-135m")               # packaged GGUF; "minilm-l6"; a directory; org/name
    with quantized_weights(loaded.model, "int4:g128") as report:
        ...                                           # report.model_bytes, .bits_per_weight, .layers

torch and transformers are imported lazily, inside the functions that need them: importing
this package imports neither.
"""

from precisionlab.models.hooks import SchemeKV, activation_quantization, cache_kwargs, fake_quantize, quantized_cache
from precisionlab.models.loading import LoadedModel, cache_root, load_model, resolve, unique_parameters
from precisionlab.models.packaged import PACKAGED, installed_packaged, packaged_path
from precisionlab.models.weights import (
    DEFAULT_EXCLUDE,
    LayerRecord,
    QuantizationReport,
    linear_layers,
    quantize_weights,
    quantized_weights,
)
from precisionlab.peers import MissingPeer

__all__ = [
    "DEFAULT_EXCLUDE",
    "PACKAGED",
    "LayerRecord",
    "LoadedModel",
    "MissingPeer",
    "QuantizationReport",
    "SchemeKV",
    "activation_quantization",
    "cache_kwargs",
    "cache_root",
    "fake_quantize",
    "installed_packaged",
    "linear_layers",
    "load_model",
    "packaged_path",
    "quantize_weights",
    "quantized_cache",
    "quantized_weights",
    "resolve",
    "unique_parameters",
]
