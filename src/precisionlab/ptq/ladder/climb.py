"""The ladder's control flow: evaluate the planned steps in order, stop at the first PASS.

    result = run_ladder(plan.steps, evaluate, examples=40, grow=True, max_examples=160, skipped=plan.skipped)
    result.stopped_at          # the step name, or None
    result.findings()          # ladder.stopped_at, ladder.steps.<i>.name / .scheme / .bytes / .difference / ...

Stop rule. A step passes when every task's verdict is "pass": the whole interval on the good side of
--max-drop (declared before the run), the interval's confidence set by the error budget so that the
ladder's stop keeps its claim across every step and look (`rule`). "inconclusive" is not a pass: the
step records how many examples would decide it and, with `grow`, is evaluated again with twice the
examples (up to `max_examples`) before the ladder moves on. A grid-aligned step (the scheme reproduced
every quantized source weight bit for bit, as int4 groups of 32 with a minimum do on a Q4_1 GGUF)
proves nothing about the scheme: it is reported, marked, and never stopped at. When no step passes,
the remaining option is quantization-aware training (`ladder --qat-steps N` tries it as a step).

`run_ladder` is pure control flow over `evaluate(step, examples, confidence) -> StepOutcome`, so a stub
evaluator tests it; `evaluator.ModelEvaluator` is the real one. Steps finished in an earlier run
(`done`, read back from a `log.StepLog`) are taken as they are instead of being evaluated again.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from precisionlab.ptq.ladder.rule import ALPHA, RULE, ErrorBudget, check_alpha, planned_looks
from precisionlab.ptq.ladder.steps import Skipped, Step

PASS, FAIL, INCONCLUSIVE = "pass", "fail", "inconclusive"
NOT_EVIDENCE = "grid-aligned"
"""The verdict shown for a step whose scheme reproduced the source weights: not evidence."""
QAT = "quantization-aware training (ladder --qat-steps N, or precisionlab qat)"
QAT_TRIED = "a longer quantization-aware training run (more --qat-steps, precisionlab qat), or a wider format"
"""What is left when a QAT step was tried and did not pass either."""


class GrowLimit(ValueError):
    """The evaluation data holds no more examples: the ladder stops growing the step."""


@dataclass
class StepOutcome:
    """What evaluating one step once gives (a stub evaluator builds these directly)."""

    verdict: str
    difference: float
    ci_low: float
    ci_high: float
    bytes: int
    examples: int
    examples_needed: int | None = None
    grid_aligned: bool = False
    alignment: str = "no"
    tasks: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Per task: difference, ci_low, ci_high, verdict, n, examples_needed, unit."""
    bits_per_weight: float = math.nan
    notes: list[str] = field(default_factory=list)
    seconds: float = 0.0
    confidence: float = 0.95
    """The two-sided confidence of the intervals (the error budget's per-test confidence)."""


@dataclass
class StepRecord:
    """A step as the ladder reports it: the last evaluation and every attempt (grown evaluations)."""

    index: int
    step: Step
    attempts: list[StepOutcome]
    seconds: float
    resumed: bool = False
    """Read back from an earlier run's log, not evaluated in this one."""

    @property
    def outcome(self) -> StepOutcome:
        return self.attempts[-1]

    @property
    def verdict(self) -> str:
        """pass / fail / inconclusive, or grid-aligned when the step cannot count as evidence."""
        return NOT_EVIDENCE if self.outcome.grid_aligned else self.outcome.verdict

    @property
    def passed(self) -> bool:
        return self.verdict == PASS


@dataclass
class LadderResult:
    steps: list[StepRecord]
    stopped_at: str | None
    max_drop: float
    target: str
    grow: bool
    max_examples: int | None
    notes: list[str] = field(default_factory=list)
    seconds: float = 0.0
    budget: ErrorBudget = field(default_factory=lambda: ErrorBudget(ALPHA, 1, 1))
    skipped: list[Skipped] = field(default_factory=list)

    @property
    def remaining(self) -> str | None:
        """What is left when nothing passed."""
        if self.stopped_at:
            return None
        return QAT_TRIED if any(r.step.method == "qat" for r in self.steps) else QAT

    @property
    def resumed(self) -> int:
        return sum(r.resumed for r in self.steps)

    def findings(self) -> dict[str, Any]:
        """ladder.stopped_at (step name or "none"), ladder.steps.<i>.name / .scheme / .bytes / .difference /
        .ci_low / .ci_high / .verdict (plus .examples, .examples_needed, .grid_aligned, .seconds, .method,
        .confidence and per task ladder.steps.<i>.<task>.difference / .ci_low / .ci_high / .verdict); the error
        budget (ladder.alpha, .rule, .tests_planned, .looks_per_step, .test_confidence, .claim) and the skipped
        rungs (ladder.steps_skipped, ladder.skipped.<k>.name / .scheme / .bytes / .instead / .instead_bytes)."""
        b = self.budget
        out: dict[str, Any] = {"ladder.stopped_at": self.stopped_at or "none", "ladder.target": self.target,
                               "ladder.max_drop": self.max_drop, "ladder.steps_tried": len(self.steps),
                               "ladder.seconds": self.seconds, "ladder.alpha": b.alpha, "ladder.rule": RULE,
                               "ladder.tests_planned": b.tests, "ladder.looks_per_step": b.looks,
                               "ladder.test_confidence": b.confidence, "ladder.claim": b.claim(),
                               "ladder.steps_skipped": len(self.skipped), "ladder.steps_resumed": self.resumed}
        if not self.stopped_at:
            out["ladder.remaining_option"] = self.remaining
        for r in self.steps:
            o, base = r.outcome, f"ladder.steps.{r.index}"
            out.update({f"{base}.name": r.step.name, f"{base}.scheme": r.step.scheme, f"{base}.method": r.step.method,
                        f"{base}.keep_sensitive": r.step.keep_sensitive, f"{base}.bytes": o.bytes,
                        f"{base}.bits_per_weight": o.bits_per_weight, f"{base}.difference": o.difference,
                        f"{base}.ci_low": o.ci_low, f"{base}.ci_high": o.ci_high, f"{base}.verdict": r.verdict,
                        f"{base}.task_verdict": o.verdict, f"{base}.examples": o.examples,
                        f"{base}.examples_needed": o.examples_needed, f"{base}.grid_aligned": o.grid_aligned,
                        f"{base}.alignment": o.alignment, f"{base}.attempts": len(r.attempts),
                        f"{base}.seconds": r.seconds, f"{base}.confidence": o.confidence})
            for task, values in o.tasks.items():
                for key in ("difference", "ci_low", "ci_high", "verdict"):
                    out[f"{base}.{task}.{key}"] = values.get(key)
        for k, s in enumerate(self.skipped):
            base = f"ladder.skipped.{k}"
            out.update({f"{base}.name": s.step.name, f"{base}.scheme": s.step.scheme, f"{base}.bytes": s.bytes,
                        f"{base}.instead": s.instead.name, f"{base}.instead_bytes": s.instead_bytes})
        return out


Evaluate = Callable[[Step, int, float], StepOutcome]
Report = Callable[[StepRecord], None]


def check_ladder_options(examples: int, grow: bool, max_examples: int | None, max_drop: float,
                         alpha: float = ALPHA) -> None:
    if not isinstance(examples, int) or examples < 2:
        raise ValueError(f"the ladder needs at least 2 evaluation examples, got {examples!r}")
    if max_examples is not None and max_examples < examples:
        raise ValueError(f"--max-examples ({max_examples}) is below the starting number of examples ({examples})")
    if not math.isfinite(float(max_drop)) or float(max_drop) < 0:
        raise ValueError(f"--max-drop must be a finite number >= 0, got {max_drop!r}")
    check_alpha(alpha)


def same_step(a: Step, b: Step) -> bool:
    """The same rung (what is quantized and how; the description may differ)."""
    return (a.name, a.scheme, a.method, a.keep_sensitive) == (b.name, b.scheme, b.method, b.keep_sensitive)


def run_ladder(steps: Sequence[Step], evaluate: Evaluate, *, examples: int, max_drop: float = 1.0,
               target: str = "", grow: bool = False, max_examples: int | None = None,
               report: Report | None = None, alpha: float = ALPHA, skipped: Sequence[Skipped] = (),
               done: Sequence[StepRecord] = ()) -> LadderResult:
    """Evaluate the steps in order and stop at the first PASS (see the module docstring).

    Every evaluation is asked for the error budget's confidence (alpha split over len(steps) x the planned
    looks). With `grow`, an inconclusive step is evaluated again with twice the examples while that stays
    within `max_examples` (default 4 x examples); `evaluate` may raise GrowLimit when the data holds no more.
    `done`: records of an earlier run of the same plan, taken in order while they match the steps; `report`
    is called with each step evaluated in this run."""
    check_ladder_options(examples, grow, max_examples, max_drop, alpha)
    if not steps:
        raise ValueError("the ladder needs at least one step")
    cap = max_examples if max_examples is not None else 4 * examples
    budget = ErrorBudget(float(alpha), len(steps), planned_looks(examples, grow, cap))
    start = time.perf_counter()
    records: list[StepRecord] = []
    notes: list[str] = []
    stopped: str | None = None
    replaying = True
    for index, step in enumerate(steps):
        replaying = replaying and index < len(done) and same_step(done[index].step, step)
        if replaying:
            record = done[index]
            record.index, record.resumed = index, True
        else:
            record = _climb_step(index, step, evaluate, examples, grow, cap, budget.confidence, notes)
            if report is not None:
                report(record)
        records.append(record)
        if record.passed:
            stopped = step.name
            break
    resumed = sum(r.resumed for r in records)
    if resumed:
        notes.append(f"{resumed} step(s) taken from the earlier run's log, not evaluated again")
    if stopped is None:
        left = QAT_TRIED if any(r.step.method == "qat" for r in records) else QAT
        notes.append(f"no step passed at --max-drop {max_drop:g}: the remaining option is {left}")
    return LadderResult(records, stopped, float(max_drop), target, grow, cap if grow else max_examples, notes,
                        time.perf_counter() - start, budget, list(skipped))


def _climb_step(index: int, step: Step, evaluate: Evaluate, examples: int, grow: bool, cap: int,
                confidence: float, notes: list[str]) -> StepRecord:
    began = time.perf_counter()
    n = examples
    attempts = [evaluate(step, n, confidence)]
    while grow and attempts[-1].verdict == INCONCLUSIVE and not attempts[-1].grid_aligned and 2 * n <= cap:
        n *= 2
        try:
            attempts.append(evaluate(step, n, confidence))
        except GrowLimit as exc:
            notes.append(f"{step.name}: not grown beyond {attempts[-1].examples} examples ({exc})")
            break
    return StepRecord(index, step, attempts, time.perf_counter() - began)


def combine(tasks: dict[str, dict[str, Any]]) -> str:
    """A step's verdict over its tasks: fail if any fails, pass if all pass, else inconclusive."""
    verdicts = [t["verdict"] for t in tasks.values()]
    if any(v == FAIL for v in verdicts):
        return FAIL
    return PASS if verdicts and all(v == PASS for v in verdicts) else INCONCLUSIVE
