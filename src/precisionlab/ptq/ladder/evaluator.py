"""The ladder's real evaluator: each step's weights installed on a loaded model as an evaluation candidate,
paired against the float reference (eval.runner.evaluate) at the confidence the ladder asks for.

    evaluator = ModelEvaluator(loaded, ["ppl"], max_drop=1.0, calibration=batches, blocks=[1, 2])
    evaluator.planned_bytes(step)          # the model's bytes with the step, from the layer shapes
    evaluator(step, examples, confidence)  # a StepOutcome

The outlier step is its own rule (`quantize_with_outliers`): the quant grammar's `outliers=K` keeps whole
weight rows in fp16, while activation outliers are input columns.

A step method the ptq package does not implement (the QAT step: precisionlab.qat, a package beside this one) is
given as `methods={"qat": prepare}`, `prepare(evaluator, model, step, selected) -> QuantizationReport`; it reads
`evaluator.tried` (every step evaluated or resumed so far, with its difference) and `calibrated_result`.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from precisionlab.ptq.ladder.climb import GrowLimit, StepOutcome, combine
from precisionlab.ptq.ladder.steps import CALIBRATED, CALIBRATED_OPTIONS, OUTLIER_FRACTION, Step


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
    """`evaluate(step, examples, confidence)` on a loaded model: the step's weights installed as an eval
    candidate, paired against the float reference on `tasks` (eval.runner.evaluate), with the first task's
    numbers as the step's.

    `examples` is the first task's number of examples (the built-in ppl set has 40 at size 1); every task is
    resized by the same factor. `blocks` limits every step to those blocks' linears (embeddings and lm_head
    then stay in float throughout). `calibration` (token batches of the calibration part) feeds the outlier
    columns and GPTQ."""

    def __init__(self, loaded: Any, tasks: Sequence[str], max_drop: float, calibration: Sequence[Any], *,
                 blocks: Sequence[int] | None = None, seed: int = 0, cache: bool = True,
                 n_resamples: int = 10_000, progress: Any = None, base_examples: int | None = None,
                 methods: dict[str, Callable[..., Any]] | None = None) -> None:
        from precisionlab.eval.tasks import resolve_tasks
        from precisionlab.ptq.structure import blocks as model_blocks

        self.loaded, self.tasks, self.max_drop = loaded, list(tasks), float(max_drop)
        self.calibration = calibration
        self.seed, self.cache, self.n_resamples, self.progress = seed, cache, n_resamples, progress
        self.prefix, layers = model_blocks(loaded.model)
        count = len(layers)
        check_blocks(blocks, count)
        self.blocks = sorted(set(blocks)) if blocks is not None else None
        self.first_last = (0, count - 1)
        self.base = resolve_tasks(self.tasks, loaded.kind, size=1.0, seed=seed)
        self.base_examples = base_examples or len(self.base[0].items)
        self._abs_max: dict[str, Any] | None = None
        self._calibrated_runs: dict[tuple[str, str, tuple[str, ...]], Any] = {}
        self.step_results: dict[str, Any] = {}
        """Step name -> the PTQResult a calibrated step installed (what `precisionlab export` ships)."""
        self._evaluated: list[Any] = []
        self.methods = dict(methods or {})
        """Step method -> prepare(evaluator, model, step, selected) for the methods implemented outside ptq."""
        self.tried: dict[str, tuple[Step, float]] = {}
        """Step name -> (step, difference of its last evaluation): every step evaluated or resumed so far."""
        self._examples_seen: dict[str, tuple[int, int]] = {}
        """Per step: the examples last asked for and the first task's count they gave."""

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

    def __call__(self, step: Step, examples: int, confidence: float = 0.95) -> StepOutcome:
        """The step evaluated on `examples` of the first task (the others resized alike), its intervals at
        `confidence`. GrowLimit when the data holds no more examples than this step's previous evaluation."""
        from precisionlab.eval.candidates import Candidate
        from precisionlab.eval.runner import evaluate
        from precisionlab.eval.tasks import resolve_tasks

        began = time.perf_counter()
        size = examples / self.base_examples
        try:
            specs = resolve_tasks(self.tasks, self.loaded.kind, size=size, seed=self.seed)
        except ValueError as exc:
            raise GrowLimit(str(exc)) from None
        count = len(specs[0].items)
        asked, held = self._examples_seen.get(step.name, (examples, 0))
        if examples > asked and count <= held:  # a grown look on a user file (not resized): the same documents
            raise GrowLimit(f"task {specs[0].name!r} holds {count} examples")
        include, exclude = self.selection(step)
        if step.method == "rtn":
            candidate = Candidate(step.scheme, name=f"{step.name}:{step.scheme}")
        else:
            candidate = Candidate(step.scheme, name=f"{step.name}:{step.scheme}", prepare=self._prepare(step))
        run = evaluate(self.loaded, [candidate], specs, self.max_drop, include, exclude, cache=self.cache,
                       progress=self.progress, seed=self.seed, n_resamples=self.n_resamples, confidence=confidence)
        self._evaluated.append(run)
        self._examples_seen[step.name] = (examples, count)
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
        self.tried[step.name] = (step, float(first["difference"]))
        return StepOutcome(verdict=combine(tasks), difference=first["difference"], ci_low=first["ci_low"],
                           ci_high=first["ci_high"], bytes=int(cand.model_bytes), examples=len(run.tasks[0].spec.items),
                           examples_needed=first["examples_needed"], grid_aligned=cand.alignment == "aligned",
                           alignment=cand.alignment, tasks=tasks, bits_per_weight=cand.bits_per_weight,
                           notes=list(cand.notes), seconds=time.perf_counter() - began, confidence=confidence)

    def planned_bytes(self, step: Step) -> int:
        """The model's bytes with `step` applied, from the layer shapes alone (nothing is quantized): each
        quantized weight's `quant.stored_bytes` (the outlier step: the (out, N - K) rest, plus 2 bytes per
        kept value and a 4-byte index per kept column), every other parameter at its stored width, a tied
        weight once. The same count as the evaluated step's `bytes` (models.weights, ptq.install)."""
        from precisionlab.models.loading import unique_parameters
        from precisionlab.models.weights import CONV1D, layer_kind, linear_layers
        from precisionlab.ptq.structure import linear_names

        model = self.loaded.model
        include, exclude = self.selection(step)
        selected = linear_layers(model, include, exclude)
        if step.method in CALIBRATED or step.method in self.methods:
            selected = {n: m for n, m in selected.items() if n.startswith(f"{self.prefix}.")}
        columns = set(linear_names(model, self.blocks)) if step.method == "outliers" else set()
        stored: dict[int, int] = {}
        for name, module in selected.items():
            weight = module.weight
            if id(weight) in stored:
                continue
            rows, cols = (weight.shape[1], weight.shape[0]) if layer_kind(module) == CONV1D else tuple(weight.shape)
            stored[id(weight)] = _planned_layer_bytes(step.scheme, int(rows), int(cols), name in columns,
                                                      weight.numel() * weight.element_size())
        return sum(stored.get(id(p), p.numel() * p.element_size()) for p in unique_parameters(model))

    # -- prepared steps
    def _prepare(self, step: Step) -> Callable[[Any, Any, Any], Any]:
        from precisionlab.ptq.install import install

        def prepare(model: Any, include: Sequence[str], exclude: Sequence[str] | None) -> Any:
            from precisionlab.models.weights import linear_layers

            selected = linear_layers(model, include, exclude)
            if step.method in CALIBRATED:
                return self._calibrated(model, step, selected)
            if step.method in self.methods:
                return self.methods[step.method](self, model, step, selected)
            abs_max = self._input_magnitudes(model)
            stored: dict[str, int] = {}

            def values() -> Iterator[tuple[str, Any]]:  # one layer's new values at a time
                from precisionlab.quant import quantize

                seen: set[int] = set()
                for name, module in selected.items():
                    if id(module.weight) in seen:  # a tied weight (SmolLM2's lm_head is its embedding): once
                        continue
                    seen.add(id(module.weight))
                    w = module.weight.detach().float().numpy()
                    if name in abs_max:
                        value, stored[name] = quantize_with_outliers(w, step.scheme, outlier_columns(abs_max[name]))
                    else:  # an embedding (one-hot inputs: no outlier column) or a layer outside the blocks
                        q = quantize(w, step.scheme)
                        value, stored[name] = q.dequantize(), int(q.nbytes)
                    yield name, value

            return install(model, values(), stored, f"{step.name} {step.scheme}")

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

    def note_done(self, records: Sequence[Any]) -> None:
        """Steps taken from an earlier run's log (ladder resume): known to `tried` like evaluated ones."""
        for record in records:
            self.tried[record.step.name] = (record.step, float(record.outcome.difference))

    def _calibrated(self, model: Any, step: Step, selected: dict[str, Any]) -> Any:
        """GPTQ or AWQ (step.method) on the selected block linears, installed reversibly (AWQ's folds
        into the norms included: `install` keeps and restores exactly the parameters they write)."""
        from precisionlab.ptq.install import install_result

        result = self.calibrated_result(model, step, selected)
        self.step_results[step.name] = result
        failed = [r.name for r in result.layers if r.status != "ok"]
        if failed:
            raise ValueError(f"step {step.name}: {step.method} failed on {len(failed)} layer(s), first {failed[0]}")
        return install_result(model, result, label=f"{step.name} {step.scheme}")

    def calibrated_result(self, model: Any, step: Step, selected: dict[str, Any]) -> Any:
        """The PTQResult of GPTQ or AWQ (step.method) on the selected block linears (run once per step: a grown
        evaluation, or a later step that starts from it, reuses it)."""
        import torch

        from precisionlab.ptq.run import run_method

        method = step.method
        names = [n for n, m in selected.items() if isinstance(m, torch.nn.Linear) and n.startswith(f"{self.prefix}.")]
        if not names:
            raise ValueError(f"step {step.name}: no block linear is selected for {method}")
        key = (method, step.scheme, tuple(names))
        if key not in self._calibrated_runs:  # a grown evaluation of the step reuses its weights
            self._calibrated_runs[key] = run_method(model, method, step.scheme, self.calibration, layers=names,
                                                    options=CALIBRATED_OPTIONS[method])
        return self._calibrated_runs[key]


def check_blocks(blocks: Sequence[int] | None, count: int | None) -> None:
    """ValueError unless every block exists and some block lies strictly between the first and the last (the
    steps that keep those in float would quantize nothing). `count` None (not known yet): block 0 alone is
    refused, the rest waits for the model."""
    if blocks is None:
        return
    if count is None:
        if set(blocks) == {0}:
            raise ValueError("--blocks 0: the steps that keep the first and last blocks in float would quantize "
                             "nothing; include a block other than the first and the last")
        return
    bad = [b for b in blocks if not 0 <= b < count]
    if bad:
        raise ValueError(f"block {bad[0]} does not exist: the model has blocks 0..{count - 1}")
    if set(blocks) <= {0, count - 1}:
        raise ValueError(f"--blocks {','.join(map(str, sorted(set(blocks))))}: the steps that keep the first and last "
                         f"blocks in float would quantize nothing; include a block between 1 and {count - 2}")


def _planned_layer_bytes(scheme: str, rows: int, cols: int, outliers: bool, float_bytes: int) -> int:
    from precisionlab.quant import stored_bytes

    k = max(1, math.ceil(OUTLIER_FRACTION * cols)) if outliers else 0
    try:
        quantized = sum(stored_bytes(scheme, (rows, cols - k)).values())
    except ValueError:  # a layer the scheme cannot hold stays in float (models.weights' rule)
        return float_bytes
    return quantized + 2 * rows * k + 4 * k

