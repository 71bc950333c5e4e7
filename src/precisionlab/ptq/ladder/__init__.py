"""The escalation ladder: try the cheapest quantization first, climb one remedy at a time, stop at the
first step whose task-level verdict is PASS, with a stated chance of a wrong stop.

    plan = plan_steps(ladder_steps("int4"), evaluator.planned_bytes)
    result = run_ladder(plan.steps, evaluator, examples=40, grow=True, max_examples=160, skipped=plan.skipped)
    result.stopped_at          # the step name, or None
    result.findings()          # ladder.stopped_at, ladder.claim, ladder.steps.<i>.name / .scheme / .bytes / ...

Modules, one job each: `steps` (the rungs and the byte plan that keeps "cheapest first" true on the
model at hand), `rule` (what `stopped_at` claims and the per-test confidence that makes it true),
`climb` (the control flow and its records, pure, testable with a stub evaluator), `evaluator` (the real
evaluator on a loaded model, the outlier-column rule), `log` (finished steps saved and resumed).
"""

from precisionlab.ptq.ladder.climb import (
    FAIL,
    INCONCLUSIVE,
    NOT_EVIDENCE,
    PASS,
    QAT,
    Evaluate,
    GrowLimit,
    LadderResult,
    StepOutcome,
    StepRecord,
    check_ladder_options,
    combine,
    run_ladder,
)
from precisionlab.ptq.ladder.evaluator import ModelEvaluator, check_blocks, outlier_columns, quantize_with_outliers
from precisionlab.ptq.ladder.log import STEPS_NAME, StepLog
from precisionlab.ptq.ladder.rule import ALPHA, RULE, ErrorBudget, planned_looks
from precisionlab.ptq.ladder.steps import (
    CALIBRATED,
    CALIBRATED_OPTIONS,
    OUTLIER_FRACTION,
    Plan,
    Skipped,
    Step,
    ladder_steps,
    plan_steps,
)

__all__ = [
    "ALPHA",
    "CALIBRATED",
    "CALIBRATED_OPTIONS",
    "FAIL",
    "INCONCLUSIVE",
    "NOT_EVIDENCE",
    "OUTLIER_FRACTION",
    "PASS",
    "QAT",
    "RULE",
    "STEPS_NAME",
    "ErrorBudget",
    "Evaluate",
    "GrowLimit",
    "LadderResult",
    "ModelEvaluator",
    "Plan",
    "Skipped",
    "Step",
    "StepLog",
    "StepOutcome",
    "StepRecord",
    "check_blocks",
    "check_ladder_options",
    "combine",
    "ladder_steps",
    "outlier_columns",
    "plan_steps",
    "planned_looks",
    "quantize_with_outliers",
    "run_ladder",
]
