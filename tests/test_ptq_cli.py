"""`precisionlab ptq` and `precisionlab ladder` through the CLI runner: bad input is one line and exit 2 before
any model loads; calibration data that overlaps the evaluation data is refused; the JSON keys of a real run;
--save read back with precisionlab's reader; the prepared candidate restores the model bit for bit."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import numpy as np
import pytest

from tests.model_helpers import tiny_llama
from tests.test_eval_cli import one_line_error


@pytest.mark.parametrize(("args", "message"), [
    (("--method", "llm_int8", "--scheme", "int4:g128"), "LLM.int8() is a fixed recipe"),
    (("--method", "gptq"), "gptq needs a scheme"),
    (("--method", "smoothquant", "--scheme", "int4"), "8-bit"),
    (("--method", "kivi", "--scheme", "int3"), "KIVI"),
    (("--method", "kivi", "--scheme", "int4:g128"), "KIVI takes a bit width only"),
    (("--method", "gptq", "--scheme", "gguf_q4_k"), "GPTQ does not apply to scheme gguf_q4_k"),
    (("--method", "gptq", "--scheme", "int4:g32:axis=0"), "GPTQ does not apply"),
    (("--method", "gptq", "--scheme", "int4:g128", "--set", "dampp=0.1"), "unknown option 'dampp' for gptq"),
    (("--method", "gptq", "--scheme", "int4:g128", "--set", "damp"), "--set: expected KEY=VALUE"),
    (("--method", "gptq", "--scheme", "int4:g128", "--set", "sequential=yes"), "sequential must be one of off, "
                                                                              "block, layer"),
    (("--method", "rtn", "--scheme", "int4", "--blocks", "a,b"), "--blocks: expected block numbers"),
    (("--method", "rtn", "--scheme", "int4", "--calib-size", "0"), "--calib-size must be a positive"),
    (("--method", "rtn", "--scheme", "int4", "--max-drop", "-1"), "--max-drop must be a finite number"),
    (("--method", "rtn", "--scheme", "int4", "--save", "w.bin"), "must end in .safetensors"),
    (("--method", "llm_int8", "--save", "w.safetensors"), "--save writes weights; llm_int8"),
    (("--method", "rtn", "--scheme", "int4", "--calib-data", "missing.txt"), "--calib-data: no such file"),
    (("--method", "rtn", "--scheme", "int9"), "unknown element or preset 'int9'"),
    (("--method", "kivi", "--scheme", "int4", "--eval-tasks", "ppl,choice"), "kivi's task-level evaluation scores "
                                                                             "perplexity only"),
])
def test_ptq_bad_input_is_one_line_before_loading(run_cli, args: tuple[str, ...], message: str) -> None:  # type: ignore[no-untyped-def]
    one_line_error(run_cli("ptq", "--model", "no-such-model", *args), message)


def test_ptq_without_a_method_names_the_choices_in_one_line(run_cli) -> None:  # type: ignore[no-untyped-def]
    one_line_error(run_cli("ptq", "--model", "no-such-model"),
                   "--method is required: choose one of rtn, gptq, awq, smoothquant, llm_int8, kivi")


def test_every_output_path_is_checked_before_the_model_loads(run_cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """--save into a missing folder, under a file or into a folder that takes no file, and --out under a file:
    exit 2 and one line, before 'no-such-model' is looked up (it would fail with another message)."""
    import os

    a_file = tmp_path / "a_file"
    a_file.write_text("x")
    base = ("ptq", "--model", "no-such-model", "--method", "gptq", "--scheme", "int4:g128")
    one_line_error(run_cli(*base, "--save", str(tmp_path / "missing" / "w.safetensors")), "does not exist")
    one_line_error(run_cli(*base, "--save", str(a_file / "w.safetensors")), "is not a folder")
    one_line_error(run_cli(*base, "--save", str(tmp_path)), "is a directory")
    one_line_error(run_cli(*base, "--out", str(a_file / "out")), "cannot write")
    if os.geteuid() != 0:  # root writes into a read-only folder anyway
        locked = tmp_path / "locked"
        locked.mkdir()
        locked.chmod(0o555)
        try:
            one_line_error(run_cli(*base, "--save", str(locked / "w.safetensors")), "cannot write in")
        finally:
            locked.chmod(0o755)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a_file"] + (["locked"] if os.geteuid() != 0 else [])


@pytest.mark.parametrize(("args", "message"), [
    (("--target", "int5"), "ladder target must be a bit width"),
    (("--target", "int4:g128"), "ladder target must be a bit width"),
    (("--examples", "8", "--max-examples", "4"), "below the starting number"),
    (("--examples", "1"), "at least 2 evaluation examples"),
    (("--max-drop", "nan"), "--max-drop must be a finite number"),
    (("--blocks", "3-1"), "--blocks: expected non-negative block numbers"),
    (("--tasks", "nope.jsonl"), "unknown task 'nope.jsonl'"),
])
def test_ladder_bad_input_is_one_line_before_loading(run_cli, args: tuple[str, ...], message: str) -> None:  # type: ignore[no-untyped-def]
    one_line_error(run_cli("ladder", "--model", "no-such-model", *args), message)


def test_calibration_that_overlaps_the_evaluation_is_refused(run_cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    from precisionlab.eval.data import builtin_split

    evaluation = builtin_split().evaluation[3].text
    copied = tmp_path / "copied.txt"  # a passage of the built-in evaluation part, re-wrapped and re-cased
    copied.write_text("Some notes of my own about nothing in particular.\n\n" + evaluation[:1500].upper())
    one_line_error(run_cli("ptq", "--model", "no-such-model", "--method", "rtn", "--scheme", "int4",
                           "--calib-data", str(copied)), "--calib-data overlaps the evaluation data, refused")
    # the same file as calibration and as an evaluation task
    own = tmp_path / "own.jsonl"
    own.write_text("\n".join(json.dumps({"text": f"Entry {i}: " + "unrelated words " * 40}) for i in range(3)))
    one_line_error(run_cli("ptq", "--model", "no-such-model", "--method", "rtn", "--scheme", "int4",
                           "--calib-data", str(own), "--eval-tasks", str(own)), "come from the same source")
    # a choice file for calibration is the wrong kind of data
    choice = tmp_path / "choice.jsonl"
    choice.write_text(json.dumps({"context": "a", "choices": ["b", "c"], "gold": 0}))
    one_line_error(run_cli("ptq", "--model", "no-such-model", "--method", "rtn", "--scheme", "int4",
                           "--calib-data", str(choice)), "calibration needs text")


def test_calibration_of_unrelated_text_is_accepted() -> None:
    from precisionlab.cli.ptq import check_calibration
    from precisionlab.eval.data import Document

    check_calibration([Document("mine", "Zebras graze quietly beside the river while herons wait. " * 30,
                                source="/tmp/mine.txt")], ["ppl"])


# --------------------------------------------------------------------------- save and install, on a tiny Llama
@pytest.fixture(scope="module")
def tiny():  # type: ignore[no-untyped-def]
    return tiny_llama(2)


def _batches(n: int = 3, length: int = 48):  # type: ignore[no-untyped-def]
    import torch

    g = torch.Generator().manual_seed(0)
    return [torch.randint(0, 128, (1, length), generator=g) for _ in range(n)]


@pytest.mark.parametrize("method", ["gptq", "awq"])
def test_save_round_trips_through_the_reader(tiny, tmp_path: Path, method: str) -> None:  # type: ignore[no-untyped-def]
    from precisionlab.cli.ptq import save_weights
    from precisionlab.ptq import CalibrationWarning, run_method
    from precisionlab.quant.safetensors_io import load_passthrough, load_quantized

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", CalibrationWarning)
        result = run_method(tiny, method, "int4:g32", _batches(), blocks=[0])
    path = tmp_path / "w.safetensors"
    save_weights(result, path)
    back = load_quantized(path)
    assert sorted(back) == sorted(result.quantized)
    for name, q in result.quantized.items():
        assert str(back[name].scheme) == str(q.scheme) and back[name].shape == q.shape
        np.testing.assert_array_equal(back[name].dequantize(), q.dequantize())
        np.testing.assert_array_equal(back[name].codes, q.codes)
    kept = load_passthrough(path)
    assert sorted(kept) == sorted(f"{g.prev}.awq_scales" for g, _ in result.folds)
    for group, scales in result.folds:
        np.testing.assert_array_equal(kept[f"{group.prev}.awq_scales"].array, scales)
    if method == "awq":
        assert result.folds, "AWQ folded no scale on the tiny Llama"


def test_a_prepared_candidate_installs_counts_and_restores(tiny) -> None:  # type: ignore[no-untyped-def]
    import torch

    from precisionlab.ptq import CalibrationWarning, run_method
    from precisionlab.ptq.install import ptq_candidate

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", CalibrationWarning)
        result = run_method(tiny, "awq", "int4:g32", _batches(), blocks=[1])
    before = {n: p.detach().clone() for n, p in tiny.named_parameters()}
    candidate = ptq_candidate(result)
    assert candidate.label == "awq:int4:g32" and candidate.weights == "int4:g32"
    report = candidate.prepare(tiny, (), None)
    modules = dict(tiny.named_modules())
    for name, q in result.quantized.items():
        assert torch.equal(modules[name].weight.detach(), torch.from_numpy(q.dequantize()))
    stored = sum(q.nbytes for q in result.quantized.values())
    others = sum(p.numel() * 4 for n, p in tiny.named_parameters()
                 if n.rsplit(".", 1)[0] not in result.quantized)
    assert report.model_bytes == stored + others
    assert len(report.quantized) == len(result.quantized) and report.alignment == "no"
    report.restore()
    for n, p in tiny.named_parameters():
        assert torch.equal(p.detach(), before[n]), n
    with pytest.raises(ValueError, match="no evaluation candidate for PTQ method 'bogus'"):
        ptq_candidate(type(result)("bogus", "int8", []))


# --------------------------------------------------------------------------- a real run
def test_ptq_json_keys_on_smollm2(run_cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    from tests.model_helpers import smollm2

    smollm2()  # skips without the packaged model; warms the conversion cache
    out = run_cli("ptq", "--method", "gptq", "--scheme", "int4:g128", "--blocks", "0", "--calib-size", "256",
                  "--no-eval", "--json", "--threads", "1")
    assert out.exit_code == 0, out.output
    data = json.loads(out.stdout)
    f = data["findings"]
    for key in ("layers_total", "layers_improved", "output_error_ratio", "seconds", "peak_mb"):
        assert f"ptq.gptq.{key}" in f
    assert f["ptq.gptq.layers_total"] == 7
    name = "model.layers.0.mlp.down_proj"
    assert f[f"ptq.gptq.layers.{name}.output_error"] < f[f"ptq.rtn.layers.{name}.output_error"]
    assert "256 calibration tokens for 576 inputs" in out.stderr and "warning: " in out.stderr
    assert [s["key"] for s in data["sections"]][:2] == ["layers", "summary"]


@pytest.mark.parametrize(("method", "scheme", "baseline"), [
    pytest.param("llm_int8", "int8", "int8:row:scale=fp32+act=int8:row:scale=fp32", marks=pytest.mark.slow),
    pytest.param("smoothquant", "int8", "int8+act=int8:row", marks=pytest.mark.slow),
    pytest.param("kivi", "int4", None, marks=pytest.mark.slow),
])
def test_ptq_evaluates_the_forward_time_methods_on_smollm2(run_cli, method: str, scheme: str,
                                                           baseline: str | None) -> None:  # type: ignore[no-untyped-def]
    """The task table of a method that changes the forward computation: difference, CI and verdict for the
    method and its baseline, and the note of what was installed (no 'not run' message)."""
    from tests.model_helpers import smollm2

    smollm2()
    out = run_cli("ptq", "--method", method, "--scheme", scheme, "--blocks", "0", "--calib-size", "256",
                  "--eval-size", "0.25", "--threads", "1", "--json")
    assert out.exit_code == 0, out.output
    data = json.loads(out.stdout)
    f = data["findings"]
    label = next(k.split(".", 2)[2].rsplit(".", 1)[0] for k in f if k.startswith(f"eval.ppl.{method}:")
                 and k.endswith(".verdict"))
    max_drop = 1.0  # the command's default threshold: percent increase of perplexity
    for name in [label] + ([baseline] if baseline else []):
        low, high = f[f"eval.ppl.{name}.ci_low"], f[f"eval.ppl.{name}.ci_high"]
        assert low <= f[f"eval.ppl.{name}.difference"] <= high
        # the verdict the interval and the threshold imply (lower is better): the whole interval below, above
        implied = "pass" if high < max_drop else "fail" if low > max_drop else "inconclusive"
        assert f[f"eval.ppl.{name}.verdict"] == implied
    assert f[f"eval.ppl.{label}.ppl"] != f["eval.ppl.reference.ppl"]  # the forward-time part is installed
    notes = [row[0] for s in data["sections"] if s["key"] == "eval_skipped" for row in s["rows"]]
    assert notes and notes[0].startswith(f"{method}:") and "not run" not in out.stdout


@pytest.mark.slow
def test_ladder_end_to_end_on_smollm2(run_cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    from tests.model_helpers import smollm2

    smollm2()
    out_dir = tmp_path / "ladder"
    out = run_cli("ladder", "--blocks", "1", "--examples", "2", "--calib-size", "512", "--resamples", "200",
                  "--threads", "1", "--json", "--out", str(out_dir))
    assert out.exit_code == 0, out.output
    f = json.loads(out.stdout)["findings"]
    tried = f["ladder.steps_tried"]
    assert f["ladder.stopped_at"] in ("none", f[f"ladder.steps.{tried - 1}.name"])
    for i in range(tried):
        for key in ("name", "scheme", "bytes", "difference", "ci_low", "ci_high", "verdict"):
            assert f"ladder.steps.{i}.{key}" in f
        assert f[f"ladder.steps.{i}.ci_low"] <= f[f"ladder.steps.{i}.difference"] <= f[f"ladder.steps.{i}.ci_high"]
    assert {p.name for p in out_dir.iterdir()} >= {"ladder.json", "ladder_difference_bytes.png", "ladder.html"}


def test_the_ptq_report_says_when_rtn_already_reproduces_the_weights() -> None:
    """A scheme whose grid holds the source weights (gguf_q4_1 on SmolLM2): 0 layers 'improved' is not a
    failure of the method, and the summary says why."""
    from precisionlab.labs.ptq import ptq_lab
    from precisionlab.ptq.records import LayerRecord, PTQResult

    layers = [LayerRecord("a", (2, 2), output_error=0.0, rtn_output_error=0.0),
              LayerRecord("b", (2, 2), output_error=0.1, rtn_output_error=0.2)]
    lab = ptq_lab(PTQResult("gptq", "gguf_q4_1", layers), {"model": "m"})
    assert "RTN reproduces 1/2 layers exactly" in lab.summary
    assert "RTN reproduces" in lab.sections[0].note
    plain = ptq_lab(PTQResult("gptq", "int4", layers[1:]), {"model": "m"})
    assert "RTN reproduces" not in plain.summary
