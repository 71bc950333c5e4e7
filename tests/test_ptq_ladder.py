"""The escalation ladder: step order, the byte plan and the stop rule on a stub evaluator whose verdicts the
tests choose (INCONCLUSIVE + --grow, grid-aligned steps, nothing passing), the error budget each evaluation is
asked for, resumed steps, the findings keys, the outlier-column step's values and bytes, and real steps on a
SmolLM2 slice (their bytes planned from the shapes, their verdicts the ones their intervals imply)."""

from __future__ import annotations

import json
import math
import warnings

import numpy as np
import pytest

from precisionlab.labs.ladder import ladder_lab
from precisionlab.ptq.ladder import (
    QAT,
    GrowLimit,
    Step,
    StepOutcome,
    combine,
    ladder_steps,
    outlier_columns,
    plan_steps,
    planned_looks,
    quantize_with_outliers,
    run_ladder,
)
from precisionlab.quant import quantize

INTERVALS = {"pass": (0.1, 0.9), "fail": (1.5, 2.5), "inconclusive": (0.5, 1.5)}
"""Stub intervals (perplexity-like, threshold 1.0) that imply the verdict they come with."""


def outcome(verdict: str, examples: int = 8, *, aligned: bool = False, needed: int | None = None,
            confidence: float = 0.95) -> StepOutcome:
    low, high = INTERVALS[verdict]
    return StepOutcome(verdict=verdict, difference=(low + high) / 2, ci_low=low, ci_high=high, bytes=1000,
                       examples=examples, examples_needed=needed, grid_aligned=aligned,
                       alignment="aligned" if aligned else "no", confidence=confidence,
                       tasks={"ppl": {"difference": (low + high) / 2, "ci_low": low, "ci_high": high,
                                      "verdict": verdict}})


class Stub:
    """Verdicts by step name (a callable of the number of examples, or a fixed verdict); records each call."""

    def __init__(self, verdicts: dict[str, object], aligned: frozenset[str] = frozenset()) -> None:
        self.verdicts, self.aligned = verdicts, aligned
        self.calls: list[tuple[str, int]] = []
        self.confidences: list[float] = []

    def __call__(self, step: Step, examples: int, confidence: float) -> StepOutcome:
        self.calls.append((step.name, examples))
        self.confidences.append(confidence)
        rule = self.verdicts.get(step.name, "fail")
        verdict = rule(examples) if callable(rule) else rule
        return outcome(str(verdict), examples, aligned=step.name in self.aligned, needed=64, confidence=confidence)


def implied_verdict(low: float, high: float, max_drop: float) -> str:
    """The verdict a perplexity interval implies (lower is better): the whole interval below the threshold
    passes, the whole interval above it fails, anything touching it is inconclusive."""
    if high < max_drop:
        return "pass"
    if low > max_drop:
        return "fail"
    return "inconclusive"


def test_the_steps_climb_in_the_issue_order() -> None:
    steps = ladder_steps("int4")
    assert [s.name for s in steps] == ["per-tensor", "per-channel", "g128", "g64", "outliers-fp16", "keep-sensitive",
                                       "gptq-g128", "awq-g128", "int8"]
    assert [s.scheme for s in steps] == ["int4", "int4:row", "int4:g128", "int4:g64", "int4:g64", "int4:g64",
                                         "int4:g128", "int4:g128", "int8:row"]
    assert [s.method for s in steps][4:9] == ["outliers", "outliers", "gptq", "awq", "rtn"]
    assert [s.keep_sensitive for s in steps] == [False] * 5 + [True] * 4
    assert [s.remedy for s in steps][:4] == ["granularity"] * 4 and len({s.remedy for s in steps}) == 6
    assert [s.groups_of for s in steps][6:8] == ["g128", "g128"]
    assert ladder_steps("fp4")[0].scheme == "e2m1" and ladder_steps("fp4")[-1].scheme == "e4m3:row"
    assert ladder_steps("int8")[-1].name == "int16"
    for bad in ("int5", "int4:g128", "nvfp4", ""):
        with pytest.raises(ValueError, match="ladder target must be a bit width"):
            ladder_steps(bad)


def test_it_stops_at_the_first_pass_and_keeps_every_step_before() -> None:
    stub = Stub({"g128": "fail", "g64": "pass", "int8": "pass"})
    result = run_ladder(ladder_steps("int4"), stub, examples=8)
    assert result.stopped_at == "g64"
    assert [r.outcome.verdict for r in result.steps] == [implied_verdict(r.outcome.ci_low, r.outcome.ci_high, 1.0)
                                                         for r in result.steps]
    assert [r.step.name for r in result.steps] == ["per-tensor", "per-channel", "g128", "g64"]
    assert [r.verdict for r in result.steps] == ["fail", "fail", "fail", "pass"]
    assert stub.calls == [("per-tensor", 8), ("per-channel", 8), ("g128", 8), ("g64", 8)]
    assert result.remaining is None


def test_inconclusive_is_not_a_pass_and_without_grow_the_ladder_moves_on() -> None:
    stub = Stub({"per-tensor": "inconclusive", "per-channel": "pass"})
    result = run_ladder(ladder_steps("int4"), stub, examples=8)
    assert result.stopped_at == "per-channel"
    assert result.steps[0].verdict == "inconclusive" and len(result.steps[0].attempts) == 1
    assert result.findings()["ladder.steps.0.examples_needed"] == 64


def test_grow_doubles_an_inconclusive_step_until_it_decides() -> None:
    stub = Stub({"per-tensor": lambda n: "pass" if n >= 32 else "inconclusive"})
    result = run_ladder(ladder_steps("int4"), stub, examples=8, grow=True, max_examples=64)
    assert stub.calls == [("per-tensor", 8), ("per-tensor", 16), ("per-tensor", 32)]
    assert result.stopped_at == "per-tensor"
    assert [a.examples for a in result.steps[0].attempts] == [8, 16, 32]
    assert result.findings()["ladder.steps.0.attempts"] == 3


def test_grow_stops_at_max_examples_then_moves_on() -> None:
    stub = Stub({"per-tensor": "inconclusive", "per-channel": "pass"})
    result = run_ladder(ladder_steps("int4"), stub, examples=8, grow=True, max_examples=20)
    assert stub.calls == [("per-tensor", 8), ("per-tensor", 16), ("per-channel", 8)]
    assert result.steps[0].verdict == "inconclusive" and result.stopped_at == "per-channel"


def test_grow_stops_when_the_data_runs_out() -> None:
    def evaluate(step: Step, n: int, confidence: float) -> StepOutcome:
        if n > 8:
            raise GrowLimit("the built-in data holds only 10 documents")
        return outcome("inconclusive" if step.name == "per-tensor" else "pass", n)

    result = run_ladder(ladder_steps("int4"), evaluate, examples=8, grow=True)
    assert result.stopped_at == "per-channel"
    assert any("not grown beyond 8 examples" in n for n in result.notes)


def test_a_grid_aligned_pass_is_not_evidence() -> None:
    stub = Stub({"per-tensor": "pass", "per-channel": "pass"}, aligned=frozenset({"per-tensor"}))
    result = run_ladder(ladder_steps("int4"), stub, examples=8)
    assert result.steps[0].verdict == "grid-aligned" and not result.steps[0].passed
    assert result.stopped_at == "per-channel"
    lab = ladder_lab(result, {}, {"name": "m"})
    cells = lab.section("steps").column("verdict")
    assert cells[0] == "GRID-ALIGNED (PASS, not evidence)" and cells[1] == "PASS"
    assert lab.findings["ladder.steps.0.verdict"] == "grid-aligned"
    assert lab.findings["ladder.steps.0.grid_aligned"] is True


def test_nothing_passes_names_quantization_aware_training() -> None:
    result = run_ladder(ladder_steps("int4"), Stub({}), examples=8)
    assert result.stopped_at is None and len(result.steps) == 9
    f = result.findings()
    assert f["ladder.stopped_at"] == "none" and f["ladder.remaining_option"] == QAT
    assert "quantization-aware training" in result.notes[-1]


def test_findings_keys_and_json() -> None:
    result = run_ladder(ladder_steps("int4"), Stub({"per-channel": "pass"}), examples=8)
    lab = ladder_lab(result, {"model": "m"}, {"name": "m"})
    data = json.loads(json.dumps(lab.to_dict(), allow_nan=False))
    f = data["findings"]
    assert f["ladder.stopped_at"] == "per-channel"
    for i, (name, scheme) in enumerate([("per-tensor", "int4"), ("per-channel", "int4:row")]):
        assert f[f"ladder.steps.{i}.name"] == name and f[f"ladder.steps.{i}.scheme"] == scheme
        for key in ("bytes", "difference", "ci_low", "ci_high", "verdict"):
            assert f"ladder.steps.{i}.{key}" in f
    assert "ladder.steps.2.name" not in f
    assert [fig["key"] for fig in data["figures"]] == ["difference_bytes"]
    assert len(data["figures"][0]["series"]) == 2


def test_bad_ladder_options() -> None:
    with pytest.raises(ValueError, match="below the starting number"):
        run_ladder(ladder_steps("int4"), Stub({}), examples=8, max_examples=4)
    with pytest.raises(ValueError, match="at least 2 evaluation examples"):
        run_ladder(ladder_steps("int4"), Stub({}), examples=1)
    for alpha in (0.0, 0.5, -0.1, math.nan):
        with pytest.raises(ValueError, match=r"--alpha must lie strictly between 0 and 0\.5"):
            run_ladder(ladder_steps("int4"), Stub({}), examples=8, alpha=alpha)


# --------------------------------------------------------------------------- the error budget
def test_every_evaluation_is_asked_for_the_split_confidence() -> None:
    """alpha = 0.025 over K steps x L looks: each interval two-sided at 1 - 2 * 0.025 / (K L) (hand values)."""
    stub = Stub({})
    result = run_ladder(ladder_steps("int4"), stub, examples=8)  # 9 steps, one look each
    assert stub.confidences == [pytest.approx(1 - 0.05 / 9, abs=1e-15)] * 9
    f = result.findings()
    assert f["ladder.tests_planned"] == 9 and f["ladder.looks_per_step"] == 1 and f["ladder.rule"] == "bonferroni"
    assert f["ladder.alpha"] == 0.025 and f["ladder.test_confidence"] == pytest.approx(0.994444444444444)
    assert f["ladder.steps.0.confidence"] == pytest.approx(0.994444444444444)
    assert "<= 0.025" in f["ladder.claim"]
    grown = Stub({})
    run_ladder(ladder_steps("int4"), grown, examples=10, grow=True)  # looks at 10, 20, 40: 27 tests
    assert grown.confidences == [pytest.approx(1 - 0.05 / 27, abs=1e-15)] * 9
    one = Stub({"only": "pass"})
    result = run_ladder([Step("only", "int8")], one, examples=8)  # one test: the plain 95 % interval
    assert one.confidences == [0.95] and result.findings()["ladder.test_confidence"] == 0.95
    half = Stub({})
    run_ladder(ladder_steps("int4")[:2], half, examples=8, alpha=0.05)
    assert half.confidences == [pytest.approx(0.95)] * 2


def test_planned_looks_count_the_doublings_within_the_cap() -> None:
    assert planned_looks(8, False, 64) == 1
    assert planned_looks(8, True, 64) == 4  # 8, 16, 32, 64
    assert planned_looks(8, True, 63) == 3
    assert planned_looks(8, True, 20) == 2
    assert planned_looks(8, True, 8) == 1
    assert planned_looks(40, True, None) == 3  # the default cap, 4 x examples


def test_budget_cost_in_examples_matches_the_normal_quantiles() -> None:
    from scipy.stats import norm

    from precisionlab.ptq.ladder import ErrorBudget

    budget = ErrorBudget(0.025, 8, 3)
    assert budget.z == pytest.approx(norm.isf(0.025 / 24), rel=1e-9)
    expected = ((norm.isf(0.025 / 24) + norm.ppf(0.8)) / (norm.isf(0.025) + norm.ppf(0.8))) ** 2
    assert budget.examples_factor() == pytest.approx(expected, rel=1e-9)
    assert ErrorBudget(0.025, 1, 1).examples_factor() == pytest.approx(1.0)


# --------------------------------------------------------------------------- the byte plan
def smollm2_block_bytes(scheme: str) -> int:
    """Hand count of one SmolLM2 block's seven linears (out, in) at int4 with fp16 scales: 4-bit codes of the
    padded rows plus 2 bytes per scale (groups of 64 or 128 along the inputs, or one per row)."""
    shapes = [(576, 576), (192, 576), (192, 576), (576, 576), (1536, 576), (1536, 576), (576, 1536)]
    total = 0
    for out, cols in shapes:
        if scheme == "int4:row":
            total += out * cols // 2 + 2 * out
        else:
            group = int(scheme.rsplit("g", 1)[1])
            groups = -(-cols // group)
            total += out * groups * group // 2 + 2 * out * groups
    return total


def test_the_plan_skips_a_dearer_rung_of_the_same_remedy_and_regroups_the_calibrated_steps() -> None:
    costs = {"int4": 100, "int4:row": 101, "int4:g128": smollm2_block_bytes("int4:g128"),
             "int4:g64": smollm2_block_bytes("int4:g64")}
    assert costs["int4:g128"] > costs["int4:g64"]  # 576 inputs pad to 640 at g128
    asked: list[str] = []

    def bytes_of(step: Step) -> int:
        asked.append(step.name)
        return costs[step.scheme]

    plan = plan_steps(ladder_steps("int4"), bytes_of)
    assert asked == ["per-tensor", "per-channel", "g128", "g64"]  # only the rungs that share a remedy
    assert [s.name for s in plan.steps] == ["per-tensor", "per-channel", "g64", "outliers-fp16", "keep-sensitive",
                                            "gptq-g64", "awq-g64", "int8"]
    assert [s.scheme for s in plan.steps][5:7] == ["int4:g64", "int4:g64"]
    (skip,) = plan.skipped
    assert skip.step.name == "g128" and skip.instead.name == "g64"
    assert skip.bytes == costs["int4:g128"] and skip.instead_bytes == costs["int4:g64"]
    assert "gptq-g64 runs at int4:g64, the scheme of g64 (g128 was skipped)" in plan.notes()
    # widths that are whole groups of 128: g128 is cheaper, nothing is skipped
    even = plan_steps(ladder_steps("int4"), lambda s: {"int4": 1, "int4:row": 2, "int4:g128": 3, "int4:g64": 4}
                      .get(s.scheme, 0))
    assert [s.name for s in even.steps] == [s.name for s in ladder_steps("int4")] and not even.skipped
    # a tie counts as dearer: the later rung tries the same remedy further for no more bytes
    tie = plan_steps(ladder_steps("int4"), lambda s: 5)
    assert [k.step.name for k in tie.skipped] == ["per-tensor", "per-channel", "g128"]
    assert {k.instead.name for k in tie.skipped} == {"g64"}
    assert plan_steps(ladder_steps("int4")).steps == ladder_steps("int4")  # no byte count: unchanged


def test_skipped_rungs_are_in_the_table_and_the_findings() -> None:
    plan = plan_steps(ladder_steps("int4"), lambda s: {"int4": 50, "int4:row": 100, "int4:g128": 300,
                                                       "int4:g64": 200}[s.scheme])
    stub = Stub({"per-channel": "fail", "g64": "pass"})
    result = run_ladder(plan.steps, stub, examples=8, skipped=plan.skipped)
    assert [c[0] for c in stub.calls] == ["per-tensor", "per-channel", "g64"]
    assert stub.confidences[0] == pytest.approx(1 - 0.05 / 8)  # eight planned steps, not nine
    lab = ladder_lab(result, {}, {"name": "m"})
    table = lab.section("steps")
    assert table.column("name") == ["per-tensor", "per-channel", "g128", "g64"]
    assert table.column("verdict")[2] == "SKIPPED" and table.column("step")[2] is None
    assert "g128 skipped: 0.00 MB, not less than the later g64" in table.note
    f = lab.findings
    assert f["ladder.steps_skipped"] == 1 and f["ladder.skipped.0.name"] == "g128"
    assert f["ladder.skipped.0.bytes"] == 300 and f["ladder.skipped.0.instead"] == "g64"
    assert f["ladder.skipped.0.instead_bytes"] == 200 and f["ladder.steps.2.name"] == "g64"
    assert "99.38 % interval" in table.note and lab.figures[0].ylabel.endswith("99.38 % CI")


# --------------------------------------------------------------------------- resuming
def test_finished_steps_are_taken_from_an_earlier_run() -> None:
    first = run_ladder(ladder_steps("int4"), Stub({"g64": "pass"}), examples=8)
    done = first.steps[:2]
    stub = Stub({"g64": "pass"})
    again = run_ladder(ladder_steps("int4"), stub, examples=8, done=done)
    assert stub.calls == [("g128", 8), ("g64", 8)]
    assert [r.resumed for r in again.steps] == [True, True, False, False]
    assert again.findings()["ladder.steps_resumed"] == 2 and again.stopped_at == "g64"
    # a record that does not match the plan's step ends the replay there
    other = [done[0], type(done[1])(1, Step("elsewhere", "int4:row"), done[1].attempts, 1.0)]
    stub = Stub({"g64": "pass"})
    run_ladder(ladder_steps("int4"), stub, examples=8, done=other)
    assert stub.calls[0] == ("per-channel", 8)


def test_the_step_log_round_trips_and_refuses_another_run(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from precisionlab.ptq.ladder import StepLog

    result = run_ladder(ladder_steps("int4"), Stub({"per-tensor": "inconclusive", "g128": "pass"}), examples=8,
                        grow=True, max_examples=16)
    result.steps[0].attempts[0].bits_per_weight = math.nan
    result.steps[1].attempts[0].ci_high = math.inf
    path = tmp_path / "ladder-steps.jsonl"
    log = StepLog(path, {"model": "m", "target": "int4"})
    assert log.open() == []
    for record in result.steps:
        log.append(record)
    log.close()
    with open(path, "ab") as handle:
        handle.write(b'{"kind": "step", "ind')  # a torn last line: dropped
    back = StepLog(path, {"model": "m", "target": "int4"}).open()
    assert len(back) == 3 and [r.step for r in back] == [r.step for r in result.steps]
    for old, new in zip(result.steps, back, strict=True):
        assert len(old.attempts) == len(new.attempts) and new.seconds == old.seconds
        for a, b in zip(old.attempts, new.attempts, strict=True):
            for key, value in vars(a).items():
                other = vars(b)[key]
                nan = isinstance(value, float) and math.isnan(value)
                assert math.isnan(other) if nan else other == value, key
    with pytest.raises(ValueError, match=r"holds the steps of another ladder run \(its target is 'int4', this "
                                         r"run's is 'int8'"):
        StepLog(path, {"model": "m", "target": "int8"}).open()


def test_combine_over_tasks() -> None:
    assert combine({"a": {"verdict": "pass"}, "b": {"verdict": "pass"}}) == "pass"
    assert combine({"a": {"verdict": "pass"}, "b": {"verdict": "inconclusive"}}) == "inconclusive"
    assert combine({"a": {"verdict": "fail"}, "b": {"verdict": "inconclusive"}}) == "fail"


def test_outlier_columns_are_the_largest_magnitudes_and_their_bytes_are_counted() -> None:
    assert outlier_columns([0.1, 9.0, 0.3, 7.0], fraction=0.5).tolist() == [1, 3]
    assert outlier_columns(np.ones(576)).size == math.ceil(0.01 * 576) == 6
    rng = np.random.default_rng(0)
    w = rng.standard_normal((8, 16)).astype(np.float32)
    cols = np.array([2, 11])
    values, nbytes = quantize_with_outliers(w, "int8:row", cols)
    rest = np.delete(w, cols, axis=1)
    q = quantize(rest, "int8:row")
    # kept columns: fp16 values, 2 bytes each, plus a 4-byte int32 index per column
    assert nbytes == q.nbytes + 2 * 8 * 2 + 4 * 2
    np.testing.assert_array_equal(values[:, cols], w[:, cols].astype(np.float16).astype(np.float32))
    np.testing.assert_array_equal(np.delete(values, cols, axis=1), q.dequantize())


# --------------------------------------------------------------------------- one real step
def test_real_steps_on_a_smollm2_slice() -> None:
    from tests.model_helpers import smollm2_slice

    loaded = smollm2_slice()
    from precisionlab.eval.data import builtin_split, calibration_documents
    from precisionlab.ptq import token_batches
    from precisionlab.ptq.ladder.evaluator import ModelEvaluator

    calibration = token_batches(loaded.tokenizer, calibration_documents(builtin_split()), 256, 256)
    evaluator = ModelEvaluator(loaded, ["ppl"], 1.0, calibration, blocks=[1], n_resamples=200)
    before = {n: p.detach().clone() for n, p in loaded.model.named_parameters()}
    plain = evaluator(Step("g64", "int4:g64"), 2)
    kept = evaluator(Step("outliers-fp16", "int4:g64", "outliers"), 2)
    for n, p in loaded.model.named_parameters():  # every step restores the float model
        assert np.array_equal(p.detach().numpy(), before[n].numpy()), n
    assert plain.examples == kept.examples == 2
    assert plain.verdict == implied_verdict(plain.ci_low, plain.ci_high, 1.0)
    assert kept.verdict == implied_verdict(kept.ci_low, kept.ci_high, 1.0)
    assert plain.ci_low <= plain.difference <= plain.ci_high
    # the bytes planned from the shapes are the bytes the evaluation counted, and the hand count
    block = sum(p.numel() * 4 for n, p in loaded.model.named_parameters()
                if n.startswith("model.layers.1.") and n.endswith("proj.weight"))
    assert evaluator.planned_bytes(Step("g64", "int4:g64")) == plain.bytes
    assert plain.bytes == loaded.nbytes - block + smollm2_block_bytes("int4:g64")
    assert evaluator.planned_bytes(Step("outliers-fp16", "int4:g64", "outliers")) == kept.bytes
    assert evaluator.planned_bytes(Step("g128", "int4:g128")) > plain.bytes
    # 7 linears of block 1 at g64; the outlier step stores fewer int4 columns, and per column of 576-wide
    # inputs 6 fp16 columns: bytes = int4 part + 2 * rows * K + 4 * K, more than plain g64
    assert kept.bytes > plain.bytes
    assert plain.alignment == "no"
    with pytest.raises(ValueError, match="would quantize nothing"):
        ModelEvaluator(loaded, ["ppl"], 1.0, calibration, blocks=[0, 3])
    include, exclude = evaluator.selection(Step("s", "int4", keep_sensitive=True))
    assert include == ["model.layers.1.*"] and "model.layers.0.*" in exclude and "model.layers.3.*" in exclude


def test_the_confidence_asked_for_reaches_the_comparison() -> None:
    """evaluate(confidence=) is what the interval is computed at: the step's interval equals
    compare_perplexity on the run's own per-document sums at that confidence, and is wider than at 95 %."""
    from tests.model_helpers import smollm2_slice

    loaded = smollm2_slice()
    from precisionlab.eval import stats
    from precisionlab.eval.data import builtin_split, calibration_documents
    from precisionlab.ptq import token_batches
    from precisionlab.ptq.ladder.evaluator import ModelEvaluator

    calibration = token_batches(loaded.tokenizer, calibration_documents(builtin_split()), 256, 256)
    evaluator = ModelEvaluator(loaded, ["ppl"], 1.0, calibration, blocks=[1], n_resamples=500)
    wide = evaluator(Step("g64", "int4:g64"), 4, 0.99)
    narrow = evaluator(Step("per-channel", "int4:g64"), 4, 0.95)  # the same weights under another name
    run = evaluator.evaluations[0]
    assert run.settings["confidence"] == 0.99 and wide.confidence == 0.99
    task = run.tasks[0]
    cand = task.outcomes[0].per_example
    direct = stats.compare_perplexity(task.arrays["nll"], np.asarray(cand["nll"]), task.arrays["tokens"], 1.0,
                                      cand_tokens=np.asarray(cand["tokens"]), groups=task.spec.groups,
                                      n_resamples=500, seed=0, confidence=0.99)
    assert (wide.ci_low, wide.ci_high) == (direct.interval.low, direct.interval.high)
    assert wide.difference == narrow.difference
    # 4 documents: an end may sit at the most extreme resample at both levels; the interval is wider all the same
    assert wide.ci_low <= narrow.ci_low and wide.ci_high >= narrow.ci_high
    assert wide.ci_high - wide.ci_low > narrow.ci_high - narrow.ci_low


def test_a_user_file_is_not_grown_past_what_it_holds(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """A user task file is not resized: a grown look would evaluate the same documents again, so the evaluator
    says GrowLimit instead (and the ladder moves on)."""
    from tests.model_helpers import smollm2_slice

    loaded = smollm2_slice()
    from precisionlab.eval.data import builtin_split, calibration_documents
    from precisionlab.ptq import token_batches
    from precisionlab.ptq.ladder.evaluator import ModelEvaluator

    own = tmp_path / "own.jsonl"
    own.write_text("\n".join(json.dumps({"text": f"Note {i}: zebras graze by the river while herons wait. " * 3})
                             for i in range(3)))
    calibration = token_batches(loaded.tokenizer, calibration_documents(builtin_split()), 256, 256)
    evaluator = ModelEvaluator(loaded, [str(own)], 1.0, calibration, blocks=[1], n_resamples=200)
    first = evaluator(Step("g64", "int4:g64"), 3)
    assert first.examples == 3
    with pytest.raises(GrowLimit, match="task 'own' holds 3 examples"):
        evaluator(Step("g64", "int4:g64"), 6)
    assert len(evaluator.evaluations) == 1
    again = evaluator(Step("g64", "int4:g64"), 3)  # the same look again is not growing: evaluated, same numbers
    assert (again.difference, again.ci_low, again.ci_high) == (first.difference, first.ci_low, first.ci_high)


@pytest.mark.slow  # 7-13 s; a sibling test covers the same path in the default suite
def test_the_awq_step_installs_its_folds_and_restores_the_float_model() -> None:
    """AWQ folds its scales into the RMSNorm weights (and v_proj / up_proj rows) before quantizing: the
    step must change the model while it is evaluated and give every parameter back bit for bit. Its
    bytes must equal plain RTN at the same scheme on the same layers (the same codes and scales are
    stored; the folded norms are the same tensors at the same width)."""
    from tests.model_helpers import smollm2_slice

    loaded = smollm2_slice()
    from precisionlab.eval.data import builtin_split, calibration_documents
    from precisionlab.ptq import token_batches
    from precisionlab.ptq.ladder.evaluator import ModelEvaluator

    calibration = token_batches(loaded.tokenizer, calibration_documents(builtin_split()), 256, 256)
    evaluator = ModelEvaluator(loaded, ["ppl"], 1.0, calibration, blocks=[1], n_resamples=200)
    before = {n: p.detach().clone() for n, p in loaded.model.named_parameters()}
    awq_step = next(s for s in ladder_steps("int4") if s.method == "awq")
    awq = evaluator(awq_step, 2)
    rtn = evaluator(Step("rtn-g128", awq_step.scheme, "rtn", True), 2)
    for n, p in loaded.model.named_parameters():
        assert np.array_equal(p.detach().numpy(), before[n].numpy()), n
    assert awq.bytes == rtn.bytes
    assert awq.difference != rtn.difference  # AWQ's weights are not RTN's
    assert awq.ci_low <= awq.difference <= awq.ci_high
    assert awq.verdict == implied_verdict(awq.ci_low, awq.ci_high, 1.0)
    assert rtn.verdict == implied_verdict(rtn.ci_low, rtn.ci_high, 1.0)
    assert evaluator.planned_bytes(awq_step) == awq.bytes
    run = evaluator.evaluations[0].candidates[0]
    assert run.quantized_layers == 7  # block 1's seven linears


def test_a_step_on_the_sources_own_grid_is_marked_and_not_stopped_at() -> None:
    """SmolLM2's block linears are Q4_1: re-quantizing them with gguf_q4_1 changes no weight (difference 0,
    a PASS that proves nothing); the ladder must report it grid-aligned and go on to the next step."""
    from tests.model_helpers import smollm2_slice

    loaded = smollm2_slice()
    from precisionlab.eval.data import builtin_split, calibration_documents
    from precisionlab.ptq import token_batches
    from precisionlab.ptq.ladder.evaluator import ModelEvaluator

    calibration = token_batches(loaded.tokenizer, calibration_documents(builtin_split()), 256, 256)
    evaluator = ModelEvaluator(loaded, ["ppl"], 1.0, calibration, blocks=[1], n_resamples=200)
    steps = [Step("source-grid", "gguf_q4_1"), Step("per-tensor", "int4")]
    result = run_ladder(steps, evaluator, examples=2)
    aligned = result.steps[0]
    assert aligned.outcome.grid_aligned and aligned.outcome.alignment == "aligned"
    assert aligned.outcome.difference == 0.0 and aligned.verdict == "grid-aligned"
    assert len(result.steps) == 2 and result.stopped_at != "source-grid"
    assert not result.steps[1].outcome.grid_aligned


def test_the_gptq_step_runs_block_by_block_on_the_partly_quantized_model() -> None:
    """The ladder's GPTQ step calibrates each block with the blocks before it quantized (sequential="block"):
    its weights are those of run_method with that option, and differ from one capture on the float model."""
    from tests.model_helpers import smollm2_slice

    loaded = smollm2_slice()
    from precisionlab.eval.data import builtin_split, calibration_documents
    from precisionlab.ptq import CalibrationWarning, run_method, token_batches
    from precisionlab.ptq.ladder.evaluator import ModelEvaluator

    calibration = token_batches(loaded.tokenizer, calibration_documents(builtin_split()), 256, 256)
    evaluator = ModelEvaluator(loaded, ["ppl"], 1.0, calibration, n_resamples=200)
    gptq_step = next(s for s in ladder_steps("int4") if s.method == "gptq")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", CalibrationWarning)
        evaluator(gptq_step, 2)
        (run,) = evaluator._calibrated_runs.values()
        names = [r.name for r in run.layers]
        assert names[0].startswith("model.layers.1.") and names[-1].startswith("model.layers.2.")  # keep-sensitive
        by_block = run_method(loaded.model, "gptq", gptq_step.scheme, calibration, layers=names,
                              options={"sequential": "block"})
        one_capture = run_method(loaded.model, "gptq", gptq_step.scheme, calibration, layers=names)
    assert run.options["sequential"] == "block"
    assert all(np.array_equal(run.quantized[n].packed, by_block.quantized[n].packed) for n in names)
    assert any(not np.array_equal(run.quantized[n].packed, one_capture.quantized[n].packed) for n in names)
