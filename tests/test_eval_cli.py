"""`precisionlab eval` through the CLI runner: bad input is one line and exit 2; real runs on both packaged
models write the tables, findings, plots and per-example files."""

from __future__ import annotations

import importlib.machinery
import json
from pathlib import Path
from typing import Any

import pytest

from tests.model_helpers import minilm, smollm2


def one_line_error(result, text: str) -> None:  # type: ignore[no-untyped-def]
    assert result.exit_code == 2, result.output
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert lines[-1].startswith("error: ") and text in lines[-1], result.stderr
    assert "Traceback" not in result.output
    assert len([line for line in lines if line.startswith("error")]) == 1


def implied_verdict(findings: dict[str, Any], key: str, max_drop: float, higher_is_better: bool) -> str:
    """The verdict that the interval `key.ci_low`, `key.ci_high` and the threshold imply (the rule of
    docs/eval_statistics.md, written out here): accuracy-like, PASS when low > -max_drop, FAIL when
    high < -max_drop; perplexity (lower is better), PASS when high < max_drop, FAIL when low > max_drop."""
    low, high = findings[f"{key}.ci_low"], findings[f"{key}.ci_high"]
    assert low <= findings[f"{key}.difference"] <= high
    if higher_is_better:
        return "pass" if low > -max_drop else "fail" if high < -max_drop else "inconclusive"
    return "pass" if high < max_drop else "fail" if low > max_drop else "inconclusive"


def test_unknown_model_lists_the_packaged_ones(run_cli) -> None:  # type: ignore[no-untyped-def]
    from precisionlab.models.packaged import installed_packaged

    result = run_cli("eval", "--model", "smollm3")
    one_line_error(result, "unknown model 'smollm3'")
    installed = installed_packaged()
    listing = ", ".join(installed) if installed else "none installed"
    assert f"packaged models: {listing}" in result.stderr  # the installed ones, by name


def test_directory_without_config(run_cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    one_line_error(run_cli("eval", "--model", str(tmp_path)), "has no config.json")


def test_bad_scheme_and_threshold_fail_before_loading(run_cli) -> None:  # type: ignore[no-untyped-def]
    one_line_error(run_cli("eval", "--model", "nope", "--schemes", "int9:row"), "unknown element or preset 'int9'")
    one_line_error(run_cli("eval", "--model", "nope", "--max-drop", "-1"), "--max-drop must be a finite number")
    one_line_error(run_cli("eval", "--model", "nope", "--schemes", "int8:row+act"), "expected act=SCHEME")
    one_line_error(run_cli("eval", "--model", "nope", "--size", "0"), "size must be a positive number")
    one_line_error(run_cli("eval", "--model", "nope", "--resamples", "5"), "--resamples must be an integer >= 100")


def test_jsonl_line_without_gold(run_cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    task = tmp_path / "quiz.jsonl"
    task.write_text('{"context": "2 + 2 =", "choices": [" 4", " 5"], "gold": 0}\n'
                    '{"context": "3 + 3 =", "choices": [" 6", " 7"]}\n')
    result = run_cli("eval", "--model", "nope", "--tasks", str(task))
    one_line_error(result, "quiz.jsonl line 2: no 'gold' field")


def test_unknown_task(run_cli) -> None:  # type: ignore[no-untyped-def]
    one_line_error(run_cli("eval", "--tasks", "ppl,mmlu"), "unknown task 'mmlu'")


def stand_in(find_spec: Any, name: str) -> Any:
    """find_spec(name), or for torch and transformers a stand-in spec where this machine lacks them: the
    tests below hide one of the two and expect the message to name that one alone."""
    found = find_spec(name)
    if found is None and name in ("torch", "transformers"):
        return importlib.machinery.ModuleSpec(name, None)
    return found


@pytest.mark.parametrize(("peer", "message"), [
    ("transformers", "transformers is not installed: pip install 'precisionlab[models]'"),
    ("torch", "torch is not installed: pip install torch==2.13.0"),
])
def test_a_missing_peer_names_its_install(run_cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,  # type: ignore[no-untyped-def]
                                          peer: str, message: str) -> None:
    from precisionlab import peers

    (tmp_path / "config.json").write_text("{}")
    real = peers.importlib.util.find_spec
    monkeypatch.setattr(peers.importlib.util, "find_spec", lambda name: None if name == peer else stand_in(real, name))
    result = run_cli("eval", "--model", str(tmp_path))
    one_line_error(result, message)


def test_task_that_does_not_fit_the_model(run_cli) -> None:  # type: ignore[no-untyped-def]
    minilm()
    one_line_error(run_cli("eval", "--model", "minilm-l6", "--tasks", "ppl"), "task 'ppl' needs a causal LM")


def test_minilm_retrieval_json(run_cli) -> None:  # type: ignore[no-untyped-def]
    minilm()
    result = run_cli("eval", "--model", "minilm-l6", "--schemes", "int8:row", "--size", "0.2", "--json",
                     "--no-cache", "--resamples", "500")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    findings = data["findings"]
    for key in ("difference", "ci_low", "ci_high", "verdict", "n", "min_detectable", "cosine"):
        assert f"eval.retrieval.int8:row.{key}" in findings
    key = "eval.retrieval.int8:row"
    assert findings[f"{key}.verdict"] == implied_verdict(findings, key, 1.0, True)
    assert findings["eval.retrieval.int8:row.n"] == 13
    assert findings["eval.retrieval.int8:row.ci_low"] <= findings["eval.retrieval.int8:row.difference"] \
        <= findings["eval.retrieval.int8:row.ci_high"]
    assert data["params"]["max_drop"] == 1.0
    assert data["params"]["command"].startswith("precisionlab eval --model minilm-l6 --schemes int8:row")
    assert [s["key"] for s in data["sections"]] == ["retrieval", "errors"]


def test_smollm2_ppl_and_a_user_choice_file(run_cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    smollm2()
    quiz = tmp_path / "quiz.jsonl"
    quiz.write_text("\n".join(json.dumps(line) for line in (
        {"context": "The capital of France is", "choices": ["Paris", "a banana", "blue"], "gold": 0},
        {"context": "In Python, a function is defined with the keyword", "choices": ["def", "func", "lambda x"],
         "gold": 0},
        {"context": "One, two, three,", "choices": ["four", "seven", "ninety"], "gold": 0})) + "\n")
    out = tmp_path / "out"
    # int8:row:outliers=200 keeps 200 rows in fp16: more than k_proj / v_proj have (192), so the quant library
    # refuses those two shapes and eval skips them with a note, quantizing the other 150 block linears
    result = run_cli("eval", "--model", "smollm2-135m", "--schemes", "int8:row,int8:row:outliers=200", "--tasks",
                     f"ppl,{quiz}",
                     "--size", "0.05", "--max-drop", "2", "--no-cache", "--resamples", "500", "--out", str(out))
    assert result.exit_code == 0, result.output
    assert "reference: ppl" in result.stderr and "int8:row: quiz" in result.stderr  # one line per finished step
    saved = json.loads((out / "eval.json").read_text())
    findings = saved["findings"]
    assert findings["eval.ppl.int8:row.verdict"] == implied_verdict(findings, "eval.ppl.int8:row", 2.0, False)
    assert findings["eval.ppl.int8:row.verdict"] != "fail"
    assert findings["eval.quiz.int8:row.verdict"] == implied_verdict(findings, "eval.quiz.int8:row", 2.0, True)
    assert findings["eval.quiz.int8:row.n"] == 3 and "eval.quiz.reference.acc" in findings
    assert saved["params"]["max_drop"] == 2.0 and "--max-drop 2" in saved["params"]["command"]
    for name in ("eval_ppl_difference.png", "eval_quiz_difference.png", "eval_ppl_examples.jsonl",
                 "eval_quiz_examples.jsonl", "eval_layers.jsonl"):
        assert (out / name).is_file(), name
    records = [json.loads(line) for line in (out / "eval_quiz_examples.jsonl").read_text().splitlines()]
    assert [r["id"] for r in records] == ["quiz:1", "quiz:2", "quiz:3"]
    assert all(len(r["reference"]["loglik"]) == 3 and "int8:row" in r["candidates"] for r in records)
    assert "Caveat" in result.stdout and "Q4_1" in result.stdout  # the grid caveat is in the report
    skipping = "int8:row:outliers=200"
    errors = {r[0]: dict(zip(next(t for t in saved["sections"] if t["key"] == "errors")["columns"], r, strict=True))
              for r in next(t for t in saved["sections"] if t["key"] == "errors")["rows"]}
    assert errors[skipping]["skipped layers"] == 2 * 30 and errors[skipping]["quantized layers"] == 5 * 30
    assert errors["int8:row"]["skipped layers"] == 0
    assert "model.layers.0.self_attn.k_proj: skipped" in result.stdout and "outliers=200" in result.stdout
    assert findings[f"eval.ppl.{skipping}.verdict"] == implied_verdict(findings, f"eval.ppl.{skipping}", 2.0, False)


def test_the_terminal_view_leaves_the_findings_to_json_unless_asked(run_cli) -> None:  # type: ignore[no-untyped-def]
    """The terminal view printed every finding after the tables (about 170 lines at the default size): now the
    tables and verdicts, one line saying where the findings are, and all of them behind --findings."""
    minilm()
    args = ["eval", "--model", "minilm-l6", "--schemes", "int8:row", "--size", "0.2", "--resamples", "500"]
    plain = run_cli(*args)
    assert plain.exit_code == 0, plain.output
    assert "INCONCLUSIVE" in plain.stdout or "PASS" in plain.stdout or "FAIL" in plain.stdout  # the verdicts
    assert "eval.retrieval.int8:row.verdict" not in plain.stdout
    count = len(json.loads(run_cli(*args, "--json").stdout)["findings"])
    assert f"{count} findings (every number above, by key): in --json, or --findings" in plain.stdout
    full = run_cli(*args, "--findings")
    assert full.exit_code == 0 and "eval.retrieval.int8:row.verdict" in full.stdout
    assert "findings (every number above" not in full.stdout
