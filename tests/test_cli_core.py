"""The core commands through the CLI runner: formats, explain, run; errors are one line, exit 2."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

import precisionlab as pl


def test_formats_json_has_the_derived_table(run_cli) -> None:  # type: ignore[no-untyped-def]
    result = run_cli("formats", "--json")
    assert result.exit_code == 0
    data = json.loads(result.stdout)
    assert data["lab"] == "formats"
    table = data["sections"][0]
    rows = {row[0]: dict(zip(table["columns"], row, strict=True)) for row in table["rows"]}
    assert rows["e4m3"]["max finite"] == 448.0
    assert rows["e4m3fnuz"]["max finite"] == 240.0
    assert rows["e5m2"]["max finite"] == 57344.0
    assert rows["fp16"]["min subnormal"] == 2.0**-24
    assert data["findings"]["max_finite.bf16"] == pytest.approx(3.3895e38, rel=1e-4)


def test_formats_terminal_table(run_cli) -> None:  # type: ignore[no-untyped-def]
    result = run_cli("formats")
    assert result.exit_code == 0
    assert "e4m3fnuz" in result.output and "57344" in result.output


def test_code_table_and_csv(run_cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    result = run_cli("formats", "--codes", "e4m3", "--csv", str(tmp_path / "golden"))
    assert result.exit_code == 0
    out = tmp_path / "golden" / "formats_codes_e4m3.csv"
    assert f"wrote {out}" in result.output
    with out.open() as handle:
        rows = list(csv.DictReader(handle))
    assert len(rows) == 256
    by_code = {row["code"]: row for row in rows}
    assert float(by_code["0x7e"]["value"]) == 448.0 and by_code["0x7f"]["value"] == "nan"
    assert by_code["0x80"]["value"] == "-0.0" and by_code["0x01"]["class"] == "subnormal"
    assert by_code["0x40"]["bits"] == "0|1000|000"
    json_rows = json.loads(run_cli("formats", "--codes", "e2m1", "--json").stdout)["sections"][0]["rows"]
    assert [r[2] for r in json_rows[:8]] == [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0]


def test_explain_value(run_cli) -> None:  # type: ignore[no-untyped-def]
    data = json.loads(run_cli("explain", "0.1", "--format", "bf16", "--json").stdout)
    row = dict(zip(data["sections"][0]["columns"], data["sections"][0]["rows"][0], strict=True))
    assert row["code"] == "0x3dcd"
    assert (row["sign"], row["exponent"], row["mantissa"]) == ("0", "01111011", "1001101")
    assert row["stored"] == 0.10009765625
    assert (row["below"], row["above"]) == (0.099609375, 0.10009765625)
    assert row["ulp"] == 2.0**-11  # 0.1 lies in [2^-4, 2^-3); bf16 keeps 7 mantissa bits
    assert row["abs error"] == pytest.approx(0.10009765625 - 0.1, rel=1e-12)


def test_explain_all_and_modes(run_cli) -> None:  # type: ignore[no-untyped-def]
    data = json.loads(run_cli("explain", "1e6", "--format", "all", "--json").stdout)
    stored = data["findings"]
    assert stored["stored.fp16"] == "inf" and stored["stored.e4m3"] == "nan" and stored["stored.e2m1"] == 6.0
    sat = json.loads(run_cli("explain", "1e6", "-f", "e4m3", "--overflow", "saturate", "--json").stdout)
    assert sat["findings"]["stored.e4m3"] == 448.0
    away = json.loads(run_cli("explain", "1.00048828125", "-f", "tf32", "--rounding", "nearest_away",
                              "--json").output)
    assert away["findings"]["stored.tf32"] == 1 + 2.0**-10


def test_explain_negative_values_need_no_separator(run_cli) -> None:  # type: ignore[no-untyped-def]
    data = json.loads(run_cli("explain", "-3.5", "-f", "e2m1", "--json").stdout)
    row = dict(zip(data["sections"][0]["columns"], data["sections"][0]["rows"][0], strict=True))
    # -3.5 is the midpoint of -3 (mantissa 1, odd) and -4 (mantissa 0, even): ties to even give -4
    assert (row["stored"], row["below"], row["above"], row["code"]) == (-4.0, -4.0, -3.0, "0xe")


def test_explain_decodes_a_code(run_cli) -> None:  # type: ignore[no-untyped-def]
    data = json.loads(run_cli("explain", "0x7e", "--format", "e4m3", "--json").stdout)
    assert data["findings"]["value"] == 448.0
    fnuz = json.loads(run_cli("explain", "0x80", "--format", "e4m3fnuz", "--json").stdout)
    assert fnuz["findings"]["value"] == "nan"


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (("explain", "abc"), "not a number"),
        (("explain", "0.1", "--format", "e4m4x"), "unknown format"),
        (("explain", "0.1", "--rounding", "up"), "unknown rounding mode"),
        (("explain", "0.1", "-f", "e4m3", "--overflow", "inf"), "no infinity"),
        (("explain", "0xzz", "-f", "e4m3"), "hexadecimal"),
        (("explain", "0x1ff", "-f", "e4m3"), "0..255"),
        (("formats", "--codes", "bf16"), "8 bits or fewer"),
        (("run", "--only", "nosuchlab"), "unknown lab"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(run_cli, args: tuple[str, ...], needle: str) -> None:  # type: ignore[no-untyped-def]
    result = run_cli(*args)
    assert result.exit_code == 2
    assert needle in result.output
    assert "Traceback" not in result.output
    assert len(result.output.strip().splitlines()) == 1


def test_run_writes_report(run_cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    result = run_cli("run", "--out", str(tmp_path / "report"), "--only", "formats")
    assert result.exit_code == 0, result.output
    report = tmp_path / "report"
    data = json.loads((report / "results.json").read_text())
    assert [lab["lab"] for lab in data["labs"]] == ["formats"]
    assert (report / "index.html").read_text().count("<table>") >= 1
    png = report / "formats_range_vs_precision.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert not list(report.glob(".*tmp*"))


def test_a_command_name_selects_all_its_labs() -> None:
    from precisionlab.labs import select_labs

    assert [lab.name for lab in select_labs(["quant", "formats"])] == ["formats", "quant_demo", "quant_drill"]
    assert [lab.name for lab in select_labs(["quant_drill"])] == ["quant_drill"]
    with pytest.raises(ValueError, match=r"unknown lab\(s\) quan;"):
        select_labs(["quan"])


def test_lab_out_dir_writes_json_and_png(run_cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    result = run_cli("formats", "--out", str(tmp_path / "o"))
    assert result.exit_code == 0
    assert json.loads((tmp_path / "o" / "formats.json").read_text())["lab"] == "formats"
    assert (tmp_path / "o" / "formats_range_vs_precision.png").exists()


def test_version(run_cli) -> None:  # type: ignore[no-untyped-def]
    assert pl.__version__ in run_cli("--version").output


@pytest.mark.parametrize(("args", "needle"), [(("formats", "--codes"), "requires an argument"),
                                              (("explain", "1", "--bogus"), "--bogus"),
                                              (("nosuchcommand",), "no such command")])
def test_click_usage_errors_are_one_line_too(run_cli, args: tuple[str, ...], needle: str) -> None:  # type: ignore[no-untyped-def]
    result = run_cli(*args)
    assert result.exit_code == 2
    assert needle in result.output and len(result.output.strip().splitlines()) == 1
