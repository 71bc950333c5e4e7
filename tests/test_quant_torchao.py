"""Cross-check against torchao where it is installed (skipped otherwise): MX codes and scales, NVFP4."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from precisionlab.quant import quantize

torch = pytest.importorskip("torch")
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    mx_tensor = pytest.importorskip("torchao.prototype.mx_formats.mx_tensor")
    mx_config = pytest.importorskip("torchao.prototype.mx_formats.config")


@pytest.fixture(scope="module")
def data() -> np.ndarray:
    rng = np.random.default_rng(0)
    x = (rng.standard_normal((64, 256)) * np.exp(rng.uniform(-8, 8, (64, 1)))).astype(np.float32)
    x[3, 5], x[3, 6] = 957.0, 1.0
    x[9, 32:64] = 0.0
    return x


@pytest.mark.parametrize("rule", ["floor", "rceil"])
@pytest.mark.parametrize(("scheme", "dtype"), [("mxfp8", "float8_e4m3fn"), ("mxfp8_e5m2", "float8_e5m2"),
                                               ("mxfp4", "float4_e2m1fn_x2"), ("mxfp6", "fp6_e2m3"),
                                               ("mxfp6_e3m2", "fp6_e3m2")])
def test_mx_matches_torchao(data: np.ndarray, scheme: str, dtype: str, rule: str) -> None:
    mode = getattr(mx_config.ScaleCalculationMode, rule.upper())
    elem = getattr(torch, dtype) if dtype.startswith("float") else dtype
    scale, codes = mx_tensor.to_mx(torch.from_numpy(data), elem, 32, scaling_mode=mode)
    q = quantize(data, f"{scheme}:{rule}")
    theirs = scale.view(torch.uint8).numpy().reshape(q.scale_codes.shape).copy()
    # the one documented difference: an all-zero block gets scale 1 (code 127) here and
    # the smallest ue8m0 (code 0) in torchao; its codes are zero either way
    assert theirs[9, 1] == 0 and q.scale_codes[9, 1] == 127
    theirs[9, 1] = 127
    np.testing.assert_array_equal(theirs, q.scale_codes)
    raw = codes.view(torch.uint8).numpy()
    if dtype == "float4_e2m1fn_x2":
        np.testing.assert_array_equal(raw.reshape(-1), q.packed)  # same nibble order
    else:
        np.testing.assert_array_equal(raw.reshape(q.codes.shape), q.codes)


def test_nvfp4_matches_torchao_with_minscale_normal(data: np.ndarray) -> None:
    nvfp4 = pytest.importorskip("torchao.prototype.mx_formats.nvfp4_tensor")
    x = data.copy()
    x[9, 64:80] = 1e-6 * x[3, 5]  # a block whose scale is far below e4m3's smallest normal
    t = torch.from_numpy(x)
    g = nvfp4.per_tensor_amax_to_scale(t.abs().max())
    scales, packed = nvfp4.nvfp4_quantize(t, 16, g)
    q = quantize(x, "nvfp4:minscale=normal")  # torchao clamps block scales up to 2^-6
    assert q.tensor_scale == float(g)
    theirs = scales.view(torch.uint8).numpy().reshape(q.scale_codes.shape).copy()
    # the all-zero blocks (row 9, columns 32..63): scale 1 here (e4m3 0x38); torchao's clamp gives 2^-6 (0x08)
    assert theirs[9, 2:4].tolist() == [0x08, 0x08] and q.scale_codes[9, 2:4].tolist() == [0x38, 0x38]
    theirs[9, 2:4] = 0x38
    np.testing.assert_array_equal(theirs, q.scale_codes)
    np.testing.assert_array_equal(packed.view(torch.uint8).numpy().reshape(-1), q.packed)
    assert q.scales[9, 4] == 2.0**-6 and quantize(x, "nvfp4").scales[9, 4] < 2.0**-6  # the default keeps subnormals
