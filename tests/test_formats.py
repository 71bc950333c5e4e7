"""Format descriptors: limits against the seed module's table and ml_dtypes' finfo; registry."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

import precisionlab as pl
from precisionlab.formats import Encoding, FloatFormat

from .reference import all_finite_values

# (format, max finite, min normal, min subnormal, ulp(1), binades) as printed in the seed's table
# (shared/seeds/000, "The numbers, derived rather than tabulated"), to the seed's 5 digits.
SEED_TABLE = [
    ("fp32", 3.4028e38, 1.1755e-38, 1.4013e-45, 1.192e-7, 254),
    ("tf32", 3.4012e38, 1.1755e-38, 1.1479e-41, 9.766e-4, 254),
    ("bf16", 3.3895e38, 1.1755e-38, 9.1835e-41, 7.812e-3, 254),
    ("fp16", 6.5504e4, 6.1035e-5, 5.9605e-8, 9.766e-4, 30),
    ("e4m3", 448, 1.5625e-2, 1.9531e-3, 1.250e-1, 15),
    ("e5m2", 5.7344e4, 6.1035e-5, 1.5259e-5, 2.500e-1, 30),
    ("e4m3fnuz", 240, 7.8125e-3, 9.7656e-4, 1.250e-1, 15),
]


@pytest.mark.parametrize(("name", "max_finite", "min_normal", "min_sub", "eps", "binades"), SEED_TABLE)
def test_limits_match_the_seed_table(name: str, max_finite: float, min_normal: float, min_sub: float,
                                     eps: float, binades: int) -> None:
    fmt = pl.get_format(name)
    assert fmt.max_finite == pytest.approx(max_finite, rel=5e-5)
    assert fmt.min_normal == pytest.approx(min_normal, rel=5e-5)
    assert fmt.min_subnormal == pytest.approx(min_sub, rel=5e-5)
    assert fmt.eps == pytest.approx(eps, rel=1e-3)
    assert fmt.binades == binades


def test_seed_digits_column() -> None:
    # seed: fp32 7.2, bf16 2.4, fp16 3.3, e4m3 1.2, e5m2 0.9 decimal digits
    for name, digits in [("fp32", 7.2), ("bf16", 2.4), ("fp16", 3.3), ("e4m3", 1.2), ("e5m2", 0.9)]:
        assert round(pl.get_format(name).decimal_digits, 1) == digits


ML_DTYPES_NAMES = {
    "e4m3": "float8_e4m3fn", "e5m2": "float8_e5m2", "e4m3fnuz": "float8_e4m3fnuz", "e5m2fnuz": "float8_e5m2fnuz",
    "e3m2": "float6_e3m2fn", "e2m3": "float6_e2m3fn", "e2m1": "float4_e2m1fn", "ue8m0": "float8_e8m0fnu",
    "bf16": "bfloat16",
}


@pytest.mark.parametrize("name", list(ML_DTYPES_NAMES))
def test_limits_match_ml_dtypes_finfo(name: str) -> None:
    ml_dtypes = pytest.importorskip("ml_dtypes")
    info = ml_dtypes.finfo(getattr(ml_dtypes, ML_DTYPES_NAMES[name]))
    fmt = pl.get_format(name)
    assert fmt.max_finite == float(info.max)
    assert fmt.min_normal == float(info.smallest_normal)
    assert fmt.min_subnormal == float(info.smallest_subnormal)
    assert fmt.eps == float(info.eps)
    assert fmt.man_bits == info.nmant


@pytest.mark.parametrize("name", ["fp16", "fp32", "fp64"])
def test_limits_match_numpy_finfo(name: str) -> None:
    info = np.finfo({"fp16": np.float16, "fp32": np.float32, "fp64": np.float64}[name])
    fmt = pl.get_format(name)
    assert fmt.max_finite == float(info.max)
    assert fmt.min_normal == float(info.smallest_normal)
    assert fmt.min_subnormal == float(info.smallest_subnormal)
    assert fmt.eps == float(info.eps)


@pytest.mark.parametrize(("name", "encoding"), [("e4m3", "fn"), ("e5m2", "ieee"), ("e4m3fnuz", "fnuz"),
                                                ("e3m2", "finite"), ("e2m3", "finite"), ("e2m1", "finite")])
def test_max_finite_is_the_largest_enumerated_value(name: str, encoding: str) -> None:
    fmt = pl.get_format(name)
    assert isinstance(fmt, FloatFormat)
    values = all_finite_values(fmt.exp_bits, fmt.man_bits, fmt.bias, encoding)
    assert fmt.max_finite_exact == values[-1]
    assert fmt.min_subnormal_exact == values[1]


def test_special_value_flags() -> None:
    e4m3, fnuz, e2m1, ue8m0 = (pl.get_format(n) for n in ("e4m3", "e4m3fnuz", "e2m1", "ue8m0"))
    assert (e4m3.has_inf, e4m3.has_nan, e4m3.has_negative_zero) == (False, True, True)
    assert (fnuz.has_inf, fnuz.has_nan, fnuz.has_negative_zero) == (False, True, False)
    assert (e2m1.has_inf, e2m1.has_nan, e2m1.has_negative_zero) == (False, False, True)
    assert (ue8m0.has_nan, ue8m0.has_zero, ue8m0.signed) == (True, False, False)
    assert pl.get_format("fp16").has_inf


def test_tf32_is_19_bits_in_32() -> None:
    tf32 = pl.get_format("tf32")
    assert tf32.bits == 19 and tf32.stored_bits == 32


@pytest.mark.parametrize(("alias", "name"), [("float8_e4m3fn", "e4m3"), ("fp8_e4m3", "e4m3"), ("bfloat16", "bf16"),
                                             ("float16", "fp16"), ("float4_e2m1fn", "e2m1"), ("E5M2", "e5m2"),
                                             ("float8_e8m0fnu", "ue8m0")])
def test_aliases(alias: str, name: str) -> None:
    assert pl.get_format(alias) is pl.get_format(name)


def test_custom_formats() -> None:
    e6m9 = pl.get_format("e6m9")
    assert (e6m9.exp_bits, e6m9.man_bits, e6m9.bias, e6m9.encoding) == (6, 9, 31, Encoding.IEEE)
    assert e6m9.max_finite_exact == (2 - Fraction(1, 2**9)) * Fraction(2) ** 31
    custom_fnuz = pl.get_format("e4m3b8fnuz")
    registered = pl.get_format("e4m3fnuz")
    assert (custom_fnuz.bias, custom_fnuz.encoding, custom_fnuz.max_finite) == (8, Encoding.FNUZ, 240.0)
    assert custom_fnuz.max_finite == registered.max_finite
    ieee_e4m3 = pl.get_format("e4m3ieee")
    assert ieee_e4m3.max_finite == 240.0 and ieee_e4m3.has_inf  # (2 - 1/8) * 2^7
    assert pl.get_format("e4m3").max_finite == 448.0  # the registry name keeps its OCP meaning
    keyword = pl.get_format("e4m3", bias=8, encoding="fnuz")
    assert keyword.max_finite == 240.0 and keyword.encoding is Encoding.FNUZ


def test_numpy_integer_fields_work_like_python_ints() -> None:
    fmt = pl.get_format("e4m3", bias=np.int64(8), encoding="fnuz")
    assert type(fmt.bias) is int and fmt.max_finite == 240.0
    assert pl.round_to(100.0, fmt) == 96.0
    assert pl.round_to(0.3, FloatFormat("x", np.int32(5), np.uint8(2), np.int64(15))) == 0.3125


@pytest.mark.parametrize("spec", ["e0m3", "e1m0", "e12m60", "e11m53", "e4m3b-2000"])
def test_impossible_custom_formats(spec: str) -> None:
    with pytest.raises(ValueError, match="impossible float format"):
        pl.get_format(spec)


def test_unknown_name_lists_close_matches() -> None:
    with pytest.raises(ValueError, match=r"did you mean.*e4m3"):
        pl.get_format("e4m4x")
    with pytest.raises(TypeError):
        pl.get_format(3)  # type: ignore[arg-type]


def test_integer_formats() -> None:
    int8, int4, uint4 = (pl.get_format(n) for n in ("int8", "int4", "uint4"))
    assert (int8.min_value, int8.max_value, int8.symmetric_max) == (-128, 127, 127)
    assert (int4.min_value, int4.max_value) == (-8, 7)
    assert (uint4.min_value, uint4.max_value) == (0, 15)
    assert pl.get_format("int2").symmetric_max == 1


def test_nf4_encode_is_nearest_at_its_midpoints() -> None:
    """Inputs at and beside each exact midpoint, float32 and float64, go to the nearer value (ties down)."""
    from fractions import Fraction

    from precisionlab.formats import NF4

    table = [Fraction(float(v)) for v in NF4.table]
    for lower in range(len(table) - 1):
        middle = (table[lower] + table[lower + 1]) / 2
        around = [float(middle), np.nextafter(float(middle), -1.0), np.nextafter(float(middle), 1.0)]
        around += [float(np.float32(float(middle)))]  # the midpoint rounded to float32: a float32 input
        for x in around:
            ideal = lower if abs(Fraction(x) - table[lower]) <= abs(Fraction(x) - table[lower + 1]) else lower + 1
            for dtype in (np.float32, np.float64):
                if float(dtype(x)) == x:
                    assert NF4.encode(np.array([x], dtype=dtype))[0] == ideal, (x, dtype)


@pytest.mark.parametrize(("name", "bits", "signed"), [("int5", 5, True), ("int6", 6, True), ("uint2", 2, False),
                                                     ("uint5", 5, False), ("int16", 16, True), ("uint1", 1, False)])
def test_custom_integers(name: str, bits: int, signed: bool) -> None:
    fmt = pl.get_format(name)
    assert (fmt.name, fmt.bits, fmt.signed) == (name, bits, signed)
    low, high = (-(2 ** (bits - 1)), 2 ** (bits - 1) - 1) if signed else (0, 2**bits - 1)
    assert (fmt.min_value, fmt.max_value) == (low, high)
    assert name not in [f.name for f in pl.list_formats()]  # looked up, not listed


@pytest.mark.parametrize("name", ["int1", "int0", "uint33", "int123"])
def test_impossible_custom_integers(name: str) -> None:
    with pytest.raises(ValueError, match=r"integer format|unknown format"):
        pl.get_format(name)
