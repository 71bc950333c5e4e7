"""`precisionlab run --include`: saved results (a ladder written by `precisionlab ladder --out`, a ptq
result) become sections of the report after the labs that ran, in the order given, figures re-drawn;
bad input is one line `error: ...`, exit 2, found before any lab runs, and the previous report stays.

The ladder is a fabricated climb (tests/saved_results.py) written by the real `ladder` command with its
model-loading climb replaced, so the file is exactly what the command writes."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

import precisionlab.labs.formats_table as formats_table
from precisionlab.labs import Lab
from precisionlab.report.outputs import write_lab
from tests.saved_results import LADDER_MODEL, StubEvaluator, fabricated_climb, fabricated_ptq
from tests.test_cli_conventions import one_line_error, snapshot


@pytest.fixture
def ladder_dir(run_cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:  # type: ignore[no-untyped-def]
    """out/ladder as `precisionlab ladder --out out/ladder` leaves it: ladder.json, its PNG, ladder.html."""
    monkeypatch.setattr("precisionlab.cli.ladder._climb",
                        lambda *args: (fabricated_climb(), LADDER_MODEL, [], StubEvaluator()))
    result = run_cli("ladder", "--model", "tiny", "--out", str(tmp_path / "out" / "ladder"))
    assert result.exit_code == 0, result.output
    folder = tmp_path / "out" / "ladder"
    assert sorted(p.name for p in folder.iterdir()) == ["ladder.html", "ladder.json", "ladder_difference_bytes.png"]
    return folder


@pytest.fixture
def ptq_file(tmp_path: Path) -> Path:
    write_lab(fabricated_ptq(), tmp_path / "out" / "ptq")
    return tmp_path / "out" / "ptq" / "ptq.json"


def saved(path: Path) -> dict[str, object]:
    """A saved lab file as results.json should carry it: everything but its own provenance."""
    data = json.loads(path.read_text())
    data.pop("provenance", None)
    return data


def section_ids(page: str) -> list[str]:
    return re.findall(r"<section class='lab' id='([^']+)'", page)


def test_an_included_ladder_is_a_section_of_the_report(run_cli, ladder_dir: Path, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    report = tmp_path / "report"
    result = run_cli("run", "--only", "formats", "--include", str(ladder_dir / "ladder.json"), "--out", str(report),
                     "--svg", "--csv", str(tmp_path / "tables"))
    assert result.exit_code == 0, result.output
    assert re.search(rf"^ladder +1 tables +1 figures +\d+ findings +included from {re.escape(str(ladder_dir))}",
                     result.stdout, re.M)
    data = json.loads((report / "results.json").read_text())
    assert [lab["lab"] for lab in data["labs"]] == ["formats", "ladder"]
    assert data["labs"][1] == saved(ladder_dir / "ladder.json")  # the saved result, whole
    [entry] = data["included"]
    recorded = json.loads((ladder_dir / "ladder.json").read_text())["provenance"]
    assert entry["lab"] == "ladder" and entry["file"] == str(ladder_dir / "ladder.json")
    assert entry["provenance"]["command"] == recorded["command"] == "precisionlab ladder --model tiny --out " + str(
        ladder_dir)
    assert data["provenance"]["options"]["include"] == [str(ladder_dir / "ladder.json")]

    page = (report / "index.html").read_text()
    assert section_ids(page) == ["lab-formats", "lab-ladder"]
    assert "<a href='#lab-ladder'>Escalation ladder: tiny at int4</a>" in page  # the contents
    assert "Escalation ladder at int4: stopped at g64" in page  # the step table's title
    assert f"Included from {ladder_dir / 'ladder.json'}, saved on {recorded['date']}" in page
    assert "made with `precisionlab ladder --model tiny" in page
    # the figure is drawn again, into the report, with its SVG; the table goes to --csv like any lab's
    png = report / "ladder_difference_bytes.png"
    width, height = int.from_bytes(png.read_bytes()[16:20], "big"), int.from_bytes(png.read_bytes()[20:24], "big")
    assert f"<img src='ladder_difference_bytes.png' width='{width}' height='{height}'" in page
    assert (report / "ladder_difference_bytes.svg").is_file()
    assert "<a href='ladder_difference_bytes.svg'>SVG</a>" in page
    assert sorted(p.name for p in (tmp_path / "tables").iterdir()) == ["formats_formats.csv", "ladder_steps.csv"]
    # the summary line: the ladder's headline, its checks (the failing first step is a FAIL row)
    assert "<td><a href='#lab-ladder'>ladder</a></td><td class='prose'>stopped at g64;" in page
    assert "<a class='bad' href='#ladder-steps'>FAIL</a> Escalation ladder at int4: stopped at g64: 0" in page


def test_a_directory_and_files_come_in_the_order_given(run_cli, ladder_dir: Path, ptq_file: Path,  # type: ignore[no-untyped-def]
                                                       tmp_path: Path) -> None:
    for order, expected in (((ptq_file, ladder_dir), ["ptq", "ladder"]), ((ladder_dir, ptq_file), ["ladder", "ptq"])):
        report = tmp_path / f"report_{expected[0]}"
        args = [arg for path in order for arg in ("--include", str(path))]
        result = run_cli("run", "--only", "formats", *args, "--out", str(report))
        assert result.exit_code == 0, result.output
        data = json.loads((report / "results.json").read_text())
        assert [lab["lab"] for lab in data["labs"]] == ["formats", *expected]
        assert data["labs"][["formats", *expected].index("ptq")] == saved(ptq_file)
        assert [e["file"] for e in data["included"]] == [
            str(ptq_file) if name == "ptq" else str(ladder_dir / "ladder.json") for name in expected]
        assert section_ids((report / "index.html").read_text()) == [f"lab-{name}" for name in ["formats", *expected]]


def test_include_works_with_only_and_quick(run_cli, ladder_dir: Path, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    report = tmp_path / "report"
    result = run_cli("run", "--only", "quant_drill,formats", "--quick", "--include", str(ladder_dir),
                     "--out", str(report))
    assert result.exit_code == 0, result.output
    data = json.loads((report / "results.json").read_text())
    assert [lab["lab"] for lab in data["labs"]] == ["formats", "quant_drill", "ladder"]


def write_json(path: Path, data: object) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data))
    return path


def never(**_: object) -> None:
    raise AssertionError("a lab ran before the included files were checked")


@pytest.mark.parametrize("case", ["missing", "not json", "a list", "not a lab result", "a bad table", "a report",
                                  "empty directory", "same lab twice", "same file twice", "a lab being run",
                                  "binary"])
def test_bad_includes_fail_before_any_lab_and_keep_the_old_report(run_cli, ladder_dir: Path, tmp_path: Path,  # type: ignore[no-untyped-def]
                                                                  monkeypatch: pytest.MonkeyPatch, case: str) -> None:
    report = tmp_path / "report"
    assert run_cli("run", "--only", "formats", "--out", str(report)).exit_code == 0
    before = snapshot(report)
    ladder = ladder_dir / "ladder.json"
    bad = tmp_path / "bad"
    good = json.loads(ladder.read_text())
    cases: dict[str, tuple[list[Path], str]] = {
        "missing": ([bad / "nope.json"], f"error: no such file: {bad / 'nope.json'}"),
        "not json": ([bad / "cut.json"], f"error: {bad / 'cut.json'}: invalid JSON (Expecting value at line 1"),
        "a list": ([bad / "list.json"], f"error: {bad / 'list.json'}: expected a JSON object, got list"),
        "not a lab result": ([bad / "other.json"], f"error: {bad / 'other.json'}: not a lab result: the lab result "
                                                   "has no 'lab', 'title'"),
        "a bad table": ([bad / "ladder.json"], f"error: {bad / 'ladder.json'}: not a lab result: sections[0].rows[0] "
                                               "has 1 cells for 16 columns"),
        "a report": ([report / "results.json"], f"error: {report / 'results.json'}: a report's results.json"),
        "empty directory": ([bad], f"error: {bad}: no <name>.json lab result in this directory"),
        "same lab twice": ([ladder, bad / "copy" / "ladder.json"],
                           f"error: {ladder} and {bad / 'copy' / 'ladder.json'} both hold the lab 'ladder'"),
        "same file twice": ([ladder_dir, ladder], f"error: {ladder} is included twice (also as {ladder})"),
        "a lab being run": ([bad / "formats.json"], f"error: {bad / 'formats.json'} holds the lab 'formats', which "
                                                    "this run also runs; leave that lab out with --only"),
        "binary": ([bad / "picture.json"], f"error: {bad / 'picture.json'}: not a lab result: not UTF-8 text"),
    }
    bad.mkdir()
    (bad / "cut.json").write_text('{"lab": ')
    write_json(bad / "list.json", [good])
    write_json(bad / "other.json", {"name": "ladder"})
    write_json(bad / "ladder.json", {**good, "sections": [{**good["sections"][0], "rows": [[1]]}]})
    write_json(bad / "copy" / "ladder.json", good)
    write_json(bad / "formats.json", {**good, "lab": "formats"})
    (bad / "picture.json").write_bytes((ladder_dir / "ladder_difference_bytes.png").read_bytes())
    if case == "empty directory":
        for path in sorted(bad.rglob("*"), reverse=True):
            path.unlink() if path.is_file() else path.rmdir()
    paths, message = cases[case]
    monkeypatch.setattr(formats_table, "LAB", Lab(name="formats", title="Formats table", run=never, order=0))
    result = run_cli("run", "--only", "formats", *[a for p in paths for a in ("--include", str(p))],
                     "--out", str(report))
    text = one_line_error(result, message)
    assert text.startswith(message), text
    assert snapshot(report) == before  # the old report is whole, nothing new mixed in
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad", "out", "report"]  # no staging folder left


def test_an_included_result_takes_the_place_of_the_lab_of_its_name(run_cli, ladder_dir: Path, tmp_path: Path,  # type: ignore[no-untyped-def]
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """`precisionlab eval --out` saves the lab `eval`, which every-lab `run` also has: without --only the saved
    result is reported and that lab is not run (it would raise here); the other labs run as usual."""
    saved_eval = write_json(tmp_path / "saved" / "eval.json", {**json.loads((ladder_dir / "ladder.json").read_text()),
                                                               "lab": "eval"})
    eval_lab = Lab(name="eval", title="Task-level evaluation", run=never, order=60)
    monkeypatch.setattr("precisionlab.cli.run.all_labs", lambda: [formats_table.LAB, eval_lab])
    report = tmp_path / "report"
    result = run_cli("run", "--include", str(saved_eval), "--out", str(report))
    assert result.exit_code == 0, result.output
    assert re.search(rf"^eval +1 tables +1 figures +\d+ findings +included from {re.escape(str(saved_eval))} "
                     r"\(in place of running it\)$", result.stdout, re.M)
    data = json.loads((report / "results.json").read_text())
    assert [lab["lab"] for lab in data["labs"]] == ["formats", "eval"]
    assert data["labs"][1] == saved(saved_eval)


def test_a_file_inside_the_report_it_would_replace_is_refused(run_cli, ladder_dir: Path, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """The new report replaces --out whole: a saved result inside it would be deleted with the old report."""
    report = tmp_path / "out"  # `ladder --out out/ladder`, then `run` with its default --out out
    one_line_error(run_cli("run", "--only", "formats", "--include", str(ladder_dir), "--out", str(report)),
                   f"error: {ladder_dir / 'ladder.json'} is inside --out {report}, which the new report replaces")
    assert (ladder_dir / "ladder.json").is_file()
    report = tmp_path / "report"
    assert run_cli("run", "--only", "formats", "--out", str(report)).exit_code == 0
    kept = report / "saved" / "ladder.json"
    write_json(kept, json.loads((ladder_dir / "ladder.json").read_text()))
    before = snapshot(report)
    one_line_error(run_cli("run", "--only", "formats", "--include", str(report / "saved"), "--out", str(report)),
                   f"error: {kept} is inside --out {report}, which the new report replaces whole")
    assert snapshot(report) == before


def test_an_empty_include_path_is_refused(run_cli) -> None:  # type: ignore[no-untyped-def]
    one_line_error(run_cli("run", "--only", "formats", "--include", ""),
                   "error: --include: an empty path is not a file or directory name")


def test_run_help_names_include(run_cli) -> None:  # type: ignore[no-untyped-def]
    text = run_cli("run", "--help").stdout
    assert "--include" in text and "ladder.json" in text
