"""Speed beside every step of the ladder: each tried step's weights on the real kernel of its scheme, all
steps and the float reference measured in one interleaved run (eval.speed.measure_speed).

    run = ladder_speed(evaluator, result, threads=1)
    step_ratios(run)        # step name -> median decode tokens/s ratio against the reference (NaN: no kernel)

What each step runs: an RTN step, its scheme's codes for exactly the layers the step quantized (the
evaluator's selection: --blocks, keep-sensitive); a GPTQ / AWQ step, the codes its PTQ method stored; the
outlier step has none (its fp16 columns run beside the integer product, which no kernel here does), nor does
a calibrated step taken from the resume log (its codes were made by the earlier run); the QAT rung (a step method
given to the evaluator from outside ptq), the codes it trained. A step whose scheme has
no exact kernel says so, as `eval --speed` does.
"""

from __future__ import annotations

import math
import statistics
from typing import Any

from precisionlab.eval import speed
from precisionlab.ptq.ladder.steps import CALIBRATED


def step_candidate(evaluator: Any, step: Any) -> speed.SpeedCandidate:
    """The speed view of one tried step (see the module docstring)."""
    from precisionlab.models import kernels

    label = step.name
    if step.method in CALIBRATED:
        stored = evaluator.step_results.get(step.name)
        if stored is None:
            return speed.SpeedCandidate(label, step.scheme, "resumed from the log: its codes were made by the "
                                                            "earlier run")
        from precisionlab.ptq.speed import ptq_speed_candidate

        return ptq_speed_candidate(stored, label)
    if step.method in getattr(evaluator, "methods", {}):  # a rung implemented outside ptq (the QAT rung): codes
        trained = evaluator.step_results.get(step.name)
        if trained is None:
            return speed.SpeedCandidate(label, step.scheme, "resumed from the log: its codes were made by the "
                                                            "earlier run")
        from precisionlab.ptq.records import PTQResult
        from precisionlab.ptq.speed import ptq_speed_candidate

        weights = PTQResult("rtn", trained.scheme, [], quantized=dict(trained.quantized), folds=list(trained.folds))
        return ptq_speed_candidate(weights, label)  # weights only, installed as any stored codes are
    if step.method != "rtn":
        return speed.SpeedCandidate(label, step.scheme, "its fp16 outlier columns run beside the integer product, "
                                                        "which no kernel here does")
    if kernels.kernel_plan(step.scheme).kernel is None:
        return speed.SpeedCandidate(label, step.scheme)  # measure_speed says why, and names a twin if one runs
    from precisionlab.models.weights import linear_layers, quantize_weights
    from precisionlab.quant import quantize

    include, exclude = evaluator.selection(step)
    selected = linear_layers(evaluator.loaded.model, include, exclude)
    quantized = {name: quantize(module.weight.detach().float().numpy(), step.scheme)
                 for name, module in selected.items()}
    return speed.SpeedCandidate(label, step.scheme, quantized=quantized,
                                prepare=lambda model: quantize_weights(model, step.scheme, include, exclude))


def ladder_speed(evaluator: Any, result: Any, threads: int | None = None, progress: Any = None,
                 **settings: int) -> speed.SpeedRun:
    """Decode and prefill tokens/s of every tried step against the reference, in one run."""
    candidates = [step_candidate(evaluator, record.step) for record in result.steps]
    return speed.measure_speed(evaluator.loaded, candidates, (), None, threads=threads or speed.THREADS,
                               progress=progress, **{**speed.defaults(), **settings})


def step_ratios(run: speed.SpeedRun) -> dict[str, float]:
    """Step name -> median decode ratio (candidate / reference tokens/s, paired by repetition); NaN where the
    step runs on no kernel."""
    out: dict[str, float] = {}
    for row in run.rows:
        out[row.label] = statistics.median(run.ratios(row, "decode")) if row.kernel is not None and row.decode \
            else math.nan
    return out
