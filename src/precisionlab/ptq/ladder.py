"""The escalation ladder: try the cheapest quantization first, climb one remedy at a time, stop at the
first step whose task-level verdict is PASS.

    steps = ladder_steps("int4")
    result = run_ladder(steps, evaluate, examples=40, grow=True, max_examples=160)
    result.stopped_at          # the step name, or None
    result.findings()          # ladder.stopped_at, ladder.steps.<i>.name / .scheme / .bytes / .difference / ...

Steps at a target width (int4 shown; int2 / int8 and fp4 / fp8 alike), each keeping the remedies
before it unless it replaces one:

    1 per-tensor       int4                one scale per weight matrix; every weight layer quantized,
                                           embeddings and lm_head included
    2 per-channel      int4:row            one scale per output row
    3 g128             int4:g128           one scale per 128 inputs of a row
    4 g64              int4:g64
    5 outliers-fp16    int4:g64 + fp16     the input columns with the largest calibration magnitude
                       columns             (OUTLIER_FRACTION of each linear's inputs) kept in fp16,
                                           their bytes (2 per weight + a 4-byte index) counted
    6 keep-sensitive   step 5, and embeddings, lm_head and the first and last blocks left in float
    7 gptq-g128        GPTQ at int4:g128 on the layers step 6 quantizes (replaces the outlier columns),
                       block by block on the partly quantized model (CALIBRATED_OPTIONS)
    8 awq-g128         AWQ at int4:g128 on the same layers (its scales folded into the norms): the
                       other calibrated method, tried when GPTQ does not pass
    9 int8             one bit width up: int8:row on the layers step 6 quantizes

Stop rule. A step passes when every task's verdict is "pass" (the whole confidence interval on
the good side of --max-drop, declared before the run). "inconclusive" is not a pass: the step
records how many examples would decide it and, with `grow`, is evaluated again with twice the
examples (up to `max_examples`) before the ladder moves on. A grid-aligned step (the scheme
reproduced every quantized source weight bit for bit, as int4 groups of 32 with a minimum do on
a Q4_1 GGUF) proves nothing about the scheme: it is reported, marked, and never stopped at.
When no step passes, the remaining option is quantization-aware training (not implemented).

`run_ladder` is pure control flow over `evaluate(step, examples) -> StepOutcome`, so a stub
evaluator tests it; `ModelEvaluator` is the real one (the eval machinery on a loaded model).
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

OUTLIER_FRACTION = 0.01
"""Share of each linear's input columns kept in fp16 at the outlier step (at least one)."""
PASS, FAIL, INCONCLUSIVE = "pass", "fail", "inconclusive"
NOT_EVIDENCE = "grid-aligned"
"""The verdict shown for a step whose scheme reproduced the source weights: not evidence."""
QAT = "quantization-aware training (not implemented here)"
_WIDTH = re.compile(r"^(u?int|fp)(\d+)$")
_UP = {"int2": "int4", "int4": "int8", "int8": "int16", "fp4": "fp8", "fp8": "fp16"}
_ELEMENT = {"fp4": "e2m1", "fp8": "e4m3", "fp16": "fp16"}


CALIBRATED_OPTIONS: dict[str, dict[str, Any]] = {"gptq": {"sequential": "block"}, "awq": {}}
"""The step methods that run a PTQ method (`ptq.run.run_method`) on the calibration batches, with their
options: GPTQ block by block, each block calibrated on the model with the blocks before it quantized (the
paper's order); AWQ as its reference code runs, every block on float inputs."""
CALIBRATED = tuple(CALIBRATED_OPTIONS)


class GrowLimit(ValueError):
    """The evaluation data holds no more examples: the ladder stops growing the step."""


@dataclass(frozen=True)
class Step:
    """One rung: what is quantized, how, and what is left in float."""

    name: str
    scheme: str
    """The weight scheme (the grid of every quantized layer)."""
    method: str = "rtn"
    """"rtn" (the scheme as it is), "outliers" (fp16 outlier input columns), "gptq" or "awq" (`CALIBRATED`)."""
    keep_sensitive: bool = False
    """Embeddings, lm_head and the first and last blocks left in float."""
    description: str = ""


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


@dataclass
class StepRecord:
    """A step as the ladder reports it: the last evaluation and every attempt (grown evaluations)."""

    index: int
    step: Step
    attempts: list[StepOutcome]
    seconds: float

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

    @property
    def remaining(self) -> str | None:
        """What is left when nothing passed."""
        return None if self.stopped_at else QAT

    def findings(self) -> dict[str, Any]:
        """ladder.stopped_at (step name or "none"), ladder.steps.<i>.name / .scheme / .bytes / .difference /
        .ci_low / .ci_high / .verdict (plus .examples, .examples_needed, .grid_aligned, .seconds, .method and
        per task ladder.steps.<i>.<task>.difference / .ci_low / .ci_high / .verdict)."""
        out: dict[str, Any] = {"ladder.stopped_at": self.stopped_at or "none", "ladder.target": self.target,
                               "ladder.max_drop": self.max_drop, "ladder.steps_tried": len(self.steps),
                               "ladder.seconds": self.seconds}
        if not self.stopped_at:
            out["ladder.remaining_option"] = QAT
        for r in self.steps:
            o, base = r.outcome, f"ladder.steps.{r.index}"
            out.update({f"{base}.name": r.step.name, f"{base}.scheme": r.step.scheme, f"{base}.method": r.step.method,
                        f"{base}.keep_sensitive": r.step.keep_sensitive, f"{base}.bytes": o.bytes,
                        f"{base}.bits_per_weight": o.bits_per_weight, f"{base}.difference": o.difference,
                        f"{base}.ci_low": o.ci_low, f"{base}.ci_high": o.ci_high, f"{base}.verdict": r.verdict,
                        f"{base}.task_verdict": o.verdict, f"{base}.examples": o.examples,
                        f"{base}.examples_needed": o.examples_needed, f"{base}.grid_aligned": o.grid_aligned,
                        f"{base}.alignment": o.alignment, f"{base}.attempts": len(r.attempts),
                        f"{base}.seconds": r.seconds})
            for task, values in o.tasks.items():
                for key in ("difference", "ci_low", "ci_high", "verdict"):
                    out[f"{base}.{task}.{key}"] = values.get(key)
        return out


# --------------------------------------------------------------------------- the steps
def ladder_steps(target: str = "int4") -> list[Step]:
    """The rungs at `target` (int2, int4, int8, uint4 ..., fp4, fp8) in the order of the module docstring."""
    text = str(target).strip().lower()
    base = text[1:] if text.startswith("u") else text
    if not _WIDTH.match(text) or base not in _UP:
        raise ValueError(f"ladder target must be a bit width such as int4, int8, int2, fp4 or fp8; got {target!r}")
    element = _ELEMENT.get(base, text)
    up = _UP[base]
    up_element = _ELEMENT.get(up, up)
    return [
        Step("per-tensor", element, description="one scale per weight matrix; embeddings and lm_head quantized too"),
        Step("per-channel", f"{element}:row", description="one scale per output row"),
        Step("g128", f"{element}:g128", description="one scale per 128 inputs of a row"),
        Step("g64", f"{element}:g64", description="one scale per 64 inputs of a row"),
        Step("outliers-fp16", f"{element}:g64", "outliers",
             description=f"g64, and each linear's {OUTLIER_FRACTION:.0%} largest-magnitude input columns in fp16"),
        Step("keep-sensitive", f"{element}:g64", "outliers", True,
             description="and embeddings, lm_head, the first and last blocks in float"),
        Step("gptq-g128", f"{element}:g128", "gptq", True,
             description="GPTQ at g128, block by block, on the layers the previous step quantizes"),
        Step("awq-g128", f"{element}:g128", "awq", True,
             description="AWQ at g128 on the same layers, its scales folded into the norms"),
        Step(f"{up}", f"{up_element}:row", "rtn", True, description=f"one bit width up: {up_element} per channel"),
    ]


# --------------------------------------------------------------------------- the control flow
Evaluate = Callable[[Step, int], StepOutcome]
Report = Callable[[StepRecord], None]


def check_ladder_options(examples: int, grow: bool, max_examples: int | None, max_drop: float) -> None:
    if not isinstance(examples, int) or examples < 2:
        raise ValueError(f"the ladder needs at least 2 evaluation examples, got {examples!r}")
    if max_examples is not None and max_examples < examples:
        raise ValueError(f"--max-examples ({max_examples}) is below the starting number of examples ({examples})")
    if not math.isfinite(float(max_drop)) or float(max_drop) < 0:
        raise ValueError(f"--max-drop must be a finite number >= 0, got {max_drop!r}")


def run_ladder(steps: Sequence[Step], evaluate: Evaluate, *, examples: int, max_drop: float = 1.0,
               target: str = "", grow: bool = False, max_examples: int | None = None,
               report: Report | None = None) -> LadderResult:
    """Evaluate the steps in order and stop at the first PASS (see the module docstring).

    With `grow`, an inconclusive step is evaluated again with twice the examples while that stays within
    `max_examples` (default 4 × examples); `evaluate` may raise GrowLimit when the data holds no more."""
    check_ladder_options(examples, grow, max_examples, max_drop)
    if not steps:
        raise ValueError("the ladder needs at least one step")
    cap = max_examples if max_examples is not None else 4 * examples
    start = time.perf_counter()
    records: list[StepRecord] = []
    notes: list[str] = []
    stopped: str | None = None
    for index, step in enumerate(steps):
        began = time.perf_counter()
        n = examples
        attempts = [evaluate(step, n)]
        while grow and attempts[-1].verdict == INCONCLUSIVE and not attempts[-1].grid_aligned and 2 * n <= cap:
            n *= 2
            try:
                attempts.append(evaluate(step, n))
            except GrowLimit as exc:
                notes.append(f"{step.name}: not grown beyond {attempts[-1].examples} examples ({exc})")
                break
        record = StepRecord(index, step, attempts, time.perf_counter() - began)
        records.append(record)
        if report is not None:
            report(record)
        if record.passed:
            stopped = step.name
            break
    if stopped is None:
        notes.append(f"no step passed at --max-drop {max_drop:g}: the remaining option is {QAT}")
    return LadderResult(records, stopped, float(max_drop), target, grow, cap if grow else max_examples, notes,
                        time.perf_counter() - start)


def combine(tasks: dict[str, dict[str, Any]]) -> str:
    """A step's verdict over its tasks: fail if any fails, pass if all pass, else inconclusive."""
    verdicts = [t["verdict"] for t in tasks.values()]
    if any(v == FAIL for v in verdicts):
        return FAIL
    return PASS if verdicts and all(v == PASS for v in verdicts) else INCONCLUSIVE


# --------------------------------------------------------------------------- outlier columns
def outlier_columns(abs_max: Any, fraction: float = OUTLIER_FRACTION) -> Any:
    """Indices (ascending) of the ceil(fraction · N) input columns with the largest calibration max |x|."""
    import numpy as np

    magnitude = np.asarray(abs_max, dtype=np.float64)
    k = max(1, math.ceil(fraction * magnitude.size))
    return np.sort(np.argsort(-magnitude, kind="stable")[:k])


def quantize_with_outliers(weight: Any, scheme: str, columns: Any) -> tuple[Any, int]:
    """(effective weight, stored bytes): the columns not in `columns` quantized with `scheme` as one matrix
    (out, N − K); the K kept columns rounded to fp16; bytes = the quantized part's nbytes + 2 · out · K
    (fp16 values) + 4 · K (int32 column indices)."""
    import numpy as np

    from precisionlab.quant import quantize

    w = np.asarray(weight, dtype=np.float32)
    keep = np.zeros(w.shape[1], dtype=bool)
    keep[np.asarray(columns, dtype=np.int64)] = True
    q = quantize(np.ascontiguousarray(w[:, ~keep]), scheme)
    out = np.empty_like(w)
    out[:, ~keep] = q.dequantize()
    out[:, keep] = w[:, keep].astype(np.float16).astype(np.float32)
    k = int(keep.sum())
    return out, int(q.nbytes) + 2 * w.shape[0] * k + 4 * k


# --------------------------------------------------------------------------- the real evaluator
class ModelEvaluator:
    """`evaluate(step, examples)` on a loaded model: the step's weights installed as an eval candidate, paired
    against the float reference on `tasks` (eval.runner.evaluate), with the first task's numbers as the step's.

    `examples` is the first task's number of examples (the built-in ppl set has 40 at size 1); every task is
    resized by the same factor. `blocks` limits every step to those blocks' linears (embeddings and lm_head
    then stay in float throughout). `calibration` (token batches of the calibration part) feeds the outlier
    columns and GPTQ."""

    def __init__(self, loaded: Any, tasks: Sequence[str], max_drop: float, calibration: Sequence[Any], *,
                 blocks: Sequence[int] | None = None, seed: int = 0, cache: bool = True,
                 n_resamples: int = 10_000, progress: Any = None, base_examples: int | None = None) -> None:
        from precisionlab.eval.tasks import resolve_tasks
        from precisionlab.ptq.structure import blocks as model_blocks

        self.loaded, self.tasks, self.max_drop = loaded, list(tasks), float(max_drop)
        self.calibration = calibration
        self.seed, self.cache, self.n_resamples, self.progress = seed, cache, n_resamples, progress
        self.prefix, layers = model_blocks(loaded.model)
        count = len(layers)
        if blocks is not None:
            bad = [b for b in blocks if not 0 <= b < count]
            if bad:
                raise ValueError(f"block {bad[0]} does not exist: the model has blocks 0..{count - 1}")
        self.blocks = sorted(set(blocks)) if blocks is not None else None
        self.first_last = (0, count - 1)
        if self.blocks is not None and set(self.blocks) <= set(self.first_last):
            raise ValueError(f"--blocks {','.join(map(str, self.blocks))}: the steps that keep the first and last "
                             f"blocks in float would quantize nothing; include a block between 1 and {count - 2}")
        self.base = resolve_tasks(self.tasks, loaded.kind, size=1.0, seed=seed)
        self.base_examples = base_examples or len(self.base[0].items)
        self._abs_max: dict[str, Any] | None = None
        self._calibrated_runs: dict[tuple[str, str, tuple[str, ...]], Any] = {}
        self.step_results: dict[str, Any] = {}
        """Step name -> the PTQResult a calibrated step installed (what `precisionlab export` ships)."""
        self._evaluated: list[Any] = []

    @property
    def evaluations(self) -> list[Any]:
        """Every EvalRun made, in order (for the per-example files)."""
        return list(self._evaluated)

    def selection(self, step: Step) -> tuple[list[str], list[str]]:
        """(include, exclude) glob patterns of the step (models.weights.linear_layers' rule)."""
        include = [f"{self.prefix}.{b}.*" for b in self.blocks] if self.blocks is not None else []
        exclude: list[str] = [] if self.blocks is None else ["lm_head", "*embed*"]
        if step.keep_sensitive:
            exclude = ["lm_head", "*embed*", *(f"{self.prefix}.{b}.*" for b in sorted(set(self.first_last)))]
        return include, exclude

    def __call__(self, step: Step, examples: int) -> StepOutcome:
        from precisionlab.eval.candidates import Candidate
        from precisionlab.eval.runner import evaluate
        from precisionlab.eval.tasks import resolve_tasks

        began = time.perf_counter()
        size = examples / self.base_examples
        try:
            specs = resolve_tasks(self.tasks, self.loaded.kind, size=size, seed=self.seed)
        except ValueError as exc:
            raise GrowLimit(str(exc)) from None
        include, exclude = self.selection(step)
        if step.method == "rtn":
            candidate = Candidate(step.scheme, name=f"{step.name}:{step.scheme}")
        else:
            candidate = Candidate(step.scheme, name=f"{step.name}:{step.scheme}", prepare=self._prepare(step))
        run = evaluate(self.loaded, [candidate], specs, self.max_drop, include, exclude, cache=self.cache,
                       progress=self.progress, seed=self.seed, n_resamples=self.n_resamples)
        self._evaluated.append(run)
        cand = run.candidates[0]
        if not cand.quantized_layers:  # an unquantized model would pass and prove nothing
            raise ValueError(f"step {step.name}: no layer was quantized (--blocks and the step's exclusions left none)")
        tasks: dict[str, dict[str, Any]] = {}
        for task in run.tasks:
            c = task.outcomes[0].comparisons[task.primary]
            tasks[task.name] = {"difference": c.interval.estimate, "ci_low": c.interval.low,
                                "ci_high": c.interval.high, "verdict": c.verdict, "n": c.interval.n,
                                "examples_needed": c.examples_needed, "unit": task.unit,
                                "metric": task.primary, "value": task.outcomes[0].metrics[task.primary],
                                "reference": task.reference[task.primary]}
        first = tasks[run.tasks[0].name]
        return StepOutcome(verdict=combine(tasks), difference=first["difference"], ci_low=first["ci_low"],
                           ci_high=first["ci_high"], bytes=int(cand.model_bytes), examples=len(run.tasks[0].spec.items),
                           examples_needed=first["examples_needed"], grid_aligned=cand.alignment == "aligned",
                           alignment=cand.alignment, tasks=tasks, bits_per_weight=cand.bits_per_weight,
                           notes=list(cand.notes), seconds=time.perf_counter() - began)

    # -- prepared steps
    def _prepare(self, step: Step) -> Callable[[Any, Any, Any], Any]:
        from precisionlab.ptq.install import install

        def prepare(model: Any, include: Sequence[str], exclude: Sequence[str] | None) -> Any:
            from precisionlab.models.weights import linear_layers

            selected = linear_layers(model, include, exclude)
            if step.method in CALIBRATED:
                return self._calibrated(model, step, selected)
            abs_max = self._input_magnitudes(model)
            values: dict[str, Any] = {}
            stored: dict[str, int] = {}
            seen: set[int] = set()
            for name, module in selected.items():
                if id(module.weight) in seen:  # a tied weight (SmolLM2's lm_head is its embedding): once
                    continue
                seen.add(id(module.weight))
                w = module.weight.detach().float().numpy()
                if name in abs_max:
                    values[name], stored[name] = quantize_with_outliers(w, step.scheme, outlier_columns(abs_max[name]))
                else:  # an embedding (one-hot inputs: no outlier column) or a layer outside the blocks
                    from precisionlab.quant import quantize

                    q = quantize(w, step.scheme)
                    values[name], stored[name] = q.dequantize(), int(q.nbytes)
            return install(model, _writer(values), stored, f"{step.name} {step.scheme}")

        return prepare

    def _input_magnitudes(self, model: Any) -> dict[str, Any]:
        """max |x| per input column of every block linear, on the calibration batches (captured once)."""
        if self._abs_max is None:
            from precisionlab.ptq.calibration import capture
            from precisionlab.ptq.structure import linear_names

            names = linear_names(model, self.blocks)
            cap = capture(model, names, self.calibration)
            self._abs_max = {n: cap.stats[n].abs_max.copy() for n in names}
        return self._abs_max

    def _calibrated(self, model: Any, step: Step, selected: dict[str, Any]) -> Any:
        """GPTQ or AWQ (step.method) on the selected block linears, installed reversibly (AWQ's folds
        into the norms included: `install` restores every parameter that changed)."""
        import torch

        from precisionlab.ptq.install import install_result
        from precisionlab.ptq.run import run_method

        method = step.method
        names = [n for n, m in selected.items() if isinstance(m, torch.nn.Linear) and n.startswith(f"{self.prefix}.")]
        if not names:
            raise ValueError(f"step {step.name}: no block linear is selected for {method}")
        key = (method, step.scheme, tuple(names))
        if key not in self._calibrated_runs:  # a grown evaluation of the step reuses its weights
            self._calibrated_runs[key] = run_method(model, method, step.scheme, self.calibration, layers=names,
                                                    options=CALIBRATED_OPTIONS[method])
        result = self._calibrated_runs[key]
        self.step_results[step.name] = result
        failed = [r.name for r in result.layers if r.status != "ok"]
        if failed:
            raise ValueError(f"step {step.name}: {method} failed on {len(failed)} layer(s), first {failed[0]}")
        return install_result(model, result, result.apply, f"{step.name} {step.scheme}")


def _writer(values: dict[str, Any]) -> Callable[[Any], None]:
    def write(model: Any) -> None:
        import torch

        modules = dict(model.named_modules())
        with torch.no_grad():
            for name, value in values.items():
                weight = modules[name].weight
                weight.copy_(torch.from_numpy(value).to(weight.dtype))

    return write
