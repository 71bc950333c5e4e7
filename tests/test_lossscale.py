"""`precisionlab lossscale` through the CLI runner: parts, findings, files, and bad input."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from precisionlab.labs import get_lab

REQUIRED = [
    "census.fp16.subnormal_fraction", "census.fp16.zero_fraction", "census.max_power_of_two_scale",
    "train.fp32.final_loss", "train.fp16_plain.final_loss", "train.fp16_master.final_loss",
    "train.fp16_master_scaled.final_loss", "train.bf16_master.final_loss", "train.fp16_plain.stalled",
    "train.clip_before_unscale.slowdown", "train.no_skip.nan_weights", "bill.mixed_precision_adam.bytes_per_param",
]


def test_registered_with_order_40() -> None:
    lab = get_lab("lossscale")
    assert lab.order == 40 and lab.quick


def test_census_of_a_file_matches_the_library(run_cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    values = (np.random.default_rng(3).standard_normal(5000) * 1e-6).astype(np.float32)
    path = tmp_path / "g.npy"
    np.save(path, values)
    result = run_cli("lossscale", "census", str(path), "--json")
    assert result.exit_code == 0, result.output
    findings = json.loads(result.stdout)["findings"]
    # direct count: numpy's float32 -> float16 cast rounds once (nearest even), like the census
    rounded = np.abs(values.astype(np.float16).astype(np.float64))
    nonzero = values != 0
    assert findings["census.fp16.subnormal_fraction"] == np.count_nonzero((rounded > 0) & (rounded < 2.0**-14)) / 5000
    assert findings["census.fp16.zero_fraction"] == np.count_nonzero((rounded == 0) & nonzero) / 5000
    assert 0 < findings["census.fp16.zero_fraction"] < findings["census.fp16.subnormal_fraction"]
    # direct count for the largest safe scale: 2^k * max < 65520 <= 2^(k+1) * max
    amax = float(np.abs(values.astype(np.float64)).max())
    scale = findings["census.max_power_of_two_scale"]
    assert amax * scale < 65520 <= amax * scale * 2


def test_census_csv_histogram(run_cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "h.csv"
    path.write_text("magnitude,count\n1e-9,6\n1e-6,3\n0.5,1\n")
    findings = json.loads(run_cli("lossscale", "census", str(path), "--json").stdout)["findings"]
    # 1e-9 < 2^-25 flushes (6 of 10); 1e-6 is subnormal (3 of 10); 0.5 is normal
    assert findings["census.fp16.zero_fraction"] == pytest.approx(0.6)
    assert findings["census.fp16.subnormal_fraction"] == pytest.approx(0.3)
    assert findings["census.max_power_of_two_scale"] == 2.0**16  # 0.5 * 2^17 = 65536 overflows


def test_bill_json(run_cli) -> None:  # type: ignore[no-untyped-def]
    result = run_cli("lossscale", "bill", "--params", "7e9", "--optimizer", "adam", "--devices", "8", "--zero", "3",
                     "--json")
    assert result.exit_code == 0, result.output
    findings = json.loads(result.stdout)["findings"]
    assert findings["bill.mixed_precision_adam.bytes_per_param"] == 16
    assert findings["bill.mixed_precision_adam.total_gb"] == pytest.approx(7e9 * 16 / 1e9)
    assert findings["bill.mixed_precision_adam.per_device_gb"] == pytest.approx(7e9 * 16 / 8 / 1e9)


def test_full_lab_json_and_plots(run_cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    out = tmp_path / "out"
    result = run_cli("lossscale", "--quick", "--json", "--out", str(out))
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    for key in REQUIRED:
        assert key in data["findings"], key
    assert data["findings"]["train.fp16_plain.stalled"] is True
    assert data["findings"]["train.fp16_master_scaled.stalled"] is False
    assert {f["key"] for f in data["figures"]} >= {"loss_per_step", "scale_per_step", "census_histogram"}
    assert len(list(out.glob("*.png"))) >= 3


@pytest.mark.parametrize(("args", "needle"), [
    (("lossscale", "bill", "--params", "-7e9"), "parameter count"),
    (("lossscale", "bill", "--optimizer", "lion"), "unknown optimizer"),
    (("lossscale", "bill", "--zero", "4", "--devices", "2"), "ZeRO stage"),
    (("lossscale", "census", "missing.npy"), "missing.npy"),
])
def test_bad_input_is_one_line_and_exit_2(run_cli, args: tuple[str, ...], needle: str) -> None:  # type: ignore[no-untyped-def]
    result = run_cli(*args)
    assert result.exit_code == 2
    assert needle in result.output
    assert len(result.output.strip().splitlines()) == 1


@pytest.mark.parametrize(("name", "array", "needle"), [
    ("empty.npy", np.array([], dtype=np.float32), "no values"),
    ("ints.npy", np.arange(10), "floating point"),
])
def test_bad_gradient_files(run_cli, tmp_path: Path, name: str, array: np.ndarray, needle: str) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / name
    np.save(path, array)
    result = run_cli("lossscale", "census", str(path))
    assert result.exit_code == 2
    assert needle in result.output
    assert len(result.output.strip().splitlines()) == 1


def test_census_of_float64_subnormal_gradients(run_cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    # 1e-310 needs a scale of 2^k with k = floor(log2(65520 / 1e-310)) = 1045 (checked with exact Fractions):
    # past float64's range, so the scale is reported as inf and the exponent exactly, not a traceback
    from fractions import Fraction

    path = tmp_path / "tiny.npy"
    np.save(path, np.array([1e-310, 0.0]))
    result = run_cli("lossscale", "census", str(path), "--json")
    assert result.exit_code == 0, result.output
    findings = json.loads(result.stdout)["findings"]
    k = findings["census.max_power_of_two_exponent"]
    assert Fraction(1e-310) * 2**k < 65520 <= Fraction(1e-310) * 2 ** (k + 1)
    assert findings["census.max_power_of_two_scale"] == "inf"
    assert findings["census.fp16_scaled.normal_fraction"] == 0.5  # the tiny value lands in range, the zero stays


def test_numpy_only_no_heavy_imports() -> None:
    import subprocess
    import sys

    code = ("import sys, precisionlab.training, precisionlab.labs.lossscale, precisionlab.cli.lossscale; "
            "print(sorted({'torch', 'triton', 'matplotlib', 'rich'} & set(sys.modules)))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
