"""The gemm lab and `precisionlab gemm` command at small sizes."""

from __future__ import annotations

import json

import pytest

from precisionlab.labs import get_lab
from precisionlab.labs.gemm import run

QUICK = get_lab("gemm").quick


@pytest.fixture(scope="module")
def result():  # type: ignore[no-untyped-def]
    return run(**QUICK)


def test_lab_is_registered_in_order() -> None:
    lab = get_lab("gemm")
    assert lab.order == 30 and get_lab("axpy").order == 31


def test_variant_findings_and_statuses(result) -> None:  # type: ignore[no-untyped-def]
    f = result.findings
    for name in ("fp32", "fp16", "bf16", "fp16_acc16", "e4m3_tensor", "e4m3fnuz_tensor", "e4m3_block",
                 "e4m3_narrowacc", "e4m3_narrowacc_promoted", "gemv_fp16"):
        assert isinstance(f[f"gemm.{name}.max_rel_err"], float)
        assert isinstance(f[f"gemm.{name}.passed"], bool)
    table = result.section("variants")
    status = dict(zip(table.column("variant"), table.column("status"), strict=True))
    assert status["fp16_acc16"] == "FAILED (expected)"
    assert status["fp16"] == "PASS" and status["bf16"] == "PASS" and status["fp32"] == "PASS"
    assert f["gemm.fp16_acc16.passed"] is False


def test_headline_ratios(result) -> None:  # type: ignore[no-untyped-def]
    f = result.findings
    # ulp(1) ratio 2^-7 / 2^-10 = 8; a 64³ sample scatters around it
    assert 4 < f["gemm.bf16_over_fp16_error_ratio"] < 16
    assert f["gemm.fp16_acc_error_ratio"] > 10
    assert f["gemm.fp8_promotion_error_gain"] > 1
    assert f["gemm.fp8_promotion_acc_only_gain"] > 3
    assert f["gemm.traffic.fp32_read_intensity"] == QUICK.get("tile", 32) / 4
    assert f["gemm.traffic.fp16_read_intensity"] == QUICK.get("tile", 32) / 2
    assert f["machine.copy_gbps"] > 0


def test_narrow_accumulator_error_grows_with_k_and_promotion_keeps_it_flat(result) -> None:  # type: ignore[no-untyped-def]
    table = result.section("fp8_accumulation")
    grows = table.column("e4m3_narrowacc acc-only")
    flat = table.column("e4m3_narrowacc_promoted acc-only")
    assert grows[-1] > 2 * grows[0]
    assert flat[-1] < 2 * flat[0]


def test_bits_table_follows_ulp_prediction(result) -> None:  # type: ignore[no-untyped-def]
    f = result.findings
    for fmt in ("bf16", "e4m3", "e5m2"):
        assert 0.25 < f[f"gemm.bits.{fmt}.measured_over_predicted"] < 4
    assert f["gemm.bits.tf32.max_rel_err"] == f["gemm.bits.fp16.max_rel_err"]  # both keep 10 mantissa bits


def test_figures_are_data(result) -> None:  # type: ignore[no-untyped-def]
    keys = {fig.key for fig in result.figures}
    assert keys == {"error_vs_bits", "fp8_accumulation", "roofline"}


def test_cli_json_and_png(run_cli, tmp_path) -> None:  # type: ignore[no-untyped-def]
    out = tmp_path / "out"
    res = run_cli("gemm", "--size", "64", "--gemv-size", "256", "--k-max", "256", "--sweep-outputs", "8",
                  "--ceiling-size", "64", "--time-budget", "0.01", "--accelerator", "h200", "--json",
                  "--out", str(out))
    assert res.exit_code == 0, res.output
    data = json.loads(res.stdout)
    assert data["lab"] == "gemm"
    assert data["findings"]["gemm.fp16_acc16.passed"] is False
    assert (out / "gemm_roofline.png").exists()
    ceilings = next(s for s in data["sections"] if s["key"] == "ceilings")
    assert any(row[0].startswith("H200") for row in ceilings["rows"])
    # H200 ridge for bf16 = 989.5e3 / 4800 ≈ 206 FLOP/B: a T=32 tile (intensity < 16) and a GEMV are memory-bound
    assert data["findings"]["roofline.datasheet.fp16.bound"] == "memory"
    assert data["findings"]["roofline.datasheet.gemv_fp16.bound"] == "memory"
    assert data["findings"]["roofline.datasheet.fp16.attainable_tflops"] < 16 * 4800 / 1e3


@pytest.mark.parametrize("args", [("--size", "0"), ("--size", "100"), ("--gemv-size", "-4"), ("--tile", "0"),
                                  ("--peak-tflops", "9"), ("--backend", "tpu"), ("--acc-bits", "30"),
                                  ("--k-max", "100"), ("--time-budget", "0"), ("--time-budget", "nan"),
                                  ("--accelerator", "h900"), ("--bandwidth", "nan", "--peak-tflops", "5"),
                                  ("--peak-tflops", "inf", "--bandwidth", "5"), ("--sweep-outputs", "0"),
                                  ("--backend", "gpu", "--gpu-size", "100")])
def test_cli_bad_input_is_one_line_exit_2(run_cli, args) -> None:  # type: ignore[no-untyped-def]
    res = run_cli("gemm", *args)
    assert res.exit_code == 2
    lines = res.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), res.output


def test_cli_error_message_names_the_problem(run_cli) -> None:  # type: ignore[no-untyped-def]
    res = run_cli("gemm", "--size", "100")
    assert res.output.strip() == "error: M=100 is not a multiple of the tile 32"


def test_gpu_backend_without_cuda_is_a_clean_error(run_cli) -> None:  # type: ignore[no-untyped-def]
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("a CUDA device is present")
    res = run_cli("gemm", "--backend", "gpu")
    assert res.exit_code == 2
    assert "no CUDA device" in res.output


def test_importing_the_gemm_code_imports_no_torch_or_triton() -> None:
    import subprocess
    import sys

    code = ("import sys, precisionlab, precisionlab.gemm, precisionlab.gemm.kernels, precisionlab.labs.gemm, "
            "precisionlab.labs.gemm_gpu, precisionlab.labs.axpy, precisionlab.cli.gemm; "
            "print(sorted(m for m in ('torch', 'triton', 'matplotlib') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_big_tiles_cross_the_fp32_ridge_of_a_datasheet() -> None:
    """H200: fp32 ridge = 67e3 / 4800 ≈ 14 FLOP/B. A T=128 fp32 tile reads at T/4 = 32 FLOP/B: compute-bound."""
    options = {**QUICK, "size": 128, "tile": 128, "gemv_size": 128}
    result = run(**options, accelerator="h200")
    assert result.findings["roofline.datasheet.fp32.bound"] == "compute"
    assert result.findings["roofline.datasheet.gemv_fp32.bound"] == "memory"


def test_measured_roof_places_each_variant_by_hand_intensity(result) -> None:  # type: ignore[no-untyped-def]
    """64³ with T = 32: 4 tiles each read a 32×64 strip of A and a 64×32 strip of B, and C is written once
    in fp32, so fp32 moves 4·4096·4 + 4096·4 bytes and 16-bit 4·4096·2 + 4096·4, for 2·64³ FLOPs."""
    f = result.findings
    assert QUICK["size"] == 64 and QUICK.get("tile", 32) == 32
    flops = 2 * 64**3
    intensity = {"fp32": flops / (4 * 4096 * 4 + 4096 * 4), "fp16": flops / (4 * 4096 * 2 + 4096 * 4),
                 "bf16": flops / (4 * 4096 * 2 + 4096 * 4)}
    for prec, i in intensity.items():
        roof = f.get(f"machine.{prec}_matmul_gflops")
        if roof is None:
            continue
        memory_rate = i * f["machine.copy_gbps"]
        assert f[f"roofline.measured.{prec}.bound"] == ("memory" if memory_rate < roof else "compute")
        assert f[f"roofline.measured.{prec}.attainable_tflops"] == pytest.approx(min(memory_rate, roof) / 1e3)
    assert "roofline.measured.e4m3_tensor.bound" not in f  # no fp8 matmul unit measured on a CPU
