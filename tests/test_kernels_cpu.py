"""torch's CPU weight-only kernels (models.kernels): which schemes they run exactly, the packing, and the stated
tolerance, checked against exact float64 products and torch's own bf16 rounding."""

from __future__ import annotations

import math

import numpy as np
import pytest

from precisionlab.models import kernels
from precisionlab.quant import quantize

torch = pytest.importorskip("torch", reason="the kernels are torch's")


@pytest.mark.parametrize(("scheme", "kernel"), [
    ("int8:row:scale=bf16", kernels.TORCH_INT8),
    ("int8:scale=bf16", kernels.TORCH_INT8),
    ("int8:row:scale=bf16:range=full", kernels.TORCH_INT8),
    ("int4:g128:scale=bf16", kernels.TORCH_INT4),
    ("int4:g64:scale=bf16:range=full", kernels.TORCH_INT4),
    ("int4:g256:scale=bf16:range=full_neg", kernels.TORCH_INT4),
    ("int4:row:scale=bf16", kernels.TORCH_INT4),
    ("int4:scale=bf16", kernels.TORCH_INT4),
    ("int4:g96:scale=bf16", kernels.TORCH_INT4),  # kernel groups of 32
])
def test_schemes_the_kernels_run_exactly(scheme: str, kernel: str) -> None:
    plan = kernels.kernel_plan(scheme)
    assert plan.kernel == kernel and plan.exact and plan.runs == plan.scheme and plan.reason == ""


@pytest.mark.parametrize(("scheme", "twin"), [("int4:g128", "int4:g128:scale=bf16"),
                                              ("int4:g64:scale=fp32", "int4:g64:scale=bf16")])
def test_a_scale_format_the_kernel_does_not_take_names_its_twin(scheme: str, twin: str) -> None:
    plan = kernels.kernel_plan(scheme)
    assert plan.kernel is None and plan.runs == twin and "bf16" in plan.reason


@pytest.mark.parametrize("scheme", ["int8:row", "int8:row:scale=fp32", "int8"])
def test_int8_runs_any_scale_format_with_the_scales_on_the_output(scheme: str) -> None:
    """The int8 kernel's scale is one per output row, so it factors out of the row's sum: int8:row (fp16
    scales, the default) runs on the kernel itself, no twin, its plan saying how."""
    plan = kernels.kernel_plan(scheme)
    assert plan.kernel == kernels.TORCH_INT8 and plan.exact and plan.runs == plan.scheme and plan.reason == ""
    assert "output" in plan.how and kernels.output_scaled(scheme)
    assert kernels.kernel_plan("int8:row:scale=bf16").how == "" and not kernels.output_scaled("int8:row:scale=bf16")


@pytest.mark.parametrize(("scheme", "words"), [
    ("int4:g128:asym", "zero"), ("uint4:g32:min=bf16:scale=bf16", "uint4"), ("nvfp4", "e2m1"),
    ("gguf_q4_0", "llama.cpp"), ("int8:g32:scale=bf16", "one scale per output row"), ("int4:g16:scale=bf16", "groups"),
    ("int4:g128:scale=bf16:axis=0", "axes"), ("int8:row:scale=bf16:outliers=2", "outlier"),
])
def test_schemes_without_a_kernel_say_why(scheme: str, words: str) -> None:
    plan = kernels.kernel_plan(scheme)
    assert plan.kernel is None and plan.runs is None and words in plan.reason


def test_shape_rules() -> None:
    assert kernels.layer_problem("int8:row:scale=bf16", (64, 576)) == ""
    assert "multiple of 16" in kernels.layer_problem("int8:row:scale=bf16", (64, 200))  # wrong sums otherwise
    assert "multiple of 16" in kernels.layer_problem("int4:g64:scale=bf16", (40, 256))
    assert kernels.kernel_group("int4:g128:scale=bf16", 576) == 64  # 576 = 4.5 groups of 128
    assert kernels.kernel_group("int4:g128:scale=bf16", 4096) == 128
    assert kernels.kernel_group("int4:row:scale=bf16", 1536) == 256
    assert "divides" in kernels.layer_problem("int4:g64:scale=bf16", (64, 80))


def _weight(n: int, k: int, seed: int = 0) -> torch.Tensor:
    return torch.from_numpy(np.random.default_rng(seed).standard_normal((n, k)).astype(np.float32) * 0.05)


@pytest.mark.parametrize(("scheme", "shape"), [
    ("int8:row:scale=bf16", (48, 64)), ("int8:scale=bf16", (20, 32)), ("int4:g128:scale=bf16", (48, 576)),
    ("int4:g64:scale=bf16:range=full:scaleround=up", (32, 192)), ("int4:row:scale=bf16", (16, 96)),
    ("int4:scale=bf16", (16, 64)),
])
def test_the_kernel_reads_the_emulated_weight(scheme: str, shape: tuple[int, int]) -> None:
    """One-hot activations read every weight back: the kernel's output is its fp32 weight (one exact product,
    nothing to accumulate) rounded to bf16, which torch's own cast gives from precisionlab's dequantized weight."""
    w = _weight(*shape)
    packed = kernels.pack(w, scheme)
    emulated = quantize(w, scheme).dequantize()
    assert np.array_equal(packed.emulated, emulated)
    eye = torch.eye(shape[1], dtype=torch.bfloat16)
    read = kernels.kernel_matmul(packed, eye).float().numpy().T
    expected = torch.from_numpy(emulated).to(torch.bfloat16).float().numpy()
    assert np.array_equal(read, expected)


def test_power_of_two_scales_read_back_bit_for_bit() -> None:
    """With power-of-two scales every grid point fits bf16: the one-hot read-back is the emulation itself."""
    codes = np.random.default_rng(1).integers(-7, 8, size=(32, 128)).astype(np.float32)
    scales = 2.0 ** np.random.default_rng(2).integers(-8, -2, size=(32, 1)).astype(np.float32)
    w = torch.from_numpy(codes * scales)  # each row's amax is 7 * its scale
    packed = kernels.pack(w, "int4:row:scale=bf16")
    read = kernels.kernel_matmul(packed, torch.eye(128, dtype=torch.bfloat16)).float().numpy().T
    assert np.array_equal(read, codes * scales)


@pytest.mark.parametrize("scheme", ["int8:row:scale=bf16", "int8:row", "int4:g128:scale=bf16", "int4:g64:scale=bf16"])
@pytest.mark.parametrize("m", [1, 3, 64])
def test_outputs_within_the_stated_bound(scheme: str, m: int) -> None:
    w = _weight(192, 576, seed=m)
    packed = kernels.pack(w, scheme)
    x = torch.randn(m, 576, generator=torch.Generator().manual_seed(m))
    y = kernels.kernel_matmul(packed, x.to(torch.bfloat16)).double().numpy()
    fraction = kernels.bound_fraction(y, x.numpy(), packed.emulated, kernels.output_rounding(packed, torch.float32))
    assert fraction <= 1.0
    exact = x.double().numpy() @ packed.emulated.astype(np.float64).T
    rel = np.linalg.norm(y - exact) / np.linalg.norm(exact)
    assert 1e-4 < rel < 2.0**-7  # bf16 activations: about 2^-9, never the weight grid's error


def test_a_wrong_grid_breaks_the_bound() -> None:
    """The bound is sharp enough to see a packing mistake: the groups' scales in the wrong order."""
    w = _weight(64, 512)
    packed = kernels.pack(w, "int4:g128:scale=bf16")
    x = torch.randn(4, 512, generator=torch.Generator().manual_seed(0))
    good = kernels.kernel_matmul(packed, x.to(torch.bfloat16)).double().numpy()
    assert kernels.bound_fraction(good, x.numpy(), packed.emulated) <= 1.0
    packed.scales = packed.scales.flip(0).contiguous()
    bad = kernels.kernel_matmul(packed, x.to(torch.bfloat16)).double().numpy()
    assert kernels.bound_fraction(bad, x.numpy(), packed.emulated) > 1.0


def test_the_bound_follows_its_derivation() -> None:
    """u |y| + (1 + u)(u + (1 + u) gamma_K) sum |x||w|, computed by hand for one output."""
    x = np.array([[1.0, -2.0, 0.5]])
    w = np.array([[0.25, 0.5, -1.0]], dtype=np.float32)
    y, bound = kernels.output_bound(x, w)
    u, gamma = 2.0**-8, 3 * 2.0**-24 / (1 - 3 * 2.0**-24)
    assert y[0, 0] == 0.25 - 1.0 - 0.5
    assert math.isclose(bound[0, 0], u * 1.25 + (1 + u) * (u + (1 + u) * gamma) * (0.25 + 1.0 + 0.5), rel_tol=1e-15)


def test_int8_row_with_fp16_scales_reads_back_the_emulated_weight_bit_for_bit() -> None:
    """One-hot activations through int8:row's kernel path: each output is q (exact in bf16) times its fp16 row
    scale in float32, one exact product: precisionlab's dequantized int8:row weight itself, bit for bit (the
    independent reference: quant.quantize); torch.profiler sees the int8 kernel run."""
    w = _weight(48, 64, seed=3)
    packed = kernels.pack(w, "int8:row")
    assert packed.output_scales.dtype == torch.float16
    assert torch.equal(packed.scales, torch.ones(48, dtype=torch.bfloat16))
    assert packed.stored_bytes == 48 * 64 + 2 * 48 + 2 * 48  # codes, the kernel's unit bf16 scales, the fp16 scales
    eye = torch.eye(64, dtype=torch.bfloat16)
    box: dict = {}
    ops = list(kernels.KERNEL_OPS.values())
    calls = kernels.op_calls(lambda: box.update(y=kernels.kernel_matmul(packed, eye)), ops)
    assert calls == {"aten::_weight_int8pack_mm": 1, "aten::_weight_int4pack_mm_for_cpu": 0}
    assert box["y"].dtype == torch.float32
    assert np.array_equal(box["y"].numpy().T, quantize(w, "int8:row").dequantize())


def test_the_output_rounding_follows_its_derivation() -> None:
    """t = u for the kernel's bf16 output; (1 + u)(1 + u32)(1 + u_model) - 1 with the scales on the output."""
    u, u32 = 2.0**-8, 2.0**-24
    plain, scaled = kernels.pack(_weight(16, 64), "int8:row:scale=bf16"), kernels.pack(_weight(16, 64), "int8:row")
    assert kernels.output_rounding(plain, torch.bfloat16) == u
    assert kernels.output_rounding(scaled, torch.float32) == (1 + u) * (1 + u32) - 1
    assert kernels.output_rounding(scaled, "bfloat16") == (1 + u) * (1 + u32) * (1 + u) - 1
    x, w = np.array([[1.0, -2.0]]), np.array([[0.5, 0.25]], dtype=np.float32)
    t, gamma = 0.01, 2 * u32 / (1 - 2 * u32)
    _, bound = kernels.output_bound(x, w, rounding=t)
    assert math.isclose(bound[0, 0], t * 0.0 + (1 + t) * (u + (1 + u) * gamma) * 1.0, rel_tol=1e-15)
    with pytest.raises(ValueError, match="float64"):
        kernels.output_rounding(scaled, "float64")


def test_float32_activations_path() -> None:
    w = _weight(48, 256)
    packed = kernels.pack(w, "int8:row:scale=bf16", activation="float32")
    x = torch.randn(2, 256, generator=torch.Generator().manual_seed(3))
    y = kernels.kernel_matmul(packed, x).double().numpy()
    exact = x.double().numpy() @ packed.emulated.astype(np.float64).T
    assert np.abs(y - exact).max() <= 256 * 2.0**-23 * (np.abs(x.double().numpy()) @ np.abs(packed.emulated).T).max()


def test_pack_takes_a_quantized_tensor_of_its_scheme() -> None:
    w = _weight(32, 128)
    q = quantize(w, "int4:g64:scale=bf16")
    assert np.array_equal(kernels.pack(q, "int4:g64:scale=bf16").emulated, q.dequantize())
    with pytest.raises(ValueError, match="holds"):
        kernels.pack(q, "int4:g128:scale=bf16")
    with pytest.raises(ValueError, match="no kernel"):
        kernels.pack(w, "int4:g64")


def _tiny() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(64, 48), torch.nn.ReLU(), torch.nn.Linear(48, 32, bias=False),
                               torch.nn.ReLU(), torch.nn.Linear(32, 16))


def test_swap_installs_and_removes() -> None:
    model = _tiny()
    x = torch.randn(2, 5, 64, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        before = model(x)
        swap = kernels.prepare_swap(model, "int8:row:scale=bf16", exclude=())
        assert set(swap.swapped) == {"0", "2", "4"} and not swap.skipped  # 48 inputs: a multiple of 16
        swap.install()
        on_kernel = model(x)
        first = model[0]
        y = first(x) - first.bias
        assert y.shape == (2, 5, 48)
        assert kernels.bound_fraction(y.numpy(), x.numpy(), first.packed.emulated) <= 1.0
        swap.remove()
        assert torch.equal(model(x), before)
    assert on_kernel.shape == before.shape and not torch.equal(on_kernel, before)


def test_swap_leaves_a_layer_the_kernel_cannot_take() -> None:
    model = torch.nn.Sequential(torch.nn.Linear(64, 40), torch.nn.Linear(40, 16))
    swap = kernels.prepare_swap(model, "int4:g32:scale=bf16", exclude=())
    assert swap.swapped == {}
    assert "0" in swap.skipped and "multiple of 16" in swap.skipped["0"]  # 40 outputs
    assert "1" in swap.skipped  # 40 inputs: no group of 32 divides them
    with pytest.raises(ValueError, match="no kernel"):
        kernels.prepare_swap(model, "nvfp4")
