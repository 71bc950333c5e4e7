"""`precisionlab ladder` through the CLI runner without loading a model: --blocks checked from the model's
config before it loads (the GGUF header read against gguf's own writer and reader), --quick and --alpha,
and Ctrl-C: the finished steps kept in --out and resumed by the next run (the model's climb replaced by a
stub evaluator behind the real plan, log and ladder)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from precisionlab.ptq.ladder import Step, StepOutcome
from tests.saved_results import StubEvaluator
from tests.test_eval_cli import one_line_error


def _no_loading(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("the model was loaded")

    monkeypatch.setattr("precisionlab.cli.ptq.load_causal_lm", refuse)
    monkeypatch.setattr("precisionlab.models.load_model", refuse)


# --------------------------------------------------------------------------- --blocks before loading
def test_block_zero_alone_is_refused_before_anything_loads(run_cli, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    _no_loading(monkeypatch)
    one_line_error(run_cli("ladder", "--model", "no-such-model", "--blocks", "0"), "--blocks 0: the steps that keep")


def test_blocks_are_checked_against_the_gguf_header(run_cli, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    from tests.model_helpers import require_packaged

    require_packaged("smollm2-135m")
    _no_loading(monkeypatch)
    one_line_error(run_cli("ladder", "--blocks", "0,29"), "would quantize nothing; include a block between 1 and 28")
    one_line_error(run_cli("ladder", "--blocks", "29"), "would quantize nothing")
    one_line_error(run_cli("ladder", "--blocks", "1,30"), "block 30 does not exist: the model has blocks 0..29")


def test_the_header_walk_reads_what_gguf_wrote(tmp_path: Path) -> None:
    gguf = pytest.importorskip("gguf")
    from precisionlab.cli.ladder import block_count, gguf_block_count

    path = tmp_path / "m.gguf"
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_string("general.name", "tiny")
    writer.add_array("tokenizer.ggml.tokens", [f"tok{i}" for i in range(300)])  # an array of strings first
    writer.add_array("some.floats", [0.5, 1.5, 2.5])
    writer.add_uint32("other.block_count", 7)  # another architecture's key is not the answer
    writer.add_block_count(12)
    writer.add_context_length(256)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.close()
    reader = gguf.GGUFReader(str(path))
    assert int(reader.fields["llama.block_count"].contents()) == 12
    assert gguf_block_count(path) == 12
    assert block_count(str(path)) == 12
    damaged = tmp_path / "damaged.gguf"
    damaged.write_bytes(path.read_bytes()[:100])
    assert block_count(str(damaged)) is None  # the loader reports it
    assert block_count("no-such-model") is None


def test_a_directory_model_counts_its_blocks_from_config_json(tmp_path: Path) -> None:
    from precisionlab.cli.ladder import block_count

    (tmp_path / "config.json").write_text(json.dumps({"model_type": "llama", "num_hidden_layers": 4}))
    assert block_count(str(tmp_path)) == 4
    (tmp_path / "config.json").write_text(json.dumps({"text_config": {"num_hidden_layers": 6}}))
    assert block_count(str(tmp_path)) == 6


@pytest.mark.slow
def test_the_header_walk_agrees_with_gguf_on_smollm2() -> None:
    from precisionlab.cli.ladder import gguf_block_count
    from tests.model_helpers import smollm2, smollm2_gguf

    loaded = smollm2()
    reader = smollm2_gguf()
    assert gguf_block_count(Path(loaded.source)) == int(reader.fields["llama.block_count"].contents()) == 30


# --------------------------------------------------------------------------- options
def test_alpha_is_checked_before_loading_and_defaults_to_the_rule(run_cli, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    from precisionlab.cli import ladder as cli_ladder
    from precisionlab.ptq.ladder import rule

    assert cli_ladder.ALPHA == rule.ALPHA
    _no_loading(monkeypatch)
    one_line_error(run_cli("ladder", "--model", "no-such-model", "--alpha", "0.7"), "--alpha must lie strictly")
    one_line_error(run_cli("ladder", "--model", "no-such-model", "--alpha", "0"), "--alpha must lie strictly")


def test_max_examples_below_the_built_in_start_is_refused_before_loading(run_cli,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    _no_loading(monkeypatch)
    one_line_error(run_cli("ladder", "--model", "no-such-model", "--grow", "--max-examples", "20"),
                   "--max-examples (20) is below the starting number of examples (40)")


def test_quick_fills_the_options_not_given(run_cli, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    seen: list[tuple[Any, ...]] = []

    def fake(*args: Any) -> Any:
        seen.append(args)
        raise KeyboardInterrupt

    monkeypatch.setattr("precisionlab.cli.ladder._climb", fake)
    monkeypatch.setattr("precisionlab.cli.ladder.block_count", lambda spec: 30)
    run_cli("ladder", "--quick")
    run_cli("ladder", "--quick", "--examples", "12", "--blocks", "2,3")
    assert (seen[0][4], seen[0][7], seen[0][8]) == (8, [1], 1536)  # examples, blocks, calibration tokens
    assert (seen[1][4], seen[1][7], seen[1][8]) == (12, [2, 3], 1536)


# --------------------------------------------------------------------------- Ctrl-C and resume
class Interrupting:
    """A stub climb: verdicts by step name; Ctrl-C when it reaches `stop_at`."""

    def __init__(self, stop_at: str | None) -> None:
        self.stop_at = stop_at
        self.calls: list[str] = []

    def __call__(self, step: Step, examples: int, confidence: float) -> StepOutcome:
        if step.name == self.stop_at:
            raise KeyboardInterrupt
        self.calls.append(step.name)
        low, high, verdict = (0.2, 0.8, "pass") if step.name == "keep-sensitive" else (3.0, 5.0, "fail")
        return StepOutcome(verdict, (low + high) / 2, low, high, 1000 + len(self.calls), examples,
                           confidence=confidence, tasks={"ppl": {"difference": (low + high) / 2, "ci_low": low,
                                                                 "ci_high": high, "verdict": verdict, "unit": "%"}})


def _fake_climb(evaluator: Interrupting) -> Any:
    from precisionlab.cli.ladder import climb_logged

    def climb(model: str, steps: list[Any], task_names: list[str], max_drop: float, examples: int | None,
              grow: bool, max_examples: int | None, block_ids: Any, calib_size: int, seed: int, resamples: int,
              target: str, progress: Any, alpha: float, log_path: Path | None, settings: dict[str, Any]) -> Any:
        result = climb_logged(steps, evaluator, None, examples or 8, max_drop, target, grow, max_examples, alpha,
                              progress, log_path, {"model": "stub", **settings})
        return result, {"name": "stub", "grid_note": "", "bytes": 0}, [], StubEvaluator()

    return climb


def test_ctrl_c_keeps_the_finished_steps_and_the_next_run_resumes(run_cli, tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    out = tmp_path / "out"
    first = Interrupting(stop_at="g64")
    monkeypatch.setattr("precisionlab.cli.ladder._climb", _fake_climb(first))
    result = run_cli("ladder", "--model", "stub", "--examples", "8", "--out", str(out))
    assert result.exit_code == 130
    log = out / "ladder-steps.jsonl"
    assert f"interrupted; the finished steps are kept in {log}: run the same command again to resume" in result.stderr
    assert first.calls == ["per-tensor", "per-channel", "g128"]
    lines = log.read_text().splitlines()
    assert len(lines) == 4 and json.loads(lines[0])["kind"] == "ladder"
    assert [json.loads(line)["step"]["name"] for line in lines[1:]] == first.calls
    assert sorted(p.name for p in out.iterdir()) == ["ladder-steps.jsonl"]  # no half-written result

    second = Interrupting(stop_at=None)
    monkeypatch.setattr("precisionlab.cli.ladder._climb", _fake_climb(second))
    result = run_cli("ladder", "--model", "stub", "--examples", "8", "--out", str(out), "--json")
    assert result.exit_code == 0, result.output
    assert second.calls == ["g64", "outliers-fp16", "keep-sensitive"]  # the three finished steps not again
    assert "resuming: 3 finished step(s)" in result.stderr
    f = json.loads(result.stdout)["findings"]
    assert f["ladder.steps_resumed"] == 3 and f["ladder.stopped_at"] == "keep-sensitive"
    assert [f[f"ladder.steps.{i}.bytes"] for i in range(6)] == [1001, 1002, 1003, 1001, 1002, 1003]
    assert (out / "ladder.json").is_file()

    # the same folder with another threshold: refused, nothing mixed in
    third = Interrupting(stop_at=None)
    monkeypatch.setattr("precisionlab.cli.ladder._climb", _fake_climb(third))
    one_line_error(run_cli("ladder", "--model", "stub", "--examples", "8", "--max-drop", "2", "--out", str(out)),
                   "holds the steps of another ladder run (its max_drop is 1.0, this run's is 2.0)")
    assert third.calls == []


def test_ctrl_c_without_out_says_how_to_keep_the_steps(run_cli, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setattr("precisionlab.cli.ladder._climb", _fake_climb(Interrupting(stop_at="per-channel")))
    result = run_cli("ladder", "--model", "stub", "--examples", "8")
    assert result.exit_code == 130 and "give --out DIR to keep finished steps" in result.stderr
