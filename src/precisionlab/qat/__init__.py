"""Quantization-aware training: a model's linear weights fine-tuned through their scheme's exact fake
quantization (straight-through gradient), distilled from the float model on calibration text.

    from precisionlab.qat import TrainConfig, run_qat, qat_candidate
    result = run_qat(model, "int4:g64", calibration_batches, TrainConfig(steps=100), blocks=[1])
    result.quantized           the trained codes (QuantizedTensor per layer), what export ships
    result.findings()          qat.* keys (docs/qat.md)

Modules, one job each: `fakequant` (the exact integer grid of a stored weight, its torch fake quantization with
the straight-through gradient, the codes packed back), `loss` (distillation KL, next-token loss), `train` (the
deterministic, checkpointed, resumable loop), `memory` (bytes per trained parameter), `run` (run_qat, the
starting points, the evaluation candidates).

Importing this package imports numpy only; torch is imported inside the functions that need it.
"""

from precisionlab.qat.fakequant import LayerGrid, check_scheme, fake_quantize
from precisionlab.qat.loss import distillation_kl, next_token_loss
from precisionlab.qat.memory import TrainingMemory
from precisionlab.qat.run import QATResult, Start, qat_candidate, rtn_candidate, run_qat, start_candidate
from precisionlab.qat.train import History, Interrupted, TrainConfig, batch_index

__all__ = ["History", "Interrupted", "LayerGrid", "QATResult", "Start", "TrainConfig", "TrainingMemory",
           "batch_index", "check_scheme", "distillation_kl", "fake_quantize", "next_token_loss", "qat_candidate",
           "rtn_candidate", "run_qat", "start_candidate"]
