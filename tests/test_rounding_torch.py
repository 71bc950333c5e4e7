"""torch tensors give the same bits as numpy arrays, keep dtype, shape and device."""

from __future__ import annotations

import functools
import itertools
import math
import warnings
from fractions import Fraction

import numpy as np
import pytest

import precisionlab as pl
from precisionlab.formats import Encoding, FloatFormat

from .reference import RefFormat, ref_format, same_bits

torch = pytest.importorskip("torch")

FORMATS = ["e4m3", "e5m2", "e4m3fnuz", "e5m2fnuz", "bf16", "fp16", "e2m1", "e3m2", "tf32", "ue8m0", "int8"]


def edge_values(name: str) -> np.ndarray:
    fmt = pl.get_format(name)
    top = fmt.max_finite
    rng = np.random.default_rng(11)
    body = rng.standard_normal(2000) * np.exp2(rng.integers(-20, 20, 2000))
    edges = [top, -top, top * 1.03, top * 1.0625, top * 1.07, top * 1.2, 1e30, -1e30, np.inf, -np.inf, 0.0, -0.0]
    with np.errstate(over="ignore"):
        return np.concatenate([body, edges]).astype(np.float32)


@pytest.mark.parametrize("name", FORMATS)
@pytest.mark.parametrize("dtype", ["float32", "float64", "bfloat16", "float16"])
@pytest.mark.parametrize("overflow", [None, "saturate"])
def test_torch_matches_numpy(name: str, dtype: str, overflow: str | None) -> None:
    fmt = pl.get_format(name)
    x = torch.from_numpy(edge_values(name)).to(getattr(torch, dtype))
    if not fmt.is_float and overflow is None:
        overflow = "saturate"
    ours = pl.round_to(x, name, overflow=overflow)
    as_numpy = pl.round_to(x.to(torch.float64).numpy(), name, overflow=overflow)
    assert ours.device == x.device and ours.shape == x.shape
    assert same_bits(ours.to(torch.float64).numpy(), as_numpy).all()


def test_torch_nan_goes_through_the_exact_patch() -> None:
    x = torch.tensor([1.0, float("nan"), 1000.0, -1000.0])
    out = pl.round_to(x, "e4m3")
    assert out[0] == 1.0 and torch.isnan(out[1:]).all()
    sat = pl.round_to(x, "e4m3", overflow="saturate")
    assert sat.tolist()[2:] == [448.0, -448.0] and torch.isnan(sat[1])


def test_torch_output_dtype_rules() -> None:
    half = torch.ones(3, dtype=torch.float16)
    assert pl.round_to(half, "e5m2").dtype == torch.float16
    assert pl.round_to(half, "bf16").dtype == torch.float32
    assert pl.round_to(torch.ones(3, dtype=torch.bfloat16), "e4m3").dtype == torch.bfloat16
    assert pl.round_to(torch.ones(3, dtype=torch.bfloat16), "fp16").dtype == torch.float32
    assert pl.round_to(torch.ones(3, dtype=torch.float64), "bf16").dtype == torch.float64


def test_torch_encode_decode() -> None:
    x = torch.tensor([0.1, -2.0, 448.0])
    codes = pl.encode(x, "e4m3")
    assert codes.dtype == torch.uint8 and codes.tolist() == [0x1D, 0xC0, 0x7E]
    assert torch.equal(pl.decode(codes, "e4m3"), pl.round_to(x, "e4m3"))
    with pytest.raises(TypeError):
        pl.round_to(torch.arange(3), "e4m3")


def test_import_does_not_pull_heavy_modules() -> None:
    import subprocess
    import sys

    code = ("import sys, precisionlab, precisionlab.rounding, precisionlab.labs; "
            "print(','.join(m for m in ('torch', 'triton', 'matplotlib', 'rich') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


# --------------------------------------------------------------------------- torch's fast path
# round_to on a CPU float32 / bfloat16 / float16 tensor with nearest-even takes torch's own cast
# for the formats torch has. These tests hold that path against the numpy engine (every probe) and
# the exact rational reference (tests/reference.py, whose limits come from the definition alone).
TORCH_FAST = ["e4m3", "e5m2", "e4m3fnuz", "e5m2fnuz", "bf16", "fp16"]
TORCH_INPUTS = ["float32", "bfloat16", "float16"]
_INT_VIEW = {"float32": (torch.int32, 32), "bfloat16": (torch.int16, 16), "float16": (torch.int16, 16)}


def policies(ref: RefFormat) -> list[str | None]:
    """The default and every policy the format allows."""
    return [None, "saturate"] + ["inf"] * ref.has_inf + ["nan"] * ref.has_nan


@functools.cache
def tie_points(ref: RefFormat) -> np.ndarray:
    """Every finite member, every midpoint between neighbours, the overflow tie above max_finite
    and a value past it, all >= 0, from the reference's enumeration of the codes."""
    members = ref.finite_values()
    mids = [(a + b) / 2 for a, b in itertools.pairwise(members)]
    top = [ref.midpoint_above(ref.max_finite), 2 * ref.max_finite]
    return np.unique([float(v) for v in members + mids + top])


def bracket(points: np.ndarray, dtype: str) -> torch.Tensor:
    """For each point p >= 0: the input-dtype values just below and above it (p itself when the dtype
    holds it) and the next bit pattern beyond each (one input ulp), with both signs; plus the specials."""
    int_dtype, width = _INT_VIEW[dtype]
    float_dtype = getattr(torch, dtype)
    p = torch.from_numpy(points)
    nearest = p.to(float_dtype)  # within one ulp of p (torch may round twice; the bracket below fixes it)
    bits = nearest.view(int_dtype).to(torch.int64)
    value = nearest.to(torch.float64)
    low = torch.where(value <= p, bits, bits - 1)
    high = torch.where(value >= p, bits, bits + 1)
    lows, highs = low.to(int_dtype).view(float_dtype), high.to(int_dtype).view(float_dtype)
    assert (lows.to(torch.float64) <= p).all() and (highs.to(torch.float64) >= p).all()
    magnitudes = torch.cat([low - 1, low, high, high + 1]).clamp(0, (1 << (width - 1)) - 1)
    sign = -(1 << (width - 1))  # the sign bit as a signed integer of that width
    patterns = torch.cat([magnitudes, magnitudes + sign]).to(int_dtype)
    specials = torch.tensor([math.inf, -math.inf, math.nan, 0.0, -0.0, 1e30, -1e30], dtype=torch.float64)
    return torch.cat([patterns.view(float_dtype), specials.to(float_dtype)])


def reference_points(points: np.ndarray, ref: RefFormat) -> np.ndarray:
    """The tie points where the exact (slow) reference is evaluated: all of them for formats of
    8 bits; for 16-bit ones the 256 smallest (zero, the subnormals), 256 either side of the smallest
    normal, the 256 largest (the top binade and the overflow tie) and every 61st."""
    if ref.E + ref.M + int(ref.signed) <= 8:
        return points
    boundary = int(np.searchsorted(points, float(Fraction(2) ** ref.emin)))
    keep = np.zeros(points.size, dtype=bool)
    keep[:256] = keep[-256:] = keep[max(boundary - 256, 0):boundary + 256] = keep[::61] = True
    return points[keep]


@pytest.fixture
def fast_path_calls(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The names of the formats the torch fast path was called for (so a test knows what it compared)."""
    from precisionlab.rounding import torch_path

    calls: list[str] = []
    original = torch_path.round_tensor

    def spy(x, fmt, *args, **kwargs):  # type: ignore[no-untyped-def]
        calls.append(fmt.name)
        return original(x, fmt, *args, **kwargs)

    monkeypatch.setattr(torch_path, "round_tensor", spy)
    return calls


def check_torch_path(fmt: FloatFormat, dtype: str, calls: list[str], expect_fast: bool) -> None:
    """round_to on tensors of dtype against the numpy engine on every probe, and against the exact
    reference on the probes around reference_points, under every overflow policy (the policy decides
    only past max_finite, so a policy other than the default meets the reference there alone)."""
    ref = ref_format(fmt)
    points = tie_points(ref)
    every, sample = bracket(points, dtype), bracket(reference_points(points, ref), dtype)
    if not ref.has_nan:  # a NaN sent there is an error (tested elsewhere)
        every, sample = every[~every.isnan()], sample[~sample.isnan()]
    for overflow in policies(ref):
        for x, against_reference in ((every, False), (sample, True)):
            x64 = x.to(torch.float64).numpy()
            if against_reference and overflow is not None:
                past = ~(np.abs(x64) <= float(ref.max_finite))  # NaN included
                x, x64 = x[torch.from_numpy(past)], x64[past]
            calls.clear()
            ours = pl.round_to(x, fmt, overflow=overflow).to(torch.float64).numpy()
            assert (calls == [fmt.name]) is expect_fast, (fmt, dtype, calls)
            if against_reference:
                expected = np.array([ref.round(float(v), "nearest_even", overflow) for v in x64])
            else:
                expected = pl.round_to(x64, fmt, overflow=overflow)  # a float64 array: the numpy engine
            bad = ~same_bits(ours, expected)
            assert not bad.any(), (fmt.name, dtype, overflow, x64[bad][:4], ours[bad][:4], expected[bad][:4])


@pytest.mark.parametrize("dtype", TORCH_INPUTS)
@pytest.mark.parametrize("name", TORCH_FAST)
def test_torch_fast_path_matches_engine_and_reference_on_every_midpoint(
        name: str, dtype: str, fast_path_calls: list[str]) -> None:
    fmt = pl.get_format(name)
    assert isinstance(fmt, FloatFormat)
    check_torch_path(fmt, dtype, fast_path_calls, expect_fast=True)


def _label(fmt: FloatFormat) -> str:
    return f"{fmt.name}:e{fmt.exp_bits}m{fmt.man_bits}b{fmt.bias}{fmt.encoding.value}"


TORCH_LAYOUTS_UNDER_OTHER_NAMES = [
    FloatFormat("e4m3", 4, 3, 8, Encoding.FNUZ),  # named like OCP e4m3, defined as e4m3fnuz
    FloatFormat("e5m2", 5, 2, 16, Encoding.FNUZ),
    FloatFormat("my_fp8", 4, 3, 7, Encoding.FN),
    FloatFormat("brain", 8, 7, 127),
]


@pytest.mark.parametrize("fmt", TORCH_LAYOUTS_UNDER_OTHER_NAMES, ids=_label)
def test_torch_fast_path_is_chosen_by_the_defining_fields(fmt: FloatFormat, fast_path_calls: list[str]) -> None:
    check_torch_path(fmt, "float32", fast_path_calls, expect_fast=True)


LAYOUTS_TORCH_LACKS = [
    FloatFormat("e4m3", 4, 3, 6, Encoding.FN),  # OCP e4m3's name and shape, another bias
    FloatFormat("fp16", 5, 10, 14),
    FloatFormat("e4m3fnuz", 4, 3, 8, Encoding.FINITE),
]


@pytest.mark.parametrize("fmt", LAYOUTS_TORCH_LACKS, ids=_label)
def test_formats_torch_lacks_take_the_engine_even_when_named_like_torchs(
        fmt: FloatFormat, fast_path_calls: list[str]) -> None:
    check_torch_path(fmt, "float32", fast_path_calls, expect_fast=False)


def test_custom_fnuz_named_e4m3_is_not_torchs_e4m3fn() -> None:
    # 300 is past e4m3fnuz's 240 (NaN by default); 0.001 is nearest its smallest subnormal 2^-10.
    fmt = FloatFormat("e4m3", 4, 3, 8, Encoding.FNUZ)
    ref = ref_format(fmt)
    assert math.isnan(ref.round(300.0)) and ref.round(0.001) == 2.0**-10
    out = pl.round_to(torch.tensor([300.0, 0.001]), fmt)
    assert math.isnan(out[0].item()) and out[1].item() == 2.0**-10


# --------------------------------------------------------------------------- autograd
# One rule on every path (torch's cast, the numpy engine, float64 tensors, every mode): the result
# is detached; straight_through=True returns the same values with the identity gradient.
GRAD_FORMATS = ["e4m3", "bf16", "fp16", "fp32", "e2m1", "int8"]
GRAD_DTYPES = ["float32", "bfloat16", "float16", "float64"]
ALL_MODES = ["nearest_even", "nearest_away", "toward_zero", "stochastic"]


def grad_input(name: str, dtype: str) -> torch.Tensor:
    """Ordinary values, a negative zero, one far past every format's range, ±inf, and NaN where the
    format has one: the values a naive x + (rounded - x) would get wrong."""
    values = [0.3, -1.7, 2.5, 100.0, -0.0, 1e30, math.inf, -math.inf]
    if pl.get_format(name).has_nan:
        values.append(math.nan)
    return torch.tensor(values, dtype=getattr(torch, dtype)).requires_grad_()


@pytest.mark.parametrize("mode", ALL_MODES)
@pytest.mark.parametrize("dtype", GRAD_DTYPES)
@pytest.mark.parametrize("name", GRAD_FORMATS)
def test_round_to_is_detached_by_default(name: str, dtype: str, mode: str) -> None:
    x = grad_input(name, dtype)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out = pl.round_to(x, name, rounding=mode, rng=0)
    assert not out.requires_grad and out.grad_fn is None
    assert same_bits(out.to(torch.float64).numpy(), pl.round_to(x.detach(), name, rounding=mode, rng=0)
                     .to(torch.float64).numpy()).all()


@pytest.mark.parametrize("mode", ALL_MODES)
@pytest.mark.parametrize("dtype", GRAD_DTYPES)
@pytest.mark.parametrize("name", GRAD_FORMATS)
def test_straight_through_keeps_the_values_and_passes_the_gradient_unchanged(name: str, dtype: str,
                                                                             mode: str) -> None:
    x = grad_input(name, dtype)
    plain = pl.round_to(x.detach(), name, rounding=mode, rng=0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out = pl.round_to(x, name, rounding=mode, rng=0, straight_through=True)
        assert out.requires_grad and out.dtype == plain.dtype and out.shape == x.shape
        assert same_bits(out.detach().to(torch.float64).numpy(), plain.to(torch.float64).numpy()).all()
        upstream = torch.arange(1.0, x.numel() + 1, dtype=out.dtype)
        out.backward(upstream)
    assert x.grad is not None and x.grad.dtype == x.dtype
    assert torch.equal(x.grad, upstream.to(x.dtype))  # d round(x) / dx taken as 1


def test_straight_through_without_a_graph_and_outside_torch() -> None:
    plain = torch.tensor([0.3, 3.0])
    out = pl.round_to(plain, "e4m3", straight_through=True)
    assert not out.requires_grad and out.tolist() == [0.3125, 3.0]
    with pytest.raises(TypeError, match="straight_through"):
        pl.round_to(np.array([0.3]), "e4m3", straight_through=True)


@pytest.mark.gpu
@pytest.mark.parametrize("mode", ALL_MODES)
@pytest.mark.parametrize("name", ["e4m3", "bf16", "e2m1"])
def test_the_autograd_rule_holds_on_a_cuda_device(name: str, mode: str) -> None:
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    x = grad_input(name, "float32").detach().cuda().requires_grad_()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out = pl.round_to(x, name, rounding=mode, rng=0)
        through = pl.round_to(x, name, rounding=mode, rng=0, straight_through=True)
        through.backward(torch.ones_like(through))
    assert not out.requires_grad and out.device == x.device and through.device == x.device
    on_host = pl.round_to(x.detach().cpu(), name, rounding=mode, rng=0)
    assert same_bits(out.cpu().double().numpy(), on_host.double().numpy()).all()
    assert same_bits(through.detach().cpu().double().numpy(), on_host.double().numpy()).all()
    assert x.grad is not None and torch.equal(x.grad.cpu(), torch.ones(x.shape))
