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
    data = json.loads(res.stdout)
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


# --------------------------------------------------------------------------- honest paths
def test_bf16_bit_pattern_step_matches_ml_dtypes() -> None:
    ml_dtypes = pytest.importorskip("ml_dtypes")
    import numpy as np

    from precisionlab.gemm.timing import bf16_axpy_step, bf16_bits
    from precisionlab.rounding.bf16 import bf16_to_float32

    rng = np.random.default_rng(5)
    x = (rng.standard_normal(1 << 16) * 10.0 ** rng.integers(-30, 30, 1 << 16)).astype(np.float32)
    y = (rng.standard_normal(1 << 16) * 10.0 ** rng.integers(-30, 30, 1 << 16)).astype(np.float32)
    x_bits, y_bits = bf16_bits(x), bf16_bits(y)
    # the bit patterns are ml_dtypes' own float32 -> bfloat16 cast (nearest-even)
    assert np.array_equal(x_bits, x.astype(ml_dtypes.bfloat16).view(np.uint16))
    alpha = np.float32(0.75)
    expected = (bf16_to_float32(x_bits) * alpha + bf16_to_float32(y_bits)).astype(ml_dtypes.bfloat16).view(np.uint16)
    bf16_axpy_step(alpha, x_bits, y_bits)
    assert np.array_equal(y_bits, expected)


def test_without_torch_the_16_bit_rows_say_they_measure_numpy_software(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    monkeypatch.setitem(sys.modules, "torch", None)  # `import torch` now raises ImportError
    monkeypatch.setitem(sys.modules, "ml_dtypes", None)  # and the bf16 path must not need ml_dtypes
    result = run(n=1 << 12, time_budget=0.01)
    f = result.findings
    assert f["axpy.fp32.software"] is False and f["axpy.fp32.path"] == "numpy fp32 axpy"
    assert f["axpy.fp16.software"] is True and f["axpy.fp16.path"] == "numpy fp16 axpy (software fp16)"
    assert f["axpy.bf16.software"] is True and f["axpy.bf16.path"].startswith("numpy bf16 axpy (uint16 bit patterns")
    assert "the fp16 and bf16 rows measure numpy's software 16-bit arithmetic, not bandwidth" in result.summary.lower()
    assert "install torch" in result.summary
    assert result.section("axpy").column("measures") == ["bandwidth", "numpy software arithmetic",
                                                         "numpy software arithmetic"]
    assert "not a bandwidth measurement" in result.section("axpy").note
    assert [s.key for s in result.skipped] == ["torch_axpy"]
    assert f["skipped.torch_axpy"] == "torch is not installed"


def test_with_torch_the_16_bit_rows_run_torch() -> None:
    pytest.importorskip("torch")
    result = run(n=1 << 12, time_budget=0.01)
    f = result.findings
    for precision in ("fp16", "bf16"):
        assert f[f"axpy.{precision}.path"] == f"torch {precision} axpy"
        assert f[f"axpy.{precision}.software"] is False
    assert result.skipped == [] and "software" not in result.summary
    assert set(result.section("axpy").column("measures")) == {"bandwidth"}


def test_axpy_timing_library_choice() -> None:
    t = axpy_timing("fp16", 1 << 10, budget_s=0.01, library="numpy")
    assert t.library == "numpy" and t.software
    assert not axpy_timing("fp32", 1 << 10, budget_s=0.01, library="numpy").software
    with pytest.raises(ValueError, match="library"):
        axpy_timing("fp32", 1 << 10, library="cupy")


def test_every_axpy_finding_is_documented(monkeypatch: pytest.MonkeyPatch) -> None:
    import re
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    docs = (root / "README.md").read_text() + (root / "docs" / "gemm.md").read_text()
    monkeypatch.setitem(sys.modules, "torch", None)  # the core-install keys, skipped.torch_axpy included
    keys = set(run(n=1 << 10, time_budget=0.01).findings)
    for key in sorted(keys):
        generic = re.sub(r"^axpy\.(fp32|fp16|bf16)\.", "axpy.<dtype>.", key)
        leaf = generic.rsplit(".", 1)
        documented = f"`{generic}`" in docs or (generic.startswith("axpy.<dtype>.") and f"`.{leaf[1]}`" in docs)
        assert documented, f"finding {key} is not documented in the README or docs/gemm.md"
