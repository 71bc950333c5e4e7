"""Adversarial input across commands: one line `error: ...`, exit 2, nothing half-written; the API
raises ValueError / TypeError with a clear message instead of numpy's or Python's internals."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

import precisionlab as pl


def _one_line_error(result, needle: str) -> None:  # type: ignore[no-untyped-def]
    assert result.exit_code == 2, result.output
    assert result.output.startswith("error: ") and len(result.output.strip().splitlines()) == 1, repr(result.output)
    assert needle in result.output, result.output


# --------------------------------------------------------------------------- explain
def test_explain_negative_infinity_is_a_value(run_cli) -> None:  # type: ignore[no-untyped-def]
    # click read '-inf' as the flags -i -n -f and complained that -f needs an argument
    data = json.loads(run_cli("explain", "-inf", "-f", "e2m1", "--json").stdout)
    assert data["findings"]["stored.e2m1"] == -6.0  # fp4 saturates
    data = json.loads(run_cli("explain", "-f", "fp16", "-inf", "--json").stdout)
    assert data["findings"]["stored.fp16"] == "-inf"


def test_explain_infinity_in_an_integer_format(run_cli) -> None:  # type: ignore[no-untyped-def]
    data = json.loads(run_cli("explain", "inf", "-f", "int8", "--json").stdout)
    row = dict(zip(data["sections"][0]["columns"], data["sections"][0]["rows"][0], strict=True))
    assert (row["stored"], row["below"], row["above"]) == (127.0, 127.0, "nan")  # nothing >= inf in int8
    assert "stored.int4" in json.loads(run_cli("explain", "-inf", "-f", "all", "--json").stdout)["findings"]


@pytest.mark.parametrize("fmt", ["e2m1", "int8"])
def test_explain_nan_in_a_format_without_nan_is_an_error(run_cli, fmt: str) -> None:  # type: ignore[no-untyped-def]
    _one_line_error(run_cli("explain", "nan", "-f", fmt), f"{fmt} has no NaN")


def test_explain_checks_rounding_and_overflow_for_codes_too(run_cli) -> None:  # type: ignore[no-untyped-def]
    _one_line_error(run_cli("explain", "0x7e", "-f", "e4m3", "--rounding", "up"), "unknown rounding mode")
    _one_line_error(run_cli("explain", "0x7e", "-f", "e4m3", "--overflow", "clip"), "unknown overflow policy")


def test_neighbours_past_the_integer_range() -> None:
    below, above = pl.neighbours(math.inf, "int8")
    assert below == 127.0 and math.isnan(above)
    below, above = pl.neighbours(-1e300, "int4")
    assert math.isnan(below) and above == -8.0
    assert pl.neighbours(2.5, "int8") == (2.0, 3.0)


def test_an_integer_too_large_for_float64_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="too large for float64"):
        pl.round_to(10**400, "bf16")
    with pytest.raises(ValueError, match="too large for float64"):
        pl.neighbours(10**400, "bf16")


@pytest.mark.parametrize("bias", [1.5, "8", True])
def test_a_format_bias_must_be_an_integer(bias: object) -> None:
    with pytest.raises(ValueError, match="bias must be an integer"):
        pl.get_format("e4m3", bias=bias)  # type: ignore[arg-type]
    assert pl.get_format("e4m3", bias=np.int64(8), encoding="fnuz").max_finite == 240.0


# --------------------------------------------------------------------------- output files
def test_output_blocked_by_a_directory_names_it_and_leaves_no_temp(run_cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    out = tmp_path / "o"
    (out / "formats_range_vs_precision.png").mkdir(parents=True)
    result = run_cli("formats", "--out", str(out))
    _one_line_error(result, "cannot write")
    assert "formats_range_vs_precision.png" in result.output and ".tmp" not in result.output
    assert sorted(p.name for p in out.iterdir()) == ["formats_range_vs_precision.png"]  # no temporary PNG left


def test_unwritable_csv_names_the_file_not_a_temporary(run_cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    (tmp_path / "afile").write_text("x")
    target = tmp_path / "afile" / "codes"  # the parent is a file
    result = run_cli("formats", "--codes", "e4m3", "--csv", str(target))
    _one_line_error(result, f"cannot write to {target}")
    assert ".tmp" not in result.output


@pytest.mark.parametrize("args", [("formats", "--out", ""), ("run", "--only", "formats", "--out", ""),
                                  ("formats", "--codes", "e2m1", "--csv", "")])
def test_an_empty_output_path_is_refused(run_cli, tmp_path: Path, args: tuple[str, ...]) -> None:  # type: ignore[no-untyped-def]
    result = run_cli(*args)  # '' meant '.': files landed in the working directory
    assert result.exit_code == 2 and "an empty path" in result.output
    assert len(result.output.strip().splitlines()) == 1, result.output
    assert list(tmp_path.iterdir()) == []  # nothing written into the working directory


def test_run_only_with_no_names_is_an_error(run_cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    _one_line_error(run_cli("run", "--only", ",", "--out", str(tmp_path / "r")), "at least one lab")
    assert not (tmp_path / "r").exists()


def test_out_of_memory_is_one_line(run_cli, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from precisionlab.labs import formats_table

    def exhausted(*_specs: str) -> None:
        raise MemoryError("Unable to allocate 364. TiB")

    monkeypatch.setattr(formats_table, "run", exhausted)
    _one_line_error(run_cli("formats"), "not enough memory")


# --------------------------------------------------------------------------- quant
def test_quant_errors_after_the_file_is_read_are_one_line(run_cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    # the progress bar printed an empty line before the error when stderr is not a terminal
    np.save(tmp_path / "w.npy", np.ones((4, 32), dtype=np.float32))
    out = str(tmp_path / "q.safetensors")
    _one_line_error(run_cli("quant", "save", str(tmp_path / "w.npy"), "-s", "int9", "-o", out), "unknown element")
    nan = np.ones((4, 32), dtype=np.float32)
    nan[0, 0] = np.nan
    np.save(tmp_path / "n.npy", nan)
    _one_line_error(run_cli("quant", "compare", str(tmp_path / "n.npy"), "-s", "int8"), "NaN/inf")


def test_quant_save_takes_one_scheme(run_cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    np.save(tmp_path / "w.npy", np.ones((4, 32), dtype=np.float32))
    out = str(tmp_path / "q.safetensors")
    result = run_cli("quant", "save", str(tmp_path / "w.npy"), "-s", "int4:g128,mxfp4", "-o", out)
    _one_line_error(result, "save takes one scheme")


@pytest.mark.parametrize(("content", "needle"), [
    (b"this is not an array", "not a .npy file"),  # np.load said "contains pickled (object) data"
    (None, "empty array"),
])
def test_quant_compare_bad_npy(run_cli, tmp_path: Path, content: bytes | None, needle: str) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "x.npy"
    if content is None:
        np.save(path, np.zeros((0, 4), dtype=np.float32))
    else:
        path.write_bytes(content)
    result = run_cli("quant", "compare", str(path))
    _one_line_error(result, needle)
    assert "x.npy" in result.output


@pytest.mark.parametrize(("scheme", "needle"), [
    ("int8:sym:asym", "set the same thing"),
    ("mxfp4:floor:rceil", "set the same thing"),
    ("int8:scale=fp16:scale=fp32", "set the same thing"),
    ("int4:g100000000000", "at most 16777216"),  # was a MemoryError (373 GiB of padding)
    ("e4m3:block65536x65536", "at most 16777216"),
])
def test_scheme_conflicts_and_absurd_groups(scheme: str, needle: str) -> None:
    with pytest.raises(ValueError, match=needle):
        pl.parse_scheme(scheme)


@pytest.mark.parametrize(("args", "needle"), [
    (("quant", "demo", "--cols", "99999999999"), "cols must be"),  # MemoryError
    (("quant", "demo", "--window", "99999999999"), "window must be"),  # ran for ever
    (("quant", "drill", "--seed", "-1"), "seed must be a non-negative"),  # numpy: "expected non-negative integer"
    (("gemm", "--seed", "-1"), "seed must be a non-negative"),
    (("gemm", "--k-max", "100000000000"), "k_max must be a positive integer up to 65536"),  # MemoryError
    (("gemm", "--size", "100000"), "size must be a positive integer up to 4096"),
    (("axpy", "--n", "99999999999999"), "up to 268435456"),  # MemoryError
    (("lossscale", "train", "--steps", "99999999999"), "steps must be in"),
    (("lossscale", "train", "--samples", "99999999999"), "at most"),  # MemoryError
])
def test_absurd_sizes_are_refused(run_cli, args: tuple[str, ...], needle: str) -> None:  # type: ignore[no-untyped-def]
    _one_line_error(run_cli(*args), needle)


# --------------------------------------------------------------------------- capacity / advise / lossscale
@pytest.mark.parametrize(("args", "needle"), [
    (("capacity", "--memory", "nan"), "memory must be a positive number"),  # accepted: every batch was 0
    (("capacity", "--memory", "inf"), "memory must be a positive number"),  # OverflowError traceback
    (("capacity", "--memory", "1e300"), "memory must be a positive number"),  # OverflowError traceback
    (("capacity", "--peak-tflops", "nan"), "peak rate for bf16"),  # "cannot convert float NaN to integer"
    (("advise", "--bandwidth", "nan"), "bandwidth must be a positive number"),  # accepted
    (("capacity", "--name", "mine"), "--name names a --config model"),  # silently ignored
    (("advise", "--name", "mine"), "--name names a --config model"),
    (("advise", "pretrain", "--role", "weights"), "describe the custom scenario"),  # silently ignored
])
def test_capacity_and_advise_reject_nonsense(run_cli, args: tuple[str, ...], needle: str) -> None:  # type: ignore[no-untyped-def]
    _one_line_error(run_cli(*args), needle)


def test_census_csv_that_is_not_text(run_cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    (tmp_path / "h.csv").write_bytes(b"\xff\xfe\x00\x01")
    _one_line_error(run_cli("lossscale", "census", str(tmp_path / "h.csv")), "h.csv: not a text .csv")


# --------------------------------------------------------------------------- quant API
@pytest.mark.parametrize("scheme", ["nvfp4", "mxfp4", "int8:row", "int4:g128:asym", "nf4:g64", "dsv3_weight"])
def test_float64_values_beyond_float32_are_refused(scheme: str) -> None:
    """Scales and dequantized values are float32: nvfp4 gave NaN, mxfp4 inf, int8 a saturated garbage."""
    limit = float(np.finfo(np.float32).max)
    x = np.ones((4, 128))
    x[1, 3] = -2.0 * limit
    with pytest.raises(ValueError, match="beyond float32's range"):
        pl.quantize(x, scheme)
    x[1, 3] = -limit  # the largest float32 itself is fine
    assert np.isfinite(pl.quantize(x, "int4:g128:asym").dequantize()).all()


def test_scalers_check_their_element_and_margin() -> None:
    from precisionlab.quant import CurrentScaler, DelayedScaler

    with pytest.raises(ValueError, match="unknown format"):
        CurrentScaler("e4m4x")  # was accepted; only step() failed
    with pytest.raises(TypeError, match="margin"):
        DelayedScaler("e4m3", margin=float("nan"))  # type: ignore[arg-type]  # every scale was NaN


def test_save_quantized_needs_quantized_tensors(tmp_path: Path) -> None:
    from precisionlab.quant.safetensors_io import save_quantized

    with pytest.raises(TypeError, match="not a QuantizedTensor"):  # was AttributeError: no attribute 'packed'
        save_quantized(tmp_path / "q.safetensors", {"w": np.ones((4, 32), dtype=np.float32)})  # type: ignore[dict-item]
    assert list(tmp_path.iterdir()) == []


def test_lossscale_quick_conflicts_with_explicit_sizes(run_cli) -> None:  # type: ignore[no-untyped-def]
    _one_line_error(run_cli("lossscale", "--quick", "--steps", "5"), "--quick sets the sizes itself")  # was ignored
