"""The command-line conventions every command shares (docs/cli.md): exit codes, one error style,
Ctrl-C, output folders written whole, --csv, terminal width, progress lines, and input that used to
be accepted silently. Expected messages are the ones the issue asked for, written out here."""

from __future__ import annotations

import csv
import json
import os
from pathlib import Path

import pytest

import precisionlab.labs.formats_table as formats_table
import precisionlab.report.outputs as outputs


def one_line_error(result, needle: str) -> str:  # type: ignore[no-untyped-def]
    assert result.exit_code == 2, result.output
    text = result.stderr
    assert text.startswith("error: ") and len(text.strip().splitlines()) == 1, repr(text)
    assert needle in text, text
    assert "Traceback" not in result.output
    return text


def snapshot(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


# ---- errors -------------------------------------------------------------------------------------


def test_a_group_without_its_subcommand_prints_its_usage(run_cli) -> None:  # type: ignore[no-untyped-def]
    result = run_cli("quant")
    assert result.exit_code == 2
    lines = result.stderr.strip().splitlines()
    assert lines[0].startswith("Usage: precisionlab quant ") and not result.stderr.startswith("error")
    assert "commands: " in lines[1] and "demo" in lines[1] and "save" in lines[1]
    assert len(lines) == 2 and "Options:" not in result.output  # the usage, not the whole help


@pytest.mark.parametrize("command", [("lossscale", "census"), ("quant", "compare"),
                                     ("quant", "save", "--scheme", "int8", "--output", "q.safetensors"),
                                     ("capacity", "--config"), ("advise", "--config")])
def test_a_missing_file_reads_the_same_in_every_command(run_cli, tmp_path: Path, command: tuple[str, ...]) -> None:  # type: ignore[no-untyped-def]
    missing = tmp_path / "nope.npy"
    config = command[-1] == "--config"
    args = (*command, str(missing)) if config else (*command[:2], str(missing), *command[2:])
    text = one_line_error(run_cli(*args), f"error: no such file: {missing}")
    assert "Errno" not in text


@pytest.mark.parametrize(("args", "expected"), [
    (("explain", "0.1", "--formt", "e4m3"), "no such option --formt (did you mean --format?)"),
    (("formats", "--jsn"), "no such option --jsn (did you mean --json?)"),
    (("limits", "--quik"), "no such option --quik (did you mean --quick?)"),
    (("formats", "--zzz"), "no such option --zzz (see"),
])
def test_a_misspelt_option_is_named_with_a_suggestion(run_cli, args: tuple[str, ...], expected: str) -> None:  # type: ignore[no-untyped-def]
    text = one_line_error(run_cli(*args), expected)
    assert "unexpected extra argument" not in text.lower()


def test_a_bad_choice_names_the_option_and_the_choices(run_cli) -> None:  # type: ignore[no-untyped-def]
    text = one_line_error(run_cli("explain", "0.1", "--rounding", "nearst"),
                          "--rounding: unknown rounding mode 'nearst': choose one of nearest_even, nearest_away, "
                          "toward_zero")
    assert "(did you mean nearest_even" in text and "--help lists the other accepted spellings" in text
    assert "Invalid value" not in text


# ---- input accepted silently before --------------------------------------------------------------


@pytest.mark.parametrize("command", [("explain",), ("limits", "--quick", "--value")])
def test_a_decimal_beyond_float64_is_refused_alike(run_cli, command: tuple[str, ...]) -> None:  # type: ignore[no-untyped-def]
    # float("1e400") is inf: before, explain showed inf's fields and exited 0
    one_line_error(run_cli(*command, "1e400"), "'1e400' is beyond float64's range")
    one_line_error(run_cli(*command, "-1e-400"), "below float64's smallest subnormal")


def test_infinity_written_as_such_is_still_a_value(run_cli) -> None:  # type: ignore[no-untyped-def]
    data = json.loads(run_cli("explain", "inf", "--json").stdout)
    assert data["findings"]["stored.bf16"] == "inf"
    one_line_error(run_cli("limits", "--quick", "--value", "inf"), "--value must be finite")


def test_every_accepted_rounding_spelling_is_listed_and_named_in_the_output(run_cli) -> None:  # type: ignore[no-untyped-def]
    # `--rounding nearest` used to be accepted without being listed anywhere
    help_text = " ".join(run_cli("explain", "--help").output.split())
    for words in ("nearest_even (rne, nearest,", "toward_zero (rtz, trunc,", "saturate (sat, satfinite)"):
        assert words in help_text, words
    alias = json.loads(run_cli("explain", "0.1", "--rounding", "nearest", "--json").stdout)
    assert alias["sections"][0]["title"] == "0.1 rounded (nearest_even) to bf16"  # the mode it used, by its name
    ok = json.loads(run_cli("explain", "0.1", "--rounding", "NEAREST_AWAY", "--json").stdout)
    assert ok["sections"][0]["title"] == "0.1 rounded (nearest_away) to bf16"
    one_line_error(run_cli("explain", "0.1", "--overflow", "clip"), "unknown overflow policy 'clip'")


def test_an_unregistered_format_name_is_called_a_custom_format(run_cli) -> None:  # type: ignore[no-untyped-def]
    result = run_cli("explain", "0.1", "--format", "e4m4")
    assert result.exit_code == 0
    assert "custom format e4m4: E=4, M=4, bias 7, IEEE-like" in result.output
    assert "9 bits" in result.output  # 1 + 4 + 4: a 9-bit format, which e4m4 as a typo of e4m3 would not be
    data = json.loads(run_cli("explain", "0.1", "--format", "e4m4", "--json").stdout)
    assert data["summary"].startswith("custom format e4m4")
    assert "custom format" not in run_cli("explain", "0.1", "--format", "e4m3").output
    assert "custom format e3m3: E=3, M=3, bias 3" in run_cli("formats", "--codes", "e3m3").output
    limits = json.loads(run_cli("limits", "--quick", "--formats", "fp16,e4m4", "--json").stdout)
    assert limits["summary"].startswith("custom format e4m4: E=4, M=4, bias 7, IEEE-like")


def test_an_uneven_tensor_parallel_split_is_refused(run_cli) -> None:  # type: ignore[no-untyped-def]
    # Llama-3-8B: 32 query heads, 8 KV heads; 32 / 3 is not whole
    one_line_error(run_cli("capacity", "--tp", "3"),
                   "cannot split Llama-3-8B's 32 query heads (32/3 is not whole); degrees that split its heads "
                   "evenly: 1, 2, 4, 8, 16, 32")
    data = json.loads(run_cli("capacity", "--tp", "16", "--json").stdout)
    assert "16 devices: 2 query heads and 1 KV head per device (each of the 8 KV heads replicated on 2 devices)" \
        in data["summary"]
    table = next(s for s in data["sections"] if s["key"] == "tensor_parallel")
    assert table["columns"][1] == "heads" and table["rows"][1][1] == "16 query heads and 4 KV heads per device"
    # Qwen2.5-7B: 28 query / 4 KV heads; 8 devices cannot split them, so that row is left out and said so
    qwen = json.loads(run_cli("capacity", "--model", "qwen2_5_7b", "--json").stdout)
    tp = next(s for s in qwen["sections"] if s["key"] == "tensor_parallel")
    assert [row[0] for row in tp["rows"]] == [1, 2, 4] and "Not shown: 8 devices" in tp["note"]


def test_the_advisor_does_not_revert_fp64_to_itself(run_cli) -> None:  # type: ignore[no-untyped-def]
    data = json.loads(run_cli("advise", "--role", "weights", "--rel-error", "1e-12", "--json").stdout)
    assert data["findings"]["advise.custom.format"] == "fp64"
    revert = data["sections"][0]["rows"][0][-1]
    assert "→ fp64" not in revert and "nothing wider exists" in revert
    narrower = json.loads(run_cli("advise", "--role", "weights", "--rel-error", "1e-6", "--json").stdout)
    assert narrower["findings"]["advise.custom.format"] == "fp32"
    assert narrower["sections"][0]["rows"][0][-1].endswith("→ fp64")  # a wider format exists: revert to it


# ---- Ctrl-C and output folders ------------------------------------------------------------------


def test_ctrl_c_exits_130_with_one_line_and_writes_nothing(run_cli, tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    out = tmp_path / "o"
    out.mkdir()
    (out / "keep.txt").write_text("mine")

    def interrupted(*_: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(formats_table, "run", interrupted)
    result = run_cli("formats", "--out", str(out), "--csv", str(tmp_path / "c"))
    assert result.exit_code == 130
    assert result.output == "interrupted\n"  # not click's "Aborted!" with exit 1
    assert snapshot(out) == {"keep.txt": b"mine"} and sorted(p.name for p in out.iterdir()) == ["keep.txt"]
    assert not (tmp_path / "c").exists()  # a folder created for this run is removed again


def test_an_interrupted_report_leaves_the_old_one_whole(run_cli, tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    report = tmp_path / "report"
    assert run_cli("run", "--only", "formats", "--out", str(report)).exit_code == 0
    before = snapshot(report)
    assert "index.html" in before and "results.json" in before
    real = outputs.atomic_write_text

    def write(path, text):  # type: ignore[no-untyped-def]
        if Path(path).name == "index.html":  # figures and results.json are already written by now
            raise KeyboardInterrupt
        return real(path, text)

    monkeypatch.setattr(outputs, "atomic_write_text", write)
    result = run_cli("run", "--only", "formats,advise", "--out", str(report))
    assert result.exit_code == 130 and result.stderr.strip().splitlines()[-1] == "interrupted"
    assert snapshot(report) == before  # not one file of the new run mixed in
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report"]  # no staging folder left beside it


def test_a_finished_report_replaces_the_old_one_whole(run_cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    report = tmp_path / "report"
    assert run_cli("run", "--only", "quant_drill", "--out", str(report)).exit_code == 0
    assert (report / "quant_drill_rest_error_vs_group.png").is_file()
    assert run_cli("run", "--only", "formats", "--out", str(report)).exit_code == 0
    names = sorted(p.name for p in report.iterdir())
    # the drill's PNGs are gone; the formats figure has its wide and its phone-width drawing
    assert names == ["formats_range_vs_precision.png", "formats_range_vs_precision_narrow.png", "index.html",
                     "results.json"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report"]


def test_run_refuses_a_folder_that_is_not_a_report(run_cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    home = tmp_path / "home"
    home.mkdir()
    (home / "notes.txt").write_text("precious")
    one_line_error(run_cli("run", "--only", "formats", "--out", str(home)), "not a precisionlab report")
    assert snapshot(home) == {"notes.txt": b"precious"}


def test_an_unwritable_out_fails_before_any_work(run_cli, tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    import precisionlab.labs.gemm as gemm

    def never(**_: object) -> None:
        raise AssertionError("the lab ran before --out was checked")

    monkeypatch.setattr(gemm, "run", never)
    (tmp_path / "afile").write_text("x")
    blocked = tmp_path / "afile" / "out"  # its parent is a file: nothing can be written there
    one_line_error(run_cli("gemm", "--out", str(blocked)), f"cannot write to {blocked}")
    one_line_error(run_cli("run", "--only", "gemm", "--out", str(blocked)), f"cannot write to {blocked}")


@pytest.mark.skipif(hasattr(os, "geteuid") and os.geteuid() == 0, reason="root writes into read-only folders")
def test_a_read_only_out_fails_before_any_work(run_cli, tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    import precisionlab.labs.gemm as gemm

    monkeypatch.setattr(gemm, "run", lambda **_: (_ for _ in ()).throw(AssertionError("the lab ran")))
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o500)
    try:
        one_line_error(run_cli("gemm", "--out", str(locked)), "permission denied")
    finally:
        locked.chmod(0o700)


# ---- --csv, provenance --------------------------------------------------------------------------


def test_csv_writes_every_table_of_a_command(run_cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    folder = tmp_path / "tables"
    result = run_cli("capacity", "--csv", str(folder))
    assert result.exit_code == 0
    data = json.loads(run_cli("capacity", "--json").stdout)
    expected = sorted(f"capacity_{s['key']}.csv" for s in data["sections"])
    assert sorted(p.name for p in folder.iterdir()) == expected and len(expected) == 9
    with (folder / "capacity_kv_cache.csv").open() as handle:
        rows = list(csv.reader(handle))
    kv = next(s for s in data["sections"] if s["key"] == "kv_cache")
    assert rows[0] == kv["columns"] and len(rows) == len(kv["rows"]) + 1
    report = run_cli("run", "--only", "formats", "--out", str(tmp_path / "r"), "--csv", str(tmp_path / "rc"))
    assert report.exit_code == 0
    assert sorted(p.name for p in (tmp_path / "rc").iterdir()) == ["formats_formats.csv"]


def test_the_report_records_its_provenance(run_cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    import numpy

    out = tmp_path / "r"
    assert run_cli("run", "--only", "formats", "--out", str(out), "--quick").exit_code == 0
    record = json.loads((out / "results.json").read_text())["provenance"]
    assert record["command"] == f"precisionlab run --only formats --out {out} --quick"
    assert record["options"]["quick"] is True and record["options"]["only"] == "formats"
    assert record["versions"]["numpy"] == numpy.__version__
    assert record["python"].endswith(".".join(map(str, __import__("sys").version_info[:3])))
    assert set(record["host"]) == {"cpu", "gpu", "os"} and record["date"].endswith("+00:00")
    page = (out / "index.html").read_text()
    assert "precisionlab run --only formats" in page and numpy.__version__ in page
    lab = json.loads(run_cli("formats", "--out", str(tmp_path / "o")).exit_code == 0
                     and (tmp_path / "o" / "formats.json").read_text())
    assert lab["provenance"]["command"] == f"precisionlab formats --out {tmp_path / 'o'}"


def test_provenance_does_not_import_torch() -> None:
    import subprocess
    import sys

    code = ("import sys; from precisionlab.report.provenance import collect; r = collect(); "
            "print('torch' in sys.modules, r['versions']['numpy'] != 'not installed')")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["False", "True"]


# ---- width and progress -------------------------------------------------------------------------


def test_findings_keys_are_never_truncated_at_100_columns(run_cli, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("COLUMNS", "100")
    result = run_cli("lossscale", "bill")
    data = json.loads(run_cli("lossscale", "bill", "--json").stdout)
    assert "bill.mixed_precision_adam.bytes_per_param" in data["findings"]
    for key in data["findings"]:
        assert key in result.stdout, key  # was "mixed_p…" at 100 columns
    tables = [line for line in result.stdout.splitlines() if line[:1] in "┏┃┡│└"]
    assert tables and max(len(line) for line in tables) <= 100


def test_numbers_do_not_wrap_in_a_narrow_terminal(run_cli, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("COLUMNS", "100")
    data = json.loads(run_cli("formats", "--json").stdout)
    text = run_cli("formats").stdout
    table = next(s for s in data["sections"] if s["key"] == "formats")
    index = table["columns"].index("min normal")
    assert "2.2251e-308" in text and table["rows"][0][index] == pytest.approx(2.2251e-308, rel=1e-4)
    assert "(continued, 2/2)" in text  # the wide table is split into column groups, not squeezed


def test_piped_output_is_not_hard_wrapped(run_cli, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.delenv("COLUMNS", raising=False)
    text = run_cli("capacity").stdout
    rows = [line for line in text.splitlines() if line.startswith("│ kivi2 ")]
    assert rows and max(len(line) for line in rows) > 200  # the KV-cache table: one row, one line, however wide
    assert all(len(line) <= 100 for line in text.splitlines() if line.startswith("─"))


def test_progress_lines_when_stderr_is_not_a_terminal(run_cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    result = run_cli("run", "--only", "formats,quant", "--out", str(tmp_path / "r"), "--quick")
    assert result.exit_code == 0
    lines = result.stderr.splitlines()
    for number, lab in enumerate(("formats", "quant_demo", "quant_drill"), 1):
        assert any(line.startswith(f"ran {lab} in ") and line.endswith(f" s ({number}/3)") for line in lines), lines
    assert "ran " not in result.stdout.split("formats")[0]  # progress goes to stderr, the summary to stdout
