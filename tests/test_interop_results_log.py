"""The results log's refusals are typed and speak the caller's words: a second search running on the same folder
is told about "another search" (not "another audit", not "--schemes"), the ladder's refusal is a type it need not
parse, and a log of another run is refused before anything in it is touched (a torn last line included)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from precisionlab.errors import ResultsLogBusy, ResultsLogCorrupt, ResultsLogMismatch, ResultsLogRefused
from precisionlab.interop.results_log import ResultsLog, header_difference
from precisionlab.ptq.ladder.log import StepLog
from precisionlab.search.log import SensitivityLog

IDENTITY = {"model": "m", "formats": ["int4:g32", "int8:row"], "units": ["a", "b"]}


def test_a_second_concurrent_search_is_told_about_another_search(tmp_path: Path) -> None:
    path = tmp_path / "search-sensitivities.jsonl"
    first = SensitivityLog(path, IDENTITY)
    assert first.open() == {}
    first.append("a", "int4:g32", 0.25, 1.0)
    with pytest.raises(ResultsLogBusy) as refused:
        SensitivityLog(path, IDENTITY).open()
    message = str(refused.value)
    assert message == f"{path} is being written by another search; wait for it or use another --out"
    assert refused.value.noun == "search" and refused.value.path == path
    assert isinstance(refused.value, ValueError)  # the CLI's one-line error, exit 2
    first.close()
    assert SensitivityLog(path, IDENTITY).open() == {("a", "int4:g32"): (0.25, 1.0)}  # free again once closed


def test_the_ladder_refusal_is_a_type_with_its_own_noun(tmp_path: Path) -> None:
    path = tmp_path / "ladder-steps.jsonl"
    first = StepLog(path, {"model": "m", "target": "int4"})
    assert first.open() == []
    with pytest.raises(ResultsLogBusy) as refused:
        StepLog(path, {"model": "m", "target": "int4"}).open()
    assert refused.value.noun == "ladder run" and "another ladder run" in str(refused.value)
    first.close()
    with pytest.raises(ResultsLogMismatch) as other:
        StepLog(path, {"model": "m", "target": "int8"}).open()
    assert other.value.noun == "ladder run" and other.value.difference == "its target is 'int4', this run's is 'int8'"


def test_a_search_log_of_other_formats_names_the_search_and_its_setting(tmp_path: Path) -> None:
    path = tmp_path / "search-sensitivities.jsonl"
    log = SensitivityLog(path, IDENTITY)
    log.open()
    log.close()
    with pytest.raises(ResultsLogMismatch) as refused:
        SensitivityLog(path, {**IDENTITY, "formats": ["int4:g32", "bf16"]}).open()
    message = str(refused.value)
    assert message.startswith(f"{path} holds the sensitivities of another search (its formats is ")
    assert "audit" not in message and "--schemes" not in message


def test_another_runs_log_is_refused_untouched_even_with_a_torn_last_line(tmp_path: Path) -> None:
    """The header is compared before the torn tail is cut: the other run's file keeps every byte (it may be
    resumed by that run, whose record the torn line is)."""
    path = tmp_path / "log.jsonl"
    log = ResultsLog(path, {"kind": "k", "version": 1, "model": "a"}, noun="audit")
    log.open()
    log.append(json.dumps({"kind": "tensor", "name": "w"}))
    log.close()
    with path.open("ab") as handle:
        handle.write(b'{"kind": "tensor", "na')  # the other run crashed mid-write
    before = path.read_bytes()
    with pytest.raises(ResultsLogMismatch, match=r"holds the results of another audit \(its model is 'a', this "
                                                 r"run's is 'b'\)"):
        ResultsLog(path, {"kind": "k", "version": 1, "model": "b"}, noun="audit").open()
    assert path.read_bytes() == before


def test_a_damaged_line_is_typed_and_names_the_line(tmp_path: Path) -> None:
    path = tmp_path / "log.jsonl"
    path.write_text('{"kind": "k", "version": 1}\n[1, 2]\n{"kind": "r"}\n')
    with pytest.raises(ResultsLogCorrupt) as refused:
        ResultsLog(path, {"kind": "k", "version": 1}, noun="search").open()
    assert refused.value.line == 2 and isinstance(refused.value, ResultsLogRefused)
    assert str(refused.value).startswith(f"{path}: line 2 is not a record")


def test_header_difference_by_hand() -> None:
    assert header_difference({"kind": "k", "version": 1, "a": 1, "b": 2}, {"kind": "k", "version": 1, "a": 1,
                                                                        "b": 3}) == "its b is 2, this run's is 3"
    assert header_difference({"kind": "k", "version": 0}, {"kind": "k", "version": 1}) == \
        "records of kind 'k', version 0; this run writes 'k', version 1"
    assert header_difference({"kind": "k", "version": 1, "x": 1}, {"kind": "k", "version": 1}) == \
        "it has a setting 'x' this run does not"
