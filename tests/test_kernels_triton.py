"""Triton kernels checked on the CPU under TRITON_INTERPRET=1 against torch (and the exact emulation).

The interpreter runs fp32, fp16 and fp8 (e4m3) operands faithfully, and bf16 loads and widening,
but triton 3.9's interpreter has two bf16 faults: tl.dot multiplies bf16 operands as raw uint16
bit patterns, and float32 → bf16 casts truncate where the GPU rounds to nearest even. The module's
fixture corrects those two builder calls (tests/triton_interpreter_bf16.py) and leaves the kernels
untouched; a test checks that both faults are still there. The interpreter also does not fuse
a·b + c into one FMA, so fp32-storage results differ from the GPU's in the last bits; with 16-bit
storage the product is exact in fp32 and the FMA kernel matches the emulation bit for bit. The
`gpu`-marked test repeats the bf16 checks on a CUDA device with compiled kernels.
"""

from __future__ import annotations

import os
import sys

# Triton decides at import time (its own @jit helpers such as tl.cdiv) whether to interpret:
# the variable must be set before triton is first imported in this process. tests/conftest.py
# sets it for the whole suite; on a GPU machine run with TRITON_INTERPRET=0 for the gpu tests.
_TRITON_PRELOADED = "triton" in sys.modules and os.environ.get("TRITON_INTERPRET") != "1"
os.environ.setdefault("TRITON_INTERPRET", "1")
_INTERPRETED = os.environ["TRITON_INTERPRET"] == "1"

import importlib  # noqa: E402
import importlib.util  # noqa: E402
from collections.abc import Iterator  # noqa: E402
from types import SimpleNamespace  # noqa: E402

import numpy as np  # noqa: E402
import pytest  # noqa: E402

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

from precisionlab.gemm import Variant, emulated_matmul, random_inputs, store  # noqa: E402
from precisionlab.gemm.scaling import scale_and_round  # noqa: E402

from .triton_interpreter_bf16 import corrected_bf16, interpreter_bf16_faults  # noqa: E402

pytestmark = pytest.mark.skipif(_TRITON_PRELOADED, reason="triton was imported without TRITON_INTERPRET before "
                                "this module; run tests/test_kernels_triton.py on its own")


@pytest.fixture(scope="module")
def k() -> Iterator[SimpleNamespace]:
    """The kernel modules, (re)imported with the interpreter switched on and its bf16 dot corrected."""
    if not _INTERPRETED:
        pytest.skip("TRITON_INTERPRET is off: the CPU interpreter tests do not apply")
    with corrected_bf16():
        yield SimpleNamespace(**{name: importlib.reload(importlib.import_module(f"precisionlab.gemm.kernels.{name}"))
                                 for name in ("matmul", "axpy")})


def test_the_interpreter_still_needs_its_bf16_corrections() -> None:
    """When this fails, Triton's interpreter handles bf16 itself: drop that part of corrected_bf16."""
    if not _INTERPRETED:
        pytest.skip("TRITON_INTERPRET is off")
    assert interpreter_bf16_faults() == ["dot", "fp32 to bf16 cast"]
    with corrected_bf16():
        assert interpreter_bf16_faults() == []


def _rel(c: torch.Tensor, ref: np.ndarray) -> float:
    return float(np.max(np.abs(c.double().numpy() - ref) / np.abs(ref)))


@pytest.mark.parametrize("storage", ["fp16", "bf16"])
def test_fma_kernel_16_bit_is_bit_exact_with_the_emulation(k: SimpleNamespace, storage: str) -> None:
    dtype = {"fp16": torch.float16, "bf16": torch.bfloat16}[storage]
    a, b = random_inputs(32, 48, 64, seed=1)
    c = k.matmul.matmul_fma(torch.from_numpy(a).to(dtype), torch.from_numpy(b).to(dtype), block_m=16, block_n=16)
    np.testing.assert_array_equal(c.double().numpy(), emulated_matmul(a, b, Variant(storage, storage)))


def test_fma_kernel_fp32_against_torch_with_ragged_edges(k: SimpleNamespace) -> None:
    a, b = random_inputs(20, 36, 50, seed=2)
    c = k.matmul.matmul_fma(torch.from_numpy(a), torch.from_numpy(b), block_m=16, block_n=16, block_k=8)
    ref = torch.from_numpy(a).double() @ torch.from_numpy(b).double()
    assert _rel(c, ref.numpy()) < 50 * 2.0**-24


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["fp16", "bf16"])
def test_dot_kernel_16_bit_fp32_acc_against_torch(k: SimpleNamespace, dtype: torch.dtype) -> None:
    a, b = random_inputs(40, 48, 72, seed=3)
    ta, tb = torch.from_numpy(a).to(dtype), torch.from_numpy(b).to(dtype)
    c = k.matmul.matmul_dot(ta, tb, block_m=16, block_n=16, block_k=16)
    ref = (ta.double() @ tb.double()).numpy()  # the 16-bit operands' exact product, summed in float64
    assert _rel(c, ref) < 72 * 2.0**-24
    assert c.shape == (40, 48) and c.dtype == torch.float32


def test_dot_kernel_fp32_ieee_against_torch(k: SimpleNamespace) -> None:
    a, b = random_inputs(16, 16, 64, seed=4)
    c = k.matmul.matmul_dot(torch.from_numpy(a), torch.from_numpy(b), block_m=16, block_n=16, block_k=16)
    ref = torch.from_numpy(a).double() @ torch.from_numpy(b).double()
    assert _rel(c, ref.numpy()) < 64 * 2.0**-24


def test_fp16_accumulator_kernel_is_much_worse(k: SimpleNamespace) -> None:
    a, b = random_inputs(16, 16, 1024, seed=5)
    ta, tb = torch.from_numpy(a).half(), torch.from_numpy(b).half()
    ref = (ta.double() @ tb.double()).numpy()
    wide = _rel(k.matmul.matmul_dot(ta, tb, block_m=16, block_n=16, block_k=16), ref)
    narrow = _rel(k.matmul.matmul_dot(ta, tb, acc_fp16=True, block_m=16, block_n=16, block_k=16), ref)
    assert narrow > 100 * wide
    assert narrow < (1024 // 16 + 1) * 2.0**-11  # one fp16 rounding per 16-wide dot step
    with pytest.raises(ValueError, match="fp16 inputs"):
        k.matmul.matmul_dot(ta.float(), tb.float(), acc_fp16=True)


def test_fp8_per_tensor_dot_against_torch_and_emulation(k: SimpleNamespace) -> None:
    a, b = random_inputs(32, 32, 128, seed=6)
    variant = Variant("e4m3_tensor", "e4m3", scaling="tensor")
    ops = store(a, b, variant)
    a8 = torch.from_numpy(ops.a).float().to(torch.float8_e4m3fn)
    b8 = torch.from_numpy(ops.b).float().to(torch.float8_e4m3fn)
    scale = torch.tensor([float(ops.a_scale.reshape(()) * ops.b_scale.reshape(()))], dtype=torch.float32)
    c = k.matmul.matmul_dot(a8, b8, scale=scale, block_m=16, block_n=16, block_k=32)
    ref = (a8.double() @ b8.double()).numpy() * float(ops.a_scale.reshape(())) * float(ops.b_scale.reshape(()))
    assert _rel(c, ref) < 1e-6
    assert _rel(c, emulated_matmul(a, b, variant)) < 1e-6


def test_fp8_block_scaled_kernel_against_torch_and_emulation(k: SimpleNamespace) -> None:
    a, b = random_inputs(32, 64, 256, seed=7)
    a[:, 128:] *= 30
    variant = Variant("e4m3_block", "e4m3", scaling="block")
    ops = store(a, b, variant)
    b_scales = scale_and_round(b.astype(np.float64), "e4m3", (128, 128)).scales
    a8 = torch.from_numpy(ops.a).float().to(torch.float8_e4m3fn)
    b8 = torch.from_numpy(ops.b).float().to(torch.float8_e4m3fn)
    sa, sb = torch.from_numpy(ops.a_scale).float(), torch.from_numpy(b_scales).float()
    c = k.matmul.matmul_fp8_blockscaled(a8, sa, b8, sb, block_m=16, block_n=32)
    ref = sum((a8[:, s:s + 128].double() @ b8[s:s + 128].double()) * sa[:, i, None].double() * sb[i, 0].double()
              for i, s in enumerate((0, 128)))
    assert _rel(c, ref.numpy()) < 1e-6
    assert _rel(c, emulated_matmul(a, b, variant)) < 1e-6
    with pytest.raises(ValueError, match="scales must be"):
        k.matmul.matmul_fp8_blockscaled(a8, sa[:, :1], b8, sb)


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_axpy_kernel_rounds_once_from_fp32(k: SimpleNamespace, dtype: str) -> None:
    dt = getattr(torch, dtype)
    x = (1.0 - torch.rand(5000)).to(dt)
    y = (1.0 - torch.rand(5000)).to(dt)
    expect = (0.75 * x.float() + y.float()).to(dt)
    k.axpy.axpy(0.75, x, y, block=1024)
    assert torch.equal(y, expect)
    with pytest.raises(ValueError, match="share"):
        k.axpy.axpy(1.0, x, y[:10])


def test_shape_errors(k: SimpleNamespace) -> None:
    with pytest.raises(ValueError, match="M×K"):
        k.matmul.matmul_fma(torch.ones(4, 5), torch.ones(4, 5))


@pytest.mark.gpu
def test_bf16_kernels_on_gpu() -> None:
    """The bf16 kernels compiled for a CUDA device (real tensor cores and cvt.rn), where the interpreter
    tests above need two corrections of the emulator."""
    if not torch.cuda.is_available() or _INTERPRETED:
        pytest.skip("compiled bf16 Triton kernels need a CUDA device (run with TRITON_INTERPRET=0)")
    from precisionlab.gemm.kernels.axpy import axpy
    from precisionlab.gemm.kernels.matmul import matmul_dot, matmul_fma

    a, b = random_inputs(256, 256, 256, seed=8)
    ta, tb = torch.from_numpy(a).cuda().bfloat16(), torch.from_numpy(b).cuda().bfloat16()
    ref = (ta.double() @ tb.double()).cpu().numpy()
    assert _rel(matmul_dot(ta, tb).cpu(), ref) < 256 * 2.0**-24
    np.testing.assert_array_equal(matmul_fma(ta, tb).double().cpu().numpy(),
                                  emulated_matmul(a, b, Variant("bf16", "bf16")))
    x, y = ta.flatten(), tb.flatten().clone()
    expect = (0.75 * x.float() + y.float()).bfloat16()
    assert torch.equal(axpy(0.75, x, y), expect)


def test_gpu_lab_code_path_runs_under_the_interpreter(k: SimpleNamespace) -> None:
    """Every row of the GPU backend (and benchmarks/gpu_lab.py), at toy sizes on the CPU: catches launch
    and shape errors before a GPU is available (times are meaningless here)."""
    importlib.reload(importlib.import_module("precisionlab.gemm.kernels.bench"))
    from precisionlab.labs.gemm_gpu import run_gpu

    result = run_gpu(128, device="cpu", fma_size=32, gemv_n=64, axpy_n=1024, acc_k=256, acc_outputs=16)
    table = result.section("gpu")
    status = dict(zip(table.column("kernel"), table.column("status"), strict=True))
    ms = dict(zip(table.column("kernel"), table.column("ms"), strict=True))
    for name in ("triton_dot_tf32", "triton_dot_fp16", "triton_dot_fp16_acc16", "triton_dot_e4m3_tensor",
                 "triton_e4m3_block", "torch_fp32", "torch_bf16", "triton_fma_fp32", "triton_fma_fp16",
                 "torch_gemv_fp16", "triton_axpy_fp32", "torch_axpy_fp16"):
        assert isinstance(ms[name], float) and ms[name] > 0, name
    for name in ("triton_dot_fp16", "triton_dot_bf16", "triton_dot_e4m3_tensor", "triton_e4m3_block",
                 "triton_fma_fp16", "triton_fma_bf16", "triton_axpy_fp32", "triton_axpy_fp16", "triton_axpy_bf16"):
        assert status[name] == "PASS", name
    f = result.findings
    assert f["machine.copy_gbps"] > 0 and f["gemm.fp8_promotion_error_gain"] > 0
    # Toy sizes stay in cache, so a rate can beat the measured copy-bandwidth roof: only sanity here;
    # the roofline arithmetic itself is checked with hand numbers below.
    assert f["gpu.torch_bf16.fraction_of_ceiling"] > 0
    assert len(result.section("fp8_accumulation").rows) == 5
    roofline = next(fig for fig in result.figures if fig.key == "roofline")
    assert any(series.label == "torch_bf16 128x128x128" for series in roofline.series)
    assert f["roofline.gpu.torch_bf16.bound"] in ("memory", "compute")


def test_fraction_of_ceiling_uses_the_lower_roof(k: SimpleNamespace) -> None:
    bench = importlib.reload(importlib.import_module("precisionlab.gemm.kernels.bench"))
    # 1 GFLOP in 1 ms = 1 TFLOP/s, the best torch bf16 rate; 1 MB moved: intensity 1000 FLOP/B.
    best = bench.GpuRow("torch_bf16", "torch", "bf16", "64x64x64", ms=1.0, flops=1e9, bytes=1e6)
    half = bench.GpuRow("triton_bf16", "triton", "bf16", "64x64x64", ms=2.0, flops=1e9, bytes=1e6)
    report = bench.BenchReport("cpu", rows=[best, half], copy_gbps=10_000.0)  # memory roof 10 PFLOP/s
    assert report.fraction_of_ceiling(best) == pytest.approx(1.0)
    assert report.fraction_of_ceiling(half) == pytest.approx(0.5)
    report.copy_gbps = 0.5  # memory roof 1000 FLOP/B x 0.5 GB/s = 0.5 TFLOP/s now binds
    assert report.fraction_of_ceiling(half) == pytest.approx(1.0)
    copy = bench.GpuRow("axpy", "triton", "fp32", "n", ms=1.0, flops=0, bytes=4e5)  # 0.4 GB/s
    assert report.fraction_of_ceiling(copy) == pytest.approx(0.8)


def test_axpy_gpu_backend_code_path_under_the_interpreter(k: SimpleNamespace) -> None:
    importlib.reload(importlib.import_module("precisionlab.gemm.kernels.bench"))
    from precisionlab.labs.axpy import run_gpu

    result = run_gpu(2048, device="cpu")
    paths = result.section("axpy").column("path")
    assert len(paths) == 3 and all(p.endswith(("fp32", "fp16", "bf16")) for p in paths)
    assert result.findings["axpy.fp16_speedup"] > 0


def test_tuned_skips_configs_that_fail_and_keeps_the_fastest(k: SimpleNamespace,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    bench = importlib.import_module("precisionlab.gemm.kernels.bench")
    speed = {1: 3.0, 2: 1.0, 3: 2.0}

    def kernel(x: int, *, block_m: int) -> torch.Tensor:
        if block_m == 4:
            raise RuntimeError("out of shared memory")
        return torch.tensor([float(x * block_m)])

    monkeypatch.setattr(bench, "median_ms", lambda call, device: speed[call.keywords["block_m"]])
    configs = ({"block_m": 1}, {"block_m": 4}, {"block_m": 2}, {"block_m": 3})
    call, text = bench.tuned(kernel, (5,), configs, "cuda")
    assert call().item() == 10.0 and text == "m=2"
    with pytest.raises(RuntimeError, match="out of shared memory"):
        bench.tuned(kernel, (5,), ({"block_m": 4},), "cuda")
    call, text = bench.tuned(kernel, (5,), configs, "cpu", block_m=3)
    assert call().item() == 15.0 and text == "default config"


def test_fp8_kernels_take_a_column_major_b(k: SimpleNamespace) -> None:
    """The GPU rows pass fp8 B column-major (Hopper's fp8 wgmma layout): same numbers as row-major B."""
    a, b = random_inputs(32, 128, 256, seed=9)
    variant = Variant("e4m3_block", "e4m3", scaling="block")
    ops = store(a, b, variant)
    a8 = torch.from_numpy(ops.a).float().to(torch.float8_e4m3fn)
    b8 = torch.from_numpy(ops.b).float().to(torch.float8_e4m3fn)
    b8_col = b8.t().contiguous().t()
    assert b8_col.stride() == (1, 256) and torch.equal(b8_col.float(), b8.float())
    sa = torch.from_numpy(ops.a_scale).float()
    sb = torch.from_numpy(scale_and_round(b.astype(np.float64), "e4m3", (128, 128)).scales).float()
    row = k.matmul.matmul_fp8_blockscaled(a8, sa, b8, sb, block_m=16, block_n=32)
    col = k.matmul.matmul_fp8_blockscaled(a8, sa, b8_col, sb, block_m=16, block_n=32)
    assert torch.equal(row, col)
    one = torch.ones(1)
    assert torch.equal(k.matmul.matmul_dot(a8, b8, scale=one, block_m=16, block_n=32, block_k=128),
                       k.matmul.matmul_dot(a8, b8_col, scale=one, block_m=16, block_n=32, block_k=128))


def test_accumulation_study_labels_match_the_triton_setting(k: SimpleNamespace,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """Triton promotes an fp8 dot's partial sums into fp32 when max_num_imprecise_acc <= the dot's K
    (WarpGroupDotOp::needsPartialAccumulator); the default on sm_90 is 2^30, i.e. never. So the
    'no promotion' row must pass None (the default) and the promoted tl.dot row 128 with block_k = 128."""
    bench = importlib.reload(importlib.import_module("precisionlab.gemm.kernels.bench"))
    seen: list[tuple[object, object]] = []
    real = bench.matmul_dot

    def spy(*args: object, **kwargs: object) -> torch.Tensor:
        seen.append((kwargs.get("max_num_imprecise_acc"), kwargs.get("block_k")))
        return real(*args, **kwargs)

    monkeypatch.setattr(bench, "matmul_dot", spy)
    rows = dict(bench.accumulation_study(k=256, outputs=16, device="cpu"))
    assert seen == [(None, 128), (128, 128)]
    assert next(iter(rows)) == bench.NO_PROMOTION and bench.PROMOTED in rows


def test_a_failing_row_is_reported_and_the_run_goes_on(k: SimpleNamespace, monkeypatch: pytest.MonkeyPatch,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    """A row that raises on the GPU (e.g. a launch that does not fit) becomes an ERROR row with its message;
    every other row, the lab's findings and benchmarks/gpu_lab.py's table still come out."""
    bench = importlib.reload(importlib.import_module("precisionlab.gemm.kernels.bench"))

    def broken(*args: object, **kwargs: object) -> torch.Tensor:
        raise RuntimeError("boom: out of shared memory\nsecond line")

    monkeypatch.setattr(bench, "matmul_fp8_blockscaled", broken)
    report = bench.run_all(size=128, fma_size=16, gemv_n=32, axpy_n=256, acc_k=128, acc_outputs=16, device="cpu")
    rows = {r.name: r for r in report.rows}
    failed = rows["triton_e4m3_block"]
    assert failed.error == "RuntimeError: boom: out of shared memory" and failed.passed is None
    assert np.isnan(failed.ms) and np.isnan(report.fraction_of_ceiling(failed) or np.nan)
    assert [r.name for r in report.rows if r.error] == ["triton_e4m3_block"]
    assert rows["torch_bf16"].ms > 0 and rows["triton_axpy_fp16"].ms > 0
    acc = dict(report.accumulation)
    assert np.isnan(acc[bench.PROMOTED]) and np.isfinite(acc[bench.NO_PROMOTION])

    spec = importlib.util.spec_from_file_location("gpu_lab", os.path.join(os.path.dirname(__file__), "..",
                                                                          "benchmarks", "gpu_lab.py"))
    assert spec is not None and spec.loader is not None
    gpu_lab = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gpu_lab)
    gpu_lab.print_report(report, 1.0, torch.__version__)
    out = capsys.readouterr().out
    line = next(x for x in out.splitlines() if x.startswith("triton_e4m3_block "))
    assert "ERROR" in line and "boom" in line
    assert "1 row(s) raised and were not measured: triton_e4m3_block" in out
    assert "targets (issue #5):" in out


def test_gpu_sizes_are_checked_before_anything_runs(k: SimpleNamespace) -> None:
    bench = importlib.import_module("precisionlab.gemm.kernels.bench")
    with pytest.raises(ValueError, match="size=1000 is not a multiple of 128"):
        bench.run_all(size=1000, device="cpu")
    with pytest.raises(ValueError, match="axpy_n must be a positive integer"):
        bench.run_all(size=128, axpy_n=0, device="cpu")
