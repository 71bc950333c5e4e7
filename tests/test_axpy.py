"""The axpy bandwidth lab and `precisionlab axpy`."""

from __future__ import annotations

import json

import pytest

from precisionlab.gemm.timing import Timing, axpy_timing, copy_bandwidth
from precisionlab.labs.axpy import assemble, run


def test_timing_rates_follow_the_byte_model() -> None:
    t = Timing("x", "numpy", "fp16", 0.002, 2.0 * 1000, 3.0 * 1000 * 2)
    assert t.gbps == pytest.approx(6000 / 0.002 / 1e9)
    assert t.gflops == pytest.approx(2000 / 0.002 / 1e9)


def test_axpy_counts_three_elements_per_element() -> None:
    n = 1 << 14
    for precision, width in (("fp32", 4), ("fp16", 2), ("bf16", 2)):
        t = axpy_timing(precision, n, budget_s=0.01)
        assert t.bytes == 3 * n * width and t.flops == 2 * n and t.seconds > 0
    assert copy_bandwidth(n, 0.01).bytes == 2 * n * 4
    with pytest.raises(ValueError, match="fp64"):
        axpy_timing("fp64", n)


def test_assemble_speedups_and_fractions() -> None:
    n = 1000
    timings = [Timing("a", "t", "fp32", 4e-3, 2 * n, 12 * n), Timing("b", "t", "fp16", 2.5e-3, 2 * n, 6 * n),
               Timing("c", "t", "bf16", 2e-3, 2 * n, 6 * n)]
    result = assemble(timings, copy_gbps=0.01, machine="toy", params={"n": n})
    f = result.findings
    assert f["axpy.fp16_speedup"] == pytest.approx(1.6)
    assert f["axpy.bf16_speedup"] == pytest.approx(2.0)
    assert f["axpy.fp32.gbps"] == pytest.approx(12 * n / 4e-3 / 1e9)
    assert f["axpy.fp16.fraction_of_copy"] == pytest.approx(6 * n / 2.5e-3 / 1e9 / 0.01)
    assert f["machine.copy_gbps"] == 0.01


def test_lab_quick_run() -> None:
    result = run(n=1 << 14, time_budget=0.01)
    for key in ("axpy.fp32.gbps", "axpy.fp16.gbps", "axpy.bf16.gbps", "axpy.fp16_speedup", "machine.copy_gbps"):
        assert isinstance(result.findings[key], float) and result.findings[key] > 0


def test_cli_json(run_cli) -> None:  # type: ignore[no-untyped-def]
    res = run_cli("axpy", "--n", "4096", "--time-budget", "0.01", "--json")
    assert res.exit_code == 0, res.output
    data = json.loads(res.output)
    assert data["lab"] == "axpy" and data["findings"]["axpy.fp32.gbps"] > 0


@pytest.mark.parametrize("args", [("--n", "0"), ("--n", "-5"), ("--backend", "tpu"), ("--time-budget", "0"),
                                  ("--time-budget", "nan"), ("--time-budget", "-1")])
def test_cli_bad_input(run_cli, args) -> None:  # type: ignore[no-untyped-def]
    res = run_cli("axpy", *args)
    assert res.exit_code == 2
    lines = res.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), res.output


def test_gpu_backend_without_cuda(run_cli) -> None:  # type: ignore[no-untyped-def]
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("a CUDA device is present")
    res = run_cli("axpy", "--backend", "gpu", "--n", "1024")
    assert res.exit_code == 2 and "no CUDA device" in res.output


def test_cli_writes_png(run_cli, tmp_path) -> None:  # type: ignore[no-untyped-def]
    res = run_cli("axpy", "--n", "4096", "--time-budget", "0.01", "--out", str(tmp_path / "o"))
    assert res.exit_code == 0, res.output
    assert (tmp_path / "o" / "axpy_axpy_bandwidth.png").exists()
