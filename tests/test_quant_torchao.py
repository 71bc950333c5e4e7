"""Cross-check against torchao where it is installed (skipped otherwise): MX codes and scales, NVFP4."""

from __future__ import annotations

import warnings
from fractions import Fraction

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


# Four blocks of 16 from the benchmark's weight (`default_rng(0).standard_normal((4096, 14336), float32) * 0.02`):
# the block holding the tensor amax (row 546), so the tensor scale g is the whole weight's; then row 2719
# columns 10288..10303, row 421 columns 12000..12015 and row 1021 columns 12848..12863.
BENCH_BLOCKS = [
    [0.001031283987686038, 0.017499923706054688, 0.00826972909271717, -0.016910959035158157, -0.005750952288508415,
     0.001403018948622048, -0.016512343659996986, -0.03097250871360302, 0.0010500086937099695, 0.006928225513547659,
     -0.004725794307887554, -0.11958087980747223, 0.0003101569600403309, -0.009877569042146206, -0.008908888325095177,
     -0.020503435283899307],
    [0.0017759461188688874, -0.0328095443546772, 0.011038189753890038, -0.01361031737178564, -0.02584480494260788,
     0.005782901309430599, 0.011591628193855286, -0.003623967757448554, -0.012452486902475357, 0.004206555895507336,
     0.0031756029929965734, -0.01584535650908947, 0.013346079736948013, -0.00897094327956438, -0.008559376001358032,
     -0.01513152476400137],
    [-0.024603208526968956, 0.023271622136235237, -0.010248887352645397, 0.01607857272028923, 0.022884277626872063,
     0.026787206530570984, -0.004062939435243607, 0.006612518336623907, -0.010439276695251465, -0.03309827670454979,
     0.006300769746303558, 0.026781992986798286, 0.020079191774129868, 0.01910039596259594, 0.027823809534311295,
     -0.0257196594029665],
    [0.009852390736341476, -0.005197325721383095, -0.004929681774228811, 0.013701975345611572, -0.013407807797193527,
     0.01777012273669243, 0.016935385763645172, -0.012205690145492554, -0.00725690508261323, -0.00525665981695056,
     -0.014449605718255043, -7.040093623800203e-05, 0.017653003334999084, 0.005648624151945114, -0.022530145943164825,
     -0.006354739423841238],
]


def _torchao_nvfp4(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """torchao's e4m3 block-scale codes and unpacked e2m1 codes (low nibble first) for x."""
    nvfp4 = pytest.importorskip("torchao.prototype.mx_formats.nvfp4_tensor")
    t = torch.from_numpy(x)
    scales, packed = nvfp4.nvfp4_quantize(t, 16, nvfp4.per_tensor_amax_to_scale(t.abs().max()))
    p = packed.view(torch.uint8).numpy().reshape(-1)
    return scales.view(torch.uint8).numpy().reshape(x.shape[0], -1), np.stack([p & 15, p >> 4], 1).reshape(x.shape)


def test_nvfp4_element_next_to_a_tie_matches_torchao() -> None:
    # x / d = 2.50000004 (exactly 0.013346079736948013 / fp32(s_b g)): the exact quotient rounds to 3.0 (code 5)
    # as torchao does; an fp32 quotient lands on the tie 2.5 and rounded it to the even 2.0 (code 4)
    x = np.asarray(BENCH_BLOCKS[:2], dtype=np.float32)
    q = quantize(x, "nvfp4:minscale=normal")
    d = Fraction(float(np.float32(q.scales[1, 0]) * np.float32(q.tensor_scale)))
    assert float(np.float32(q.scales[1, 0]) * np.float32(q.tensor_scale)) == float(d)
    assert Fraction(2.5) < Fraction(float(x[1, 12])) / d < Fraction(2.5) + Fraction(1, 10**7)
    assert q.codes[1, 12] == 5
    scales, codes = _torchao_nvfp4(x)
    np.testing.assert_array_equal(scales, q.scale_codes)
    np.testing.assert_array_equal(codes, q.codes)


def test_nvfp4_where_torchao_rounds_twice() -> None:
    # The documented difference: torchao computes the block scale as fp32(fp32(amax / 6) / g) and the elements
    # as x * fp32(fp32(1 / g) / s_b), each an fp32 operation that can round onto a tie; precisionlab rounds
    # amax / (6 g) and x / fp32(s_b g) once. Exact rationals decide for precisionlab in both cases here.
    x = np.asarray(BENCH_BLOCKS, dtype=np.float32)
    q = quantize(x, "nvfp4:minscale=normal")
    g = Fraction(float(q.tensor_scale))
    ideal = Fraction(float(np.abs(x[2]).max())) / (6 * g)
    assert Fraction(120) < ideal < Fraction(124)  # below the midpoint of e4m3's 120 and 128: rounds to 120
    scales, codes = _torchao_nvfp4(x)
    assert q.scales[2, 0] == 120.0 and q.scale_codes[2, 0] == 0x6F and scales[2, 0] == 0x70  # torchao: 128
    d = Fraction(float(np.float32(q.scales[3, 0]) * np.float32(q.tensor_scale)))
    exact = Fraction(float(x[3, 3])) / d
    assert Fraction(3) < exact < Fraction(7, 2)  # nearer 3 than 4: e2m1 code 5
    assert q.codes[3, 3] == 5 and codes[3, 3] == 6
    np.testing.assert_array_equal(np.delete(codes, [2, 3], axis=0), np.delete(q.codes, [2, 3], axis=0))
