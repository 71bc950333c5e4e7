"""The limits lab through the CLI (`precisionlab limits --quick --json`): every headline finding
against a number derived here, plus option errors (one line, exit 2) and the written plots."""

from __future__ import annotations

import importlib.util
import inspect
import json
import math
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from click.testing import CliRunner

from precisionlab.labs import get_lab
from precisionlab.labs.limits import LAB

from .test_numerics_accumulate import ref_kahan, ref_pairwise, ref_sequential

REQUIRED_KEYS = [
    "exp_overflow_x.fp16", "exp_overflow_x.bf16", "exp_overflow_x.fp32",
    "smallest_surviving_update.fp16", "smallest_surviving_update.bf16", "smallest_surviving_update.fp32",
    "stall_sum.fp16", "stall_sum.bf16",
    "summation_order.distinct_results", "summation_order.relative_spread",
    "variance.one_pass_fp32", "variance.two_pass_fp32", "variance.welford_fp32",
    "fnuz_vs_ocp.decode_ratio", "vendor_crosscheck.mismatches",
]


@pytest.fixture(scope="module")
def lab_json(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """One quick run through the CLI, shared by the tests of this module."""
    from precisionlab.cli.main import cli

    out = tmp_path_factory.mktemp("limits")
    result = CliRunner().invoke(cli, ["limits", "--quick", "--json", "--out", str(out)], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    data: dict[str, Any] = json.loads(result.stdout)
    data["_out"] = str(out)
    return data


def section(data: dict[str, Any], key: str) -> list[dict[str, Any]]:
    table = next(t for t in data["sections"] if t["key"] == key)
    return [dict(zip(table["columns"], row, strict=True)) for row in table["rows"]]


def test_registered_with_quick_options() -> None:
    assert get_lab("limits") is LAB and LAB.order == 10
    assert LAB.quick["max_log2_n"] < 16


def test_every_required_finding_is_present(lab_json: dict[str, Any]) -> None:
    findings = lab_json["findings"]
    missing = [key for key in REQUIRED_KEYS if key not in findings]
    assert not missing
    assert [t["key"] for t in lab_json["sections"]][:2] == ["formats", "round_trip"]
    assert {f["key"] for f in lab_json["figures"]} >= {"exp_overflow", "dot_error"}


def test_exp_overflow_findings(lab_json: dict[str, Any]) -> None:
    f = lab_json["findings"]
    # first k/100 above ln(max + ulp(max)/2): fp16 ln 65520 = 11.0901 -> 11.10 (the number)
    assert f["exp_overflow_x.fp16"] == (math.floor(100 * math.log(65520)) + 1) / 100 == 11.10
    t_bf16 = float((2 - Fraction(1, 2**8)) * Fraction(2) ** 127)
    t_fp32 = float((2 - Fraction(1, 2**24)) * Fraction(2) ** 127)
    assert f["exp_overflow_x.bf16"] == (math.floor(100 * math.log(t_bf16)) + 1) / 100 == 88.73
    assert f["exp_overflow_x.fp32"] == (math.floor(100 * math.log(t_fp32)) + 1) / 100 == 88.73
    assert f["exp_overflow_x.e4m3"] == (math.floor(100 * math.log(464)) + 1) / 100
    assert f["exp_overflow_x.e5m2"] == (math.floor(100 * math.log(57344 + 4096)) + 1) / 100
    assert f["softmax.naive_fp16_finite"] is False
    assert f["softmax.stable_fp16_max_abs_error"] < 8 * 2.0**-11


def test_update_and_stall_findings(lab_json: dict[str, Any]) -> None:
    f = lab_json["findings"]
    # 1 + t survives iff fl(t) > ulp(1)/2 = 2^-(M+1); M = 10, 7, 23
    for name, man_bits in (("fp16", 10), ("bf16", 7), ("fp32", 23)):
        expected = min(10.0**-k for k in range(1, 9) if 10.0**-k > 2.0 ** -(man_bits + 1))
        assert f[f"smallest_surviving_update.{name}"] == expected
    assert f["smallest_surviving_update.e2m1"] is None
    # fixed point: the smallest power of two P with ulp(P)/2 > fl(0.01), reached exactly from below
    for name, man_bits, stored in (("fp16", 10, float(np.float16(0.01))), ("bf16", 7, 0.010009765625)):
        p = next(2.0**e for e in range(-10, 20) if 2.0 ** (e - man_bits) / 2 > stored)
        assert f[f"stall_sum.{name}"] == p
    assert (f["stall_sum.fp16"], f["stall_sum.bf16"]) == (32.0, 4.0)
    s = np.float32(0)
    for _ in range(10**6):  # independent: numpy float32 scalar addition
        s = s + np.float32(0.01)
    assert f["stall_sum.fp32"] == float(s)


def test_dot_product_findings(lab_json: dict[str, Any]) -> None:
    rows = section(lab_json, "dot_error")
    n_max = rows[-1]["n"]
    assert n_max == 2 ** LAB.quick["max_log2_n"]
    rng = np.random.default_rng(0)  # the documented inputs: x, y iid U[0,1), seed 0, stored in fp32
    x, y = rng.random(n_max).astype(np.float32), rng.random(n_max).astype(np.float32)
    exact = sum(Fraction(float(a)) * Fraction(float(b)) for a, b in zip(x, y, strict=True))
    assert rows[-1]["exact (fsum)"] == float(exact)
    # the n_max row against the exact rational model of tests/test_numerics_accumulate (one rounding per op)
    terms = [float(a) * float(b) for a, b in zip(x, y, strict=True)]  # exact: 24 + 24 bits <= 53
    models = {"fp16": ref_sequential, "bf16": ref_sequential, "fp32": ref_sequential,
              "fp16_pairwise": ref_pairwise, "bf16_pairwise": ref_pairwise,
              "fp16_kahan": ref_kahan, "bf16_kahan": ref_kahan}
    for label, model in models.items():
        got = Fraction(model(terms, label.split("_")[0]))
        assert rows[-1][label] == pytest.approx(float(abs(got - exact) / exact), rel=1e-12), label
        assert lab_json["findings"][f"dot_relative_error.{label}"] == rows[-1][label]
    u16, u32 = 2.0**-11, 2.0**-24
    for row in rows:
        n = row["n"]
        assert row["fp32"] <= n * u32 / (1 - n * u32)  # γ_n: positive terms, so Σ|t| = the sum
        pairwise_levels = math.ceil(math.log2(n))
        assert row["fp16_pairwise"] <= pairwise_levels * u16 / (1 - pairwise_levels * u16)
    assert rows[-1]["fp16"] > rows[0]["fp16"] and rows[-1]["fp16"] > 10 * rows[-1]["fp16_kahan"]
    assert rows[-1]["bf16"] > rows[-1]["bf16_pairwise"]


def blocked_fp32_by_loop(values: list[float], blocks: int) -> float:
    """B blocks summed one value at a time, then the partials: every addition a Python float64
    addition rounded to fp32 (correctly rounded: 53 >= 2·24 + 2 bits, the innocuous double rounding)."""
    size = len(values) // blocks
    partials = []
    for b in range(blocks):
        s = 0.0
        for v in values[b * size : (b + 1) * size]:
            s = float(np.float32(s + v))
        partials.append(s)
    total = 0.0
    for p in partials:
        total = float(np.float32(total + p))
    return total


def test_summation_order_findings(lab_json: dict[str, Any]) -> None:
    f = lab_json["findings"]
    rows = section(lab_json, "summation_order")
    n = lab_json["params"]["order_n"]
    values = np.random.default_rng(1).random(n).astype(np.float32).tolist()  # documented: default_rng(seed + 1)
    exact = float(sum(Fraction(v) for v in values))
    expected = {4**k: blocked_fp32_by_loop(values, 4**k) for k in range(7)}  # B = 1, 4, ..., 4096
    assert [row["blocks B"] for row in rows] == list(expected)
    for row in rows:
        b = row["blocks B"]
        assert row["fp32 result"] == expected[b]
        k = n // b + b - 2  # additions on the longest path; positive values, so Σ|x| = the sum
        assert abs(row["fp32 result"] - exact) <= k * 2.0**-24 / (1 - k * 2.0**-24) * exact
    results = list(expected.values())
    assert f["summation_order.distinct_results"] == len(set(results)) > 1
    assert f["summation_order.relative_spread"] == pytest.approx((max(results) - min(results)) / exact, rel=1e-12)


def variance_data(n: int) -> np.ndarray:
    """The documented section-7 data: 1e6 + U(-1, 1) from default_rng(seed + 2), seed 0, stored in fp32."""
    return (1e6 + np.random.default_rng(2).uniform(-1.0, 1.0, n)).astype(np.float32)


def exact_variance(values: np.ndarray) -> Fraction:
    xs = [Fraction(float(v)) for v in values]
    mean = sum(xs) / len(xs)
    return sum((x - mean) ** 2 for x in xs) / len(xs)


def one_pass_by_loop(values: np.ndarray) -> float:
    """Streaming Σx and Σx² with numpy float32 scalars, then fl32(Σx²/n - (Σx/n)²)."""
    s, sq = np.float32(0), np.float32(0)
    for v in values:
        s = s + v
        sq = sq + v * v
    n = np.float32(values.size)
    return float(sq / n - (s / n) * (s / n))


def two_pass_by_loop(values: np.ndarray) -> float:
    """m = tree sum / n, then the tree sum of (x - m)² / n, all in numpy float32."""
    n = np.float32(values.size)
    m = tree_sum_fp32(values) / n
    d = [v - m for v in values]
    return float(tree_sum_fp32(np.array([x * x for x in d], dtype=np.float32)) / n)


def welford_by_loop(values: np.ndarray) -> float:
    """Welford, written out again with numpy float32 scalars."""
    m32, m2 = np.float32(0), np.float32(0)
    for k, v in enumerate(values, start=1):
        delta = v - m32
        m32 = m32 + delta / np.float32(k)
        m2 = m2 + delta * (v - m32)
    return float(m2 / np.float32(values.size))


def test_variance_findings(lab_json: dict[str, Any]) -> None:
    f = lab_json["findings"]
    n = lab_json["params"]["variance_n"]
    values = variance_data(n)
    exact = float(exact_variance(values))
    assert abs(exact - 1 / 3) < 0.02  # U(-1,1) has variance 1/3; the fp32 grid near 1e6 is 1/16
    assert f["variance.reference_fp64"] == pytest.approx(exact, rel=1e-12)
    one_pass = f["variance.one_pass_fp32"]
    assert one_pass == one_pass_by_loop(values)
    assert one_pass % 65536 == 0 and (one_pass < 0 or one_pass > 1000 * exact)  # visibly wrong
    assert f["variance.two_pass_fp32"] == two_pass_by_loop(values)
    assert f["variance.welford_fp32"] == welford_by_loop(values)
    assert abs(f["variance.two_pass_fp32"] - exact) < 0.05 * exact
    assert abs(f["variance.welford_fp32"] - exact) < 0.05 * exact
    assert abs(f["variance.shifted_fp32"] - exact) < 1e-5 * exact


def test_variance_at_the_default_size() -> None:
    """Section 7 at the issue's n = 1e5 (the quick run uses 2e4): one-pass visibly wrong, both fixes
    within 5% of the exact variance, every fp32 number equal to the loops written here."""
    from precisionlab.labs.limits.cancellation import variance_section

    n = 100_000
    assert inspect.signature(LAB.run).parameters["variance_n"].default == n
    findings: dict[str, Any] = variance_section(n, 0, 0).findings
    values = variance_data(n)
    exact = float(exact_variance(values))
    assert findings["variance.one_pass_fp32"] == one_pass_by_loop(values)
    assert findings["variance.one_pass_fp32"] < 0 or findings["variance.one_pass_fp32"] > 1000 * exact
    assert findings["variance.two_pass_fp32"] == two_pass_by_loop(values)
    assert findings["variance.welford_fp32"] == welford_by_loop(values)
    for key in ("variance.two_pass_fp32", "variance.welford_fp32"):
        assert abs(findings[key] - exact) < 0.05 * exact


def test_fp8_findings(lab_json: dict[str, Any]) -> None:
    f = lab_json["findings"]
    assert f["fnuz_vs_ocp.decode_ratio"] == 2.0 ** (8 - 7)  # same field, biases 7 and 8
    assert f["fnuz_vs_ocp.max_e4m3"] == 448.0 and f["fnuz_vs_ocp.max_e4m3fnuz"] == 240.0
    assert f["fnuz_vs_ocp.code_0x80_e4m3fnuz"] == "nan"
    assert f["fnuz_vs_ocp.code_0x80_e4m3"] == 0 and math.copysign(1, f["fnuz_vs_ocp.code_0x80_e4m3"]) < 0  # -0
    installed = [name for name in ("ml_dtypes", "torch") if importlib.util.find_spec(name) is not None]
    if installed:
        assert f["vendor_crosscheck.mismatches"] == 0
        assert f["vendor_crosscheck.libraries"] == ", ".join(installed)
    else:
        assert f["vendor_crosscheck.mismatches"] == "skipped: not installed"


def test_round_trip_of_a_value(run_cli) -> None:  # type: ignore[no-untyped-def]
    result = run_cli("limits", "--quick", "--json", "--value", "1e-5", "--formats", "fp16,bf16,FP16")
    assert result.exit_code == 0
    data = json.loads(result.stdout)
    assert [r["format"] for r in section(data, "round_trip")] == ["fp16", "bf16"]  # a repeat shown once
    assert [r["format"] for r in section(data, "exp_overflow")] == ["fp16", "bf16"]
    # the headline findings stay whatever --formats shows: fp32 keeps 1e-7 (2^-24 < 1e-7), overflows at 88.73
    assert data["findings"]["smallest_surviving_update.fp32"] == 1e-7
    assert data["findings"]["exp_overflow_x.fp32"] == 88.73
    rows = {r["format"]: r for r in section(data, "round_trip")}
    # 1e-5 is below fp16's min normal 2^-14: a subnormal, a multiple of 2^-24, flushed under FTZ
    assert rows["fp16"]["stored"] == round(1e-5 * 2**24) / 2**24
    assert rows["fp16"]["class"] == "subnormal" and rows["fp16"]["with FTZ"] == 0.0
    assert rows["bf16"]["class"] == "normal"
    zero = run_cli("limits", "--quick", "--json", "--value", "0", "--formats", "fp16,ue8m0")
    rows = {r["format"]: r for r in section(json.loads(zero.stdout), "round_trip")}
    assert rows["fp16"]["class"] == "zero" and rows["fp16"]["rel error"] == 0.0  # 0 is stored exactly
    assert rows["ue8m0"]["stored"] == "nan"  # ue8m0 (2^e only) has no zero


def test_out_dir_gets_the_plots(lab_json: dict[str, Any]) -> None:
    out = Path(lab_json["_out"])
    assert (out / "limits.json").exists()
    assert len(list(out.glob("*.png"))) >= 2


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--order-n", "-5"], "--order-n must be a positive integer"),
        (["--max-log2-n", "0"], "must be a positive integer"),
        (["--order-n", "1000"], "multiple of 4096"),
        (["--formats", "fp99"], "unknown format"),
        (["--formats", "int8"], "integer format"),
        (["--value", "abc"], "--value must be a number"),
        (["--value", "nan"], "--value must be finite"),
        (["--value", "1e400"], "beyond float64's range"),
        (["--formats", ","], "--formats needs at least one format"),
        (["--min-log2-n", "9", "--max-log2-n", "8"], "min_log2_n <= max_log2_n"),
        (["--max-log2-n", "25"], "<= 24"),
        (["--variance-n", "1"], "variance_n must be between 2"),
        (["--drift-n", "1"], "drift_n must be 0 (skip) or between 2"),
        (["--drift-n", "-1"], "--drift-n must be 0 (skip)"),
        (["--stall-count", "100000000"], "stall_count must be between 1 and"),
        (["--order-n", str(1 << 30)], "up to"),
        (["--seed", "-1"], "seed must be a non-negative integer"),
        (["--order-n", "abc"], "'abc' is not a valid integer"),
    ],
)
def test_bad_options_give_one_line_and_exit_2(run_cli, args: list[str], message: str) -> None:  # type: ignore[no-untyped-def]
    result = run_cli("limits", *args)
    assert result.exit_code == 2
    lines = result.output.splitlines()  # nothing before or after the error line, not even a blank one
    assert len(lines) == 1 and lines[0].startswith("error:") and message in lines[0]


def tree_sum_fp32(values: np.ndarray) -> np.float32:
    """Adjacent pairs added in numpy float32, level by level, an odd last element carried up."""
    level = list(values)
    while len(level) > 1:
        carried = [level[-1]] if len(level) % 2 else []
        level = [level[i] + level[i + 1] for i in range(0, len(level) - 1, 2)] + carried
    return np.float32(level[0])


def test_drift_rows_against_exact_arithmetic_and_an_independent_welford() -> None:
    n = 30_000
    result = LAB.run(min_log2_n=4, max_log2_n=5, order_n=4096, variance_n=1000, drift_n=n, stall_count=10)
    f = result.findings
    values = variance_data(n)
    xs = [Fraction(float(v)) for v in values]
    exact = exact_variance(values)
    # two-pass: m = fl32(tree sum / n); x - m is exact (Sterbenz), (x - m)² = k²/256 exact, and their sum
    # (< 2^24 / 256) is exact in fp32: the result is fl32(Σ(x - m)²/n) = fl32(var + (mean - m)²)
    m = Fraction(float(tree_sum_fp32(values) / np.float32(n)))
    two_pass = float(np.float32(float(sum((x - m) ** 2 for x in xs) / n)))
    assert f["variance.drift_two_pass_rel_error"] == pytest.approx(float(abs(Fraction(two_pass) - exact) / exact))
    welford = welford_by_loop(values)
    assert f["variance.drift_welford_rel_error"] == pytest.approx(float(abs(Fraction(welford) - exact) / exact))


def test_runs_inside_the_combined_report(run_cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    result = run_cli("run", "--quick", "--only", "limits", "--out", str(tmp_path / "report"))
    assert result.exit_code == 0, result.output
    payload = json.loads((tmp_path / "report" / "results.json").read_text())
    assert payload["labs"][0]["findings"]["stall_sum.fp16"] == 32.0
