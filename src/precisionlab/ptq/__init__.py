"""Post-training quantization methods (RTN, GPTQ, AWQ, SmoothQuant, LLM.int8(), KIVI), measured
layer by layer against round-to-nearest, over the quant library's schemes.

    from precisionlab.ptq import run_method, token_batches
    batches = token_batches(tokenizer, calibration_documents, n_tokens=2048)
    result = run_method(model, "gptq", "int4:g128", batches, blocks=[0, 1])
    result.findings()          # ptq.gptq.layers_improved, ptq.gptq.output_error_ratio, ...
    result.apply(model)        # the quantized weights, written into the model

Modules, one job each: `activations` (running input statistics, layer-output error),
`calibration` (token batches, forward-hook capture), `structure` (blocks, linear layers, scale
groups and folding), `grid` (a scheme's grid column by column), `gptq`, `awq`, `smoothquant`,
`llm_int8`, `kivi`, `measure` (time and peak memory), `run` (one method over a model), `install`
(a method's weights installed reversibly as an evaluation candidate, with honest bytes), `ladder`
(the escalation ladder: steps, stop rule, the real evaluator).

Importing this package imports numpy only; torch (and transformers, for KIVI's cache) are
imported inside the functions that need them.
"""

from precisionlab.ptq.activations import InputStatistics, output_error, relative_error
from precisionlab.ptq.calibration import CalibrationWarning, Capture, capture, token_batches
from precisionlab.ptq.gptq import GPTQResult, gptq_quantize
from precisionlab.ptq.grid import ColumnGrid
from precisionlab.ptq.kivi import KIVIConfig, kivi_kl, kivi_quantize, make_kivi_cache
from precisionlab.ptq.llm_int8 import llm_int8_matmul
from precisionlab.ptq.run import METHODS, OPTIONS, LayerRecord, PTQResult, run_method
from precisionlab.ptq.smoothquant import smoothing_scales, w8a8_output

__all__ = [
    "METHODS",
    "OPTIONS",
    "CalibrationWarning",
    "Capture",
    "ColumnGrid",
    "GPTQResult",
    "InputStatistics",
    "KIVIConfig",
    "LayerRecord",
    "PTQResult",
    "capture",
    "gptq_quantize",
    "kivi_kl",
    "kivi_quantize",
    "llm_int8_matmul",
    "make_kivi_cache",
    "output_error",
    "relative_error",
    "run_method",
    "smoothing_scales",
    "token_batches",
    "w8a8_output",
]
