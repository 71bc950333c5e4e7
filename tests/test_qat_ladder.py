"""The ladder's QAT rung (`ladder --qat-steps N --no-widen`): the rung in the plan, refused for float targets, and a
real climb on the tiny random llama that reaches it (the steps before it made to fail) and reports it as a step with
its evidence, trained from the better of GPTQ and AWQ, its codes saved for export."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from tests.test_eval_cli import one_line_error


def test_the_qat_rung_comes_after_awq_and_no_widen_drops_the_width_rung() -> None:
    from precisionlab.ptq.ladder import ladder_steps, plan_steps

    plain = [s.name for s in ladder_steps("int4")]
    assert plain[-1] == "int8" and "qat-g128" not in plain
    steps = ladder_steps("int4", qat_steps=50, widen=False)
    assert [s.name for s in steps] == [*plain[:-1], "qat-g128"]
    qat = steps[-1]
    assert (qat.method, qat.scheme, qat.keep_sensitive, qat.groups_of) == ("qat", "int4:g128", True, "g128")
    assert [s.name for s in ladder_steps("int4", qat_steps=50)][-2:] == ["qat-g128", "int8"]
    assert [s.name for s in ladder_steps("int4", widen=False)] == plain[:-1]
    planned = plan_steps(steps, lambda s: {"int4:g128": 9}.get(s.scheme, 5))  # g128 dearer than g64: regrouped
    assert [s.name for s in planned.steps][-3:] == ["gptq-g64", "awq-g64", "qat-g64"]
    with pytest.raises(ValueError, match=r"--qat-steps: .*float width"):
        ladder_steps("fp4", qat_steps=5)


@pytest.mark.parametrize(("args", "message"), [
    (("--qat-steps", "-1"), "--qat-steps must be 0"),
    (("--target", "fp8", "--qat-steps", "5"), "target 'fp8' is a float width"),
])
def test_ladder_qat_bad_input_is_one_line(run_cli, args: tuple[str, ...], message: str) -> None:  # type: ignore[no-untyped-def]
    one_line_error(run_cli("ladder", "--model", "no-such-model", *args), message)


def test_the_ladder_reaches_the_qat_rung_and_reports_its_evidence(run_cli, tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from precisionlab.export.results import read_result
    from precisionlab.ptq.ladder import ModelEvaluator
    from precisionlab.ptq.ladder.climb import FAIL, QAT_TRIED
    from precisionlab.quant.safetensors_io import load_quantized
    from tests.export_helpers import tiny_model_dir

    real = ModelEvaluator.__call__

    def fail_before_qat(self, step, examples, confidence=0.95):  # type: ignore[no-untyped-def]
        outcome = real(self, step, examples, confidence)
        if step.method != "qat":  # every step before the rung fails, so the climb reaches it
            outcome.verdict = FAIL
        return outcome

    monkeypatch.setattr(ModelEvaluator, "__call__", fail_before_qat)
    model = tiny_model_dir(tmp_path / "m", "llama", layers=3)
    out = tmp_path / "ladder"
    ran = run_cli("ladder", "--model", str(model), "--target", "int4", "--max-drop", "1", "--examples", "2",
                  "--calib-size", "256", "--resamples", "100", "--qat-steps", "4", "--no-widen", "--threads", "1",
                  "--out", str(out), "--json")
    assert ran.exit_code == 0, ran.output
    findings = json.loads((out / "ladder.json").read_text())["findings"]
    tried = findings["ladder.steps_tried"]
    names = [findings[f"ladder.steps.{i}.name"] for i in range(tried)]
    assert names[-1] == "qat-g64" and "int8" not in names
    last = f"ladder.steps.{tried - 1}"
    assert findings[f"{last}.method"] == "qat" and findings[f"{last}.scheme"] == "int4:g64"
    assert findings[f"{last}.verdict"] in ("pass", "fail", "inconclusive")
    assert findings[f"{last}.ci_low"] <= findings[f"{last}.difference"] <= findings[f"{last}.ci_high"]
    assert findings[f"{last}.exclude"] == "lm_head,*embed*,model.layers.0.*,model.layers.2.*"
    if findings[f"{last}.verdict"] != "pass":
        assert findings["ladder.remaining_option"] == QAT_TRIED
    calibrated = {findings[f"ladder.steps.{i}.name"]: findings[f"ladder.steps.{i}.difference"] for i in range(tried)
                  if findings[f"ladder.steps.{i}.method"] in ("gptq", "awq")}
    best = min(calibrated, key=lambda n: calibrated[n])
    assert f"qat-g64: 4 QAT steps from {best}" in ran.stderr
    stored = load_quantized(out / findings[f"{last}.weights"])
    assert sorted({n.split(".")[2] for n in stored}) == ["1"]
    recipe = read_result(out / "ladder.json", step=tried - 1)
    assert recipe.method == "qat" or recipe.folds  # an AWQ start ships its folds with the codes
    assert sorted(recipe.stored) == sorted(stored)


def test_the_rung_starts_from_the_best_calibrated_step_and_reruns_a_resumed_one() -> None:
    """QATStep.start: the GPTQ / AWQ step at the rung's scheme with the smallest difference; its result from the
    evaluator, or (a step resumed from the ladder's log) computed again by `calibrated_result`."""
    from precisionlab.ptq.ladder import ladder_steps
    from precisionlab.qat.ladder_step import QATStep

    steps = {s.name: s for s in ladder_steps("int4", qat_steps=5)}
    gptq, awq, keep, rung = steps["gptq-g128"], steps["awq-g128"], steps["keep-sensitive"], steps["qat-g128"]

    class Result:
        def __init__(self, name: str) -> None:
            self.quantized = {"layer": name}
            self.folds: list = []  # type: ignore[type-arg]

    class Evaluator:
        def __init__(self) -> None:
            self.tried = {"keep-sensitive": (keep, 0.1), "gptq-g128": (gptq, 5.0), "awq-g128": (awq, 3.0)}
            self.step_results = {"gptq-g128": Result("gptq")}
            self.rerun: list[str] = []

        def calibrated_result(self, model, step, selected):  # type: ignore[no-untyped-def]
            self.rerun.append(step.name)
            return Result(step.method)

    evaluator = Evaluator()
    qat = QATStep(5)
    start = qat.start(evaluator, None, rung, {})
    assert (start.method, start.stored, evaluator.rerun) == ("awq", {"layer": "awq"}, ["awq-g128"])
    assert qat.started_from["qat-g128"] == "awq-g128"  # the outlier step (0.1) is no starting point
    evaluator.tried["gptq-g128"] = (gptq, 1.0)
    assert qat.start(evaluator, None, rung, {}).stored == {"layer": "gptq"}
    evaluator.tried = {"keep-sensitive": (keep, 0.1)}
    assert qat.start(evaluator, None, rung, {}) is None and qat.started_from["qat-g128"] == "rtn"


def test_ladder_speed_measures_the_rungs_trained_codes() -> None:
    """`ladder --speed`: the QAT rung's view runs the codes it trained (weights only), not the outlier message."""
    pytest.importorskip("torch")
    from precisionlab.ptq.ladder import ladder_steps
    from precisionlab.ptq.ladder.speed import step_candidate
    from precisionlab.quant import quantize

    rung = ladder_steps("int4", qat_steps=5)[-2]
    codes = {"model.layers.1.mlp.up_proj": quantize(np.ones((4, 64), dtype=np.float32), "int4:g64")}

    class Trained:
        scheme, quantized, folds = "int4:g64", codes, []  # type: ignore[var-annotated]

    class Evaluator:
        def __init__(self, results: dict) -> None:  # type: ignore[type-arg]
            self.methods = {"qat": object()}
            self.step_results = results

    view = step_candidate(Evaluator({rung.name: Trained()}), rung)
    assert view.quantized == codes and view.prepare is not None
    assert "resumed from the log" in step_candidate(Evaluator({}), rung).reason
