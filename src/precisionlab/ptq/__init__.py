"""Post-training quantization methods (RTN, GPTQ, AWQ, SmoothQuant, LLM.int8(), KIVI), measured
layer by layer against round-to-nearest, over the quant library's schemes.

    from precisionlab.ptq import run_method, token_batches
    batches = token_batches(tokenizer, calibration_documents, n_tokens=2048)
    result = run_method(model, "gptq", "int4:g128", batches, blocks=[0, 1])
    result.findings()          # ptq.gptq.layers_improved, ptq.gptq.output_error_ratio, ...
    apply_result(model, result)   # the quantized weights, written into the model

Modules, one job each: `activations` (running input statistics, layer-output and relative errors),
`calibration` (token batches, forward-hook capture), `structure` (blocks, linear layers, scale
groups, folding and the fold check), `architectures` (per model type: the scale groups and the norms'
fold rule), `grid` (a scheme's grid column by column), `gptq`, `awq`, `smoothquant`,
`llm_int8`, `kivi` (each method's numerics on arrays), `support` (what each method applies to: its
options and schemes), `records` (LayerRecord, PTQResult), `runners` (one method over a model's layers,
one module per method), `run` (run_method: checks, then the method's runner), `measure` (time and peak
memory), `install` (a method's weights written into a model, or installed reversibly as an evaluation
candidate with honest bytes), `ladder` (the escalation ladder: steps, stop rule, the real evaluator).

Importing this package imports numpy only; torch (and transformers, for KIVI's cache) are
imported inside the functions that need them.
"""

from precisionlab.ptq.activations import InputStatistics, output_error, relative_error
from precisionlab.ptq.calibration import CalibrationWarning, Capture, capture, token_batches
from precisionlab.ptq.gptq import GPTQResult, gptq_quantize
from precisionlab.ptq.grid import ColumnGrid
from precisionlab.ptq.install import apply_result
from precisionlab.ptq.kivi import KIVIConfig, kivi_kl, kivi_quantize, make_kivi_cache
from precisionlab.ptq.llm_int8 import llm_int8_matmul
from precisionlab.ptq.records import LayerRecord, PTQResult
from precisionlab.ptq.run import run_method
from precisionlab.ptq.smoothquant import smoothing_scales, w8a8_output
from precisionlab.ptq.support import METHODS, OPTIONS, check_method

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
    "apply_result",
    "capture",
    "check_method",
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
