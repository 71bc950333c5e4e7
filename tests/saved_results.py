"""Saved results without a model: a ladder and a ptq result built by labs.ptq from fabricated runs
(the verdicts, errors and bytes chosen here), for the round-trip and `run --include` tests."""

from __future__ import annotations

import math
from typing import Any

from precisionlab.labs.ladder import ladder_lab
from precisionlab.labs.ptq import ptq_lab
from precisionlab.ptq.ladder import LadderResult, Step, StepOutcome, ladder_steps, plan_steps, run_ladder
from precisionlab.ptq.run import LayerRecord, PTQResult
from precisionlab.results import LabResult


def outcome(verdict: str, difference: float, bytes_: int, tasks: tuple[str, ...] = ("ppl",),
            aligned: bool = False) -> StepOutcome:
    low, high = difference - 0.4, difference + 0.4
    bits = 4.5 if bytes_ > 62_000_000 else math.nan  # the first two steps without it: a nan cell
    return StepOutcome(verdict=verdict, difference=difference, ci_low=low, ci_high=high, bytes=bytes_, examples=16,
                       examples_needed=64 if verdict == "inconclusive" else None, grid_aligned=aligned,
                       alignment="aligned" if aligned else "no", bits_per_weight=bits,
                       tasks={t: {"difference": difference, "ci_low": low, "ci_high": high, "verdict": verdict,
                                  "unit": "%"} for t in tasks})


def fabricated_climb(spread: float = 1.0, tasks: tuple[str, ...] = ("ppl",)) -> LadderResult:
    """A climb past a failing, a grid-aligned and an inconclusive step to a pass at g64 (no model)."""
    plan = {"per-tensor": ("fail", 40.0 * spread, 60_000_000, False), "per-channel": ("pass", 0.1, 61_000_000, True),
            "g128": ("inconclusive", 0.9, 65_000_000, False), "g64": ("pass", 0.2, 68_000_000, False)}

    def evaluate(step: Step, examples: int, confidence: float) -> StepOutcome:
        verdict, difference, size, aligned = plan.get(step.name, ("fail", 9.0, 90_000_000, False))
        return outcome(verdict, difference, size, tasks, aligned)

    return run_ladder(ladder_steps("int4"), evaluate, examples=16, max_drop=1.0, target="int4")


SMOLLM2_CLIMB = {"per-tensor": (1.15e8, 67_380_000), "per-channel": (260.0, 67_790_000), "g128": (0.0, 75_670_000),
                 "g64": (99.3, 71_580_000), "outliers-fp16": (49.1, 73_800_000),
                 "keep-sensitive": (15.7, 196_410_000), "gptq-g64": (30.9, 194_340_000),
                 "awq-g64": (16.4, 194_340_000), "int8": (-0.0304, 241_080_000)}
"""Per rung: (ppl difference %, model bytes) of the ladder recorded on SmolLM2-135M at int4
(docs/benchmarks/ladder-smollm2-int4-2026-12-02.txt): every rung fails until int8, g128 is skipped."""


def smollm2_like_climb() -> LadderResult:
    """The whole int4 ladder as it ran on SmolLM2 (SMOLLM2_CLIMB), no model: the widest steps table a real
    climb writes (a skipped rung's verdict, every rung tried), for the report's layout tests."""
    plan = plan_steps(ladder_steps("int4"), lambda step: SMOLLM2_CLIMB[step.name][1])

    def evaluate(step: Step, examples: int, confidence: float) -> StepOutcome:
        difference, size = SMOLLM2_CLIMB[step.name]
        verdict = "pass" if step.name == "int8" else "fail"
        return outcome(verdict, difference, size)

    return run_ladder(plan.steps, evaluate, examples=40, max_drop=1.0, target="int4", skipped=plan.skipped)


LADDER_MODEL = {"name": "tiny", "grid_note": "a Q4_1 source", "bytes": 270_000_000}


def fabricated_ladder(spread: float = 1.0, tasks: tuple[str, ...] = ("ppl",)) -> LabResult:
    return ladder_lab(fabricated_climb(spread, tasks), {"model": "tiny", "target": "int4", "max_drop": 1.0},
                      LADDER_MODEL)


def fabricated_ptq(held_out: bool = False) -> LabResult:
    """GPTQ on three layers: one better than RTN, one against an RTN error of 0 (ratio inf), one failed."""
    layers = [LayerRecord(name="model.layers.0.mlp.up_proj", shape=(64, 32), output_error=0.012,
                          rtn_output_error=0.02, eval_output_error=0.013, rtn_eval_output_error=0.021, seconds=0.25,
                          peak_mb=3.5, tokens=512, details={"damping": 0.01, "damping_tries": 1, "dead_columns": 2}),
              LayerRecord(name="model.layers.0.mlp.down_proj", shape=(32, 64), output_error=0.5, rtn_output_error=0.0,
                          seconds=0.1, peak_mb=2.0, tokens=512),
              LayerRecord(name="model.layers.1.self_attn.q_proj", shape=(32, 32), status="failed",
                          note="Cholesky failed at damping 1.0")]
    result = PTQResult(method="gptq", scheme="int4:g128", layers=layers, calibration_tokens=512,
                       evaluation_tokens=256 if held_out else 0, seconds=1.5, peak_mb=12.0)
    return ptq_lab(result, {"model": "tiny", "method": "gptq", "scheme": "int4:g128"},
                   warnings=["only 512 calibration tokens for a width of 64"], eval_note="evaluation skipped")


class StubEvaluator:
    """What the ladder command reads from its evaluator after a climb: each step's layer patterns (none here)
    and the calibrated steps' results (none)."""

    def __init__(self) -> None:
        self.step_results: dict[str, Any] = {}

    def selection(self, step: Any) -> tuple[list[str], list[str]]:
        return [], []
