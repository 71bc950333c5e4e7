"""The escalation ladder: step order and the stop rule on a stub evaluator whose verdicts the tests choose
(INCONCLUSIVE + --grow, grid-aligned steps, nothing passing), the findings keys, the outlier-column step's
values and bytes, and one real step on a SmolLM2 slice."""

from __future__ import annotations

import json
import math
import warnings

import numpy as np
import pytest

from precisionlab.labs.ptq import ladder_lab
from precisionlab.ptq.ladder import (
    QAT,
    GrowLimit,
    Step,
    StepOutcome,
    combine,
    ladder_steps,
    outlier_columns,
    quantize_with_outliers,
    run_ladder,
)
from precisionlab.quant import quantize


def outcome(verdict: str, examples: int = 8, *, aligned: bool = False, needed: int | None = None) -> StepOutcome:
    return StepOutcome(verdict=verdict, difference=0.5, ci_low=0.1, ci_high=0.9, bytes=1000, examples=examples,
                       examples_needed=needed, grid_aligned=aligned, alignment="aligned" if aligned else "no",
                       tasks={"ppl": {"difference": 0.5, "ci_low": 0.1, "ci_high": 0.9, "verdict": verdict}})


class Stub:
    """Verdicts by step name (a callable of the number of examples, or a fixed verdict); records each call."""

    def __init__(self, verdicts: dict[str, object], aligned: frozenset[str] = frozenset()) -> None:
        self.verdicts, self.aligned = verdicts, aligned
        self.calls: list[tuple[str, int]] = []

    def __call__(self, step: Step, examples: int) -> StepOutcome:
        self.calls.append((step.name, examples))
        rule = self.verdicts.get(step.name, "fail")
        verdict = rule(examples) if callable(rule) else rule
        return outcome(str(verdict), examples, aligned=step.name in self.aligned, needed=64)


def test_the_steps_climb_in_the_issue_order() -> None:
    steps = ladder_steps("int4")
    assert [s.name for s in steps] == ["per-tensor", "per-channel", "g128", "g64", "outliers-fp16", "keep-sensitive",
                                       "gptq-g128", "awq-g128", "int8"]
    assert [s.scheme for s in steps] == ["int4", "int4:row", "int4:g128", "int4:g64", "int4:g64", "int4:g64",
                                         "int4:g128", "int4:g128", "int8:row"]
    assert [s.method for s in steps][4:9] == ["outliers", "outliers", "gptq", "awq", "rtn"]
    assert [s.keep_sensitive for s in steps] == [False] * 5 + [True] * 4
    assert ladder_steps("fp4")[0].scheme == "e2m1" and ladder_steps("fp4")[-1].scheme == "e4m3:row"
    assert ladder_steps("int8")[-1].name == "int16"
    for bad in ("int5", "int4:g128", "nvfp4", ""):
        with pytest.raises(ValueError, match="ladder target must be a bit width"):
            ladder_steps(bad)


def test_it_stops_at_the_first_pass_and_keeps_every_step_before() -> None:
    stub = Stub({"g128": "fail", "g64": "pass", "int8": "pass"})
    result = run_ladder(ladder_steps("int4"), stub, examples=8)
    assert result.stopped_at == "g64"
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
    def evaluate(step: Step, n: int) -> StepOutcome:
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
    from precisionlab.ptq.ladder import ModelEvaluator

    calibration = token_batches(loaded.tokenizer, calibration_documents(builtin_split()), 256, 256)
    evaluator = ModelEvaluator(loaded, ["ppl"], 1.0, calibration, blocks=[1], n_resamples=200)
    before = {n: p.detach().clone() for n, p in loaded.model.named_parameters()}
    plain = evaluator(Step("g64", "int4:g64"), 2)
    kept = evaluator(Step("outliers-fp16", "int4:g64", "outliers"), 2)
    for n, p in loaded.model.named_parameters():  # every step restores the float model
        assert np.array_equal(p.detach().numpy(), before[n].numpy()), n
    assert plain.examples == kept.examples == 2 and plain.verdict in ("pass", "fail", "inconclusive")
    assert plain.ci_low <= plain.difference <= plain.ci_high
    # 7 linears of block 1 at g64; the outlier step stores fewer int4 columns, and per column of 576-wide
    # inputs 6 fp16 columns: bytes = int4 part + 2 * rows * K + 4 * K, more than plain g64
    assert kept.bytes > plain.bytes
    assert plain.alignment == "no"
    with pytest.raises(ValueError, match="would quantize nothing"):
        ModelEvaluator(loaded, ["ppl"], 1.0, calibration, blocks=[0, 3])
    include, exclude = evaluator.selection(Step("s", "int4", keep_sensitive=True))
    assert include == ["model.layers.1.*"] and "model.layers.0.*" in exclude and "model.layers.3.*" in exclude


def test_the_awq_step_installs_its_folds_and_restores_the_float_model() -> None:
    """AWQ folds its scales into the RMSNorm weights (and v_proj / up_proj rows) before quantizing: the
    step must change the model while it is evaluated and give every parameter back bit for bit. Its
    bytes must equal plain RTN at the same scheme on the same layers (the same codes and scales are
    stored; the folded norms are the same tensors at the same width)."""
    from tests.model_helpers import smollm2_slice

    loaded = smollm2_slice()
    from precisionlab.eval.data import builtin_split, calibration_documents
    from precisionlab.ptq import token_batches
    from precisionlab.ptq.ladder import ModelEvaluator

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
    assert awq.ci_low <= awq.difference <= awq.ci_high and awq.verdict in ("pass", "fail", "inconclusive")
    run = evaluator.evaluations[0].candidates[0]
    assert run.quantized_layers == 7  # block 1's seven linears


def test_a_step_on_the_sources_own_grid_is_marked_and_not_stopped_at() -> None:
    """SmolLM2's block linears are Q4_1: re-quantizing them with gguf_q4_1 changes no weight (difference 0,
    a PASS that proves nothing); the ladder must report it grid-aligned and go on to the next step."""
    from tests.model_helpers import smollm2_slice

    loaded = smollm2_slice()
    from precisionlab.eval.data import builtin_split, calibration_documents
    from precisionlab.ptq import token_batches
    from precisionlab.ptq.ladder import ModelEvaluator

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
    from precisionlab.ptq.ladder import ModelEvaluator

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
