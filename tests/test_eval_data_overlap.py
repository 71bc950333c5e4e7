"""Calibration never touches evaluation data, on every calibrating command (eval.overlap).

A file that holds every pydoc topic holds the built-in calibration part verbatim, so it overlaps it by
construction: `ptq --calib-data builtin --eval-tasks FILE` and `ladder --tasks FILE` must refuse it with one line
naming the calibration data, exit 2, before any model loads (the loader is replaced by one that fails the test).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from precisionlab.eval import data, overlap
from tests.test_eval_cli import one_line_error

BUILTIN_NAME = "the built-in calibration part (pydoc_data.topics)"


@pytest.fixture
def every_topic(tmp_path: Path) -> Path:
    from pydoc_data.topics import topics

    path = tmp_path / "pydoc.txt"
    path.write_text("\n\n".join(topics[name] for name in sorted(topics)), encoding="utf-8")
    return path


@pytest.fixture
def no_model(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Replace the model loader: a call records the name and stops the command with a one-line error."""
    calls: list[str] = []

    def refuse(name: str, *args: Any, **kwargs: Any) -> Any:
        calls.append(name)
        raise ValueError("the stand-in model loader was reached")

    monkeypatch.setattr("precisionlab.models.load_model", refuse)
    return calls


def test_ptq_builtin_calibration_against_a_task_file_of_pydoc_text(run_cli, every_topic: Path,  # type: ignore[no-untyped-def]
                                                                   no_model: list[str]) -> None:
    result = run_cli("ptq", "--model", "smollm2-135m", "--method", "rtn", "--scheme", "int4",
                     "--calib-data", "builtin", "--eval-tasks", f"ppl,{every_topic}")
    one_line_error(result, "--calib-data overlaps the evaluation data, refused")
    assert BUILTIN_NAME in result.stderr and "pydoc#" in result.stderr
    assert no_model == []


def test_ptq_default_calibration_is_checked_too(run_cli, every_topic: Path, no_model: list[str]) -> None:  # type: ignore[no-untyped-def]
    result = run_cli("ptq", "--model", "smollm2-135m", "--method", "rtn", "--scheme", "int4",
                     "--eval-tasks", str(every_topic))
    one_line_error(result, BUILTIN_NAME)
    assert no_model == []


def test_ladder_against_a_task_file_of_pydoc_text(run_cli, every_topic: Path, no_model: list[str]) -> None:  # type: ignore[no-untyped-def]
    result = run_cli("ladder", "--model", "smollm2-135m", "--tasks", str(every_topic))
    one_line_error(result, "the ladder's calibration data overlaps the evaluation data, refused")
    assert BUILTIN_NAME in result.stderr
    assert no_model == []


def test_a_choice_file_holding_calibration_text_is_refused(run_cli, tmp_path: Path,  # type: ignore[no-untyped-def]
                                                           no_model: list[str]) -> None:
    """Every kind of task file counts: here the calibration text sits in the choices of a multiple-choice file."""
    passage = data.calibration_documents(data.builtin_split())[0].text[:400]
    quiz = tmp_path / "quiz.jsonl"
    quiz.write_text(json.dumps({"context": "Which is right?", "choices": [passage, "no"], "gold": 0}) + "\n")
    one_line_error(run_cli("ladder", "--model", "smollm2-135m", "--tasks", str(quiz)), BUILTIN_NAME)
    one_line_error(run_cli("ptq", "--model", "smollm2-135m", "--method", "rtn", "--scheme", "int4",
                           "--eval-tasks", str(quiz)), BUILTIN_NAME)
    assert no_model == []


def test_unrelated_task_files_go_on_to_the_model(run_cli, tmp_path: Path, no_model: list[str]) -> None:  # type: ignore[no-untyped-def]
    """The check passes text the built-in data does not hold: the command then loads the model (here: refused)."""
    notes = tmp_path / "notes.txt"
    notes.write_text("\n\n".join(f"Zebra {i} grazed beside heron {i + 1} while the river rose." for i in range(50)))
    one_line_error(run_cli("ladder", "--model", "smollm2-135m", "--tasks", str(notes)), "stand-in model loader")
    one_line_error(run_cli("ptq", "--model", "smollm2-135m", "--method", "rtn", "--scheme", "int4", "--eval-tasks",
                           str(notes)), "stand-in model loader")
    assert no_model == ["smollm2-135m", "smollm2-135m"]


def test_evaluation_sources_hold_the_builtin_part_and_every_file(tmp_path: Path) -> None:
    quiz = tmp_path / "quiz.jsonl"
    quiz.write_text(json.dumps({"context": "two and two", "choices": ["four", "five"], "gold": 0}) + "\n")
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text(json.dumps({"prompt": "Say hello", "answer": "hello"}) + "\n")
    sources = overlap.evaluation_sources(["ppl", "choice", str(quiz), str(prompts)])
    builtin = list(data.builtin_split().evaluation)
    assert sources[:len(builtin)] == builtin
    assert [d.text for d in sources[len(builtin):]] == ["two and two\n\nfour\n\nfive", "Say hello\n\nhello"]
    assert {d.source for d in sources[len(builtin):]} == {str(quiz.resolve()), str(prompts.resolve())}


def test_the_builtin_parts_pass_their_own_check() -> None:
    overlap.check_calibration(overlap.calibration_data("builtin"), ["ppl", "choice", "generate", "retrieval"])
