"""Speed of a PTQ method's result: its stored codes on the real kernel of its scheme, against the float model
(eval.speed measures; this module only turns a PTQResult into what it measures)."""

from __future__ import annotations

from typing import Any

from precisionlab.eval import speed
from precisionlab.ptq.install import ptq_candidate
from precisionlab.ptq.support import WEIGHT_ONLY


def ptq_speed_candidate(result: Any, label: str | None = None) -> speed.SpeedCandidate:
    """The speed view of a PTQ method's result: its stored codes run on the kernel of its scheme (weight-only
    methods: rtn, gptq, awq; the others quantize activations or the KV cache at run time)."""
    name = label or f"{result.method}:{result.scheme}"
    if result.method not in WEIGHT_ONLY:
        return speed.SpeedCandidate(name, result.scheme, f"{result.method} quantizes activations or the KV cache at "
                                                         "run time, which no kernel here does")
    candidate = ptq_candidate(result, name)
    return speed.SpeedCandidate(name, result.scheme, quantized=result.quantized,
                          prepare=lambda model: candidate.prepare(model, (), None))


def ptq_speed_run(loaded: Any, ptq_result: Any, threads: int | None = None, progress: Any = None,
                  **settings: int) -> speed.SpeedRun:
    """The `ptq --speed` measurement: the method's stored codes on their kernel, against the float model."""
    return speed.measure_speed(loaded, [ptq_speed_candidate(ptq_result)], (), None, threads=threads or speed.THREADS,
                         progress=progress, **{**speed.defaults(), **settings})
