"""torch tensors give the same bits as numpy arrays, keep dtype, shape and device."""

from __future__ import annotations

import numpy as np
import pytest

import precisionlab as pl

from .reference import same_bits

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
