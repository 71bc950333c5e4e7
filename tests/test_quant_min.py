"""min=: a float block offset (x_hat = q * s + m, m stored in fp16 / bf16 / fp32), checked by exact arithmetic.

Expected values are computed here with fractions and numpy's own float16 / bfloat16 / float32 values,
independently of precisionlab's rounding: m = nearest-even(x_min), s = nearest-even((x_max - x_min) / (2^b - 1))
in their formats, q = clip(round-half-even((x - m) / s), 0, 2^b - 1), x_hat = fp32(fp32(q * s) + m).
"""

from __future__ import annotations

import warnings
from fractions import Fraction
from functools import lru_cache
from pathlib import Path

import numpy as np
import pytest

from precisionlab.quant import bits_per_element, parse_scheme, quantize, stored_bytes


@lru_cache(maxsize=4)
def table(fmt: str) -> tuple[np.ndarray, np.ndarray]:
    """(sorted finite values as float64, their codes) of fp16 or bf16, from numpy's own bit views."""
    codes = np.arange(1 << 16, dtype=np.uint32)
    if fmt == "fp16":
        values = codes.astype(np.uint16).view(np.float16).astype(np.float64)
    else:
        with np.errstate(invalid="ignore"):  # signalling NaN patterns
            values = (codes << np.uint32(16)).view(np.float32).astype(np.float64)
    keep = np.isfinite(values) & ~((values == 0) & np.signbit(values))
    order = np.argsort(values[keep], kind="stable")
    return values[keep][order], codes[keep][order]


def nearest_even(value: Fraction, fmt: str) -> float:
    """The value of fmt nearest to an exact rational, ties to the even code (no overflow in these tests)."""
    if fmt == "fp32":  # the float32 next to float(value) and its two neighbours
        near = np.float32(float(value))
        candidates = [np.nextafter(near, np.float32(-np.inf)), near, np.nextafter(near, np.float32(np.inf))]
        return float(min(candidates, key=lambda c: (abs(Fraction(float(c)) - value),
                                                    int(np.array(c, np.float32).view(np.uint32)) & 1)))
    values, codes = table(fmt)
    i = int(np.searchsorted(values, float(value)))
    best = None
    for j in (i - 1, i, i + 1):
        if 0 <= j < values.size:
            distance = abs(Fraction(float(values[j])) - value)
            key = (distance, int(codes[j]) & 1)
            if best is None or key < best[0]:
                best = (key, float(values[j]))
    assert best is not None
    return best[1]


def half_even(value: Fraction) -> int:
    return round(value)  # Fraction.__round__ rounds half to even


def expected(block: np.ndarray, bits: int, scale_fmt: str, min_fmt: str) -> tuple[float, float, list[int], list[float]]:
    qmax = (1 << bits) - 1
    lo, hi = Fraction(float(block.min())), Fraction(float(block.max()))
    m = nearest_even(lo, min_fmt)
    s = 1.0 if hi == lo else nearest_even((hi - lo) / qmax, scale_fmt)
    codes = [0 if hi == lo else min(qmax, max(0, half_even((Fraction(float(x)) - Fraction(m)) / Fraction(s))))
             for x in block]
    # x_hat = fp32(fp32(q * s) + m), each step one IEEE float32 rounding (numpy's float32 arithmetic)
    values = [float(np.float32(q) * np.float32(s) + np.float32(m)) for q in codes]
    return s, m, codes, values


@pytest.mark.parametrize(("scheme", "bits", "group", "scale_fmt", "min_fmt"), [
    ("uint4:g32:min=fp16", 4, 32, "fp16", "fp16"),
    ("uint2:g32:min=fp16", 2, 32, "fp16", "fp16"),
    ("uint5:g16:min=bf16", 5, 16, "fp16", "bf16"),
    ("uint8:g64:min=fp32:scale=bf16", 8, 64, "bf16", "fp32"),
    ("uint8:g32:min=fp16:scale=fp32", 8, 32, "fp32", "fp16"),  # q * s rounds in float32, then + m rounds again
])
def test_float_min_rule_by_exact_arithmetic(scheme: str, bits: int, group: int, scale_fmt: str, min_fmt: str) -> None:
    rng = np.random.default_rng(bits)
    x = (rng.standard_normal((6, 4 * group)) * 0.02).astype(np.float32)
    x[1] += 0.5                      # all positive: the offset is not clamped to 0
    x[2] = -np.abs(x[2]) - 1.0       # all negative
    x[3, :group] = 0.7               # a constant block reads back as fp(0.7)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        q = quantize(x, scheme)
    assert q.zero_points is None and q.min_values is not None
    codes = q.codes.reshape(6, -1, group)
    out = q.dequantize().reshape(6, -1, group)
    for r in range(6):
        for g in range(4):
            s, m, want_codes, want_values = expected(x[r, g * group : (g + 1) * group], bits, scale_fmt, min_fmt)
            assert float(q.scale_values[0, r, g]) == s and float(q.min_values[0, r, g]) == m, (r, g)
            assert codes[r, g].tolist() == want_codes, (r, g)
            assert out[r, g].tolist() == want_values, (r, g)
    assert float(q.min_values[0, 1, 0]) > 0 and float(q.min_values[0, 2, 0]) < -1


def test_ties_go_to_the_even_code_and_one_ulp_decides() -> None:
    """m = 1, s = 2^-8 exactly (span 15 * 2^-8): x = m + (k + 1/2) s is a tie, rounded to even; one float32 ulp
    either side rounds away from the tie."""
    s = 2.0**-8
    ties = [np.float32(1 + (k + 0.5) * s) for k in range(14)]
    up = [np.nextafter(t, np.float32(2)) for t in ties]
    down = [np.nextafter(t, np.float32(0)) for t in ties]
    for row, want in ((ties, [k + (k % 2) for k in range(14)]), (up, list(range(1, 15))), (down, list(range(14)))):
        block = np.array([1.0, 1 + 15 * s, *row] + [1.0] * (30 - len(row)), dtype=np.float32)
        q = quantize(block[None, :], "uint4:g32:min=fp16")
        assert (float(q.scale_values[0, 0, 0]), float(q.min_values[0, 0, 0])) == (s, 1.0)
        assert q.codes[0, 2:16].tolist() == want


def test_offset_is_not_an_integer_zero_point() -> None:
    """asym stores an integer zero point (x_hat = (q - z) s, the grid contains 0); min= a float offset
    (x_hat = q s + m, the grid starts at x_min): on an all-positive block min= uses every code."""
    x = np.linspace(0.5, 0.6, 32, dtype=np.float32)[None, :]
    zp = quantize(x, "uint4:g32")
    fm = quantize(x, "uint4:g32:min=fp16")
    assert zp.zero_points is not None and zp.min_values is None and fm.zero_points is None
    assert np.abs(fm.dequantize() - x).max() < np.abs(zp.dequantize() - x).max() / 5
    assert sorted(set(fm.codes[0].tolist())) == list(range(16))


def test_bytes_count_the_min_at_its_width() -> None:
    assert stored_bytes("uint2:g32:min=fp16", (8, 32)) == {"payload": 64, "scales": 16, "zero_points": 0, "mins": 16,
                                                           "outliers": 0, "tensor_scale": 0}
    assert bits_per_element("uint2:g32:min=fp16", (8, 32)) == 2 + 16 / 32 + 16 / 32  # KIVI: 3 bits
    assert bits_per_element("uint4:g32:min=fp16", (4, 256)) == 5.0  # GGUF Q4_1's 20 bytes per 32
    assert stored_bytes("uint4:g32:min=fp32", (1, 64))["mins"] == 2 * 4
    assert stored_bytes("uint4:g32:min=bf16", (1, 64))["mins"] == 2 * 2
    assert stored_bytes("uint4:g32", (1, 64))["mins"] == 0


def test_capacity_kivi_counts_the_same_bytes() -> None:
    from precisionlab.capacity.schemes import KV_SCHEMES

    kivi = KV_SCHEMES["kivi2"]
    assert parse_scheme(kivi.storage) == parse_scheme("uint2:g32:min=fp16")
    assert kivi.bits_per_value == 3.0 and kivi.vector_bits(128) == 128 * 3
    assert kivi.vector_bits(100) == 8 * sum(stored_bytes(kivi.storage, (8, 100)).values()) / 8 == 4 * 32 * 3


def test_nonfinite_blocks() -> None:
    x = np.random.default_rng(0).standard_normal((2, 64)).astype(np.float32)
    x[0, 5] = np.inf
    with pytest.raises(ValueError, match="nonfinite=error"):
        quantize(x, "uint4:g32:min=fp16")
    out = quantize(x, "uint4:g32:min=fp16:nonfinite=nan").dequantize()
    assert np.isnan(out[0, :32]).all() and np.isfinite(out[0, 32:]).all() and np.isfinite(out[1]).all()


def test_ragged_group_pads_with_zeros_that_count_in_min_and_max() -> None:
    x = np.full((1, 40), 0.5, dtype=np.float32)
    q = quantize(x, "uint4:g32:min=fp16")
    assert q.padded_elements == 24
    assert float(q.min_values[0, 0, 1]) == 0.0  # the last group is 8 halves and 24 zeros: its min is 0
    assert float(q.scale_values[0, 0, 1]) == float(np.float16(0.5 / 15))
    assert float(q.min_values[0, 0, 0]) == 0.5 and np.array_equal(q.dequantize()[0, :32], x[0, :32])  # flat: m


@pytest.mark.parametrize(("text", "fragment"), [
    ("int4:g32:min=fp16", "unsigned integer elements"),
    ("e4m3:g32:min=fp16", "unsigned integer elements"),
    ("uint4:g32:min=e4m3", "block offset is stored in one of"),
    ("uint4:g32:min=fp16:min=bf16", "set the same thing"),
])
def test_min_errors_are_clear(text: str, fragment: str) -> None:
    with pytest.raises(ValueError, match=fragment):
        parse_scheme(text)


def test_canonical_spelling() -> None:
    assert str(parse_scheme("UINT4:g32:asym:scale=fp16:min=fp16")) == "uint4:g32:min=fp16"
    assert str(parse_scheme("uint8:row:min=bf16:axis=0")) == "uint8:row:min=bf16:axis=0"


def test_saved_and_loaded(tmp_path: Path) -> None:
    from precisionlab.quant.safetensors_io import load_quantized, save_quantized

    x = np.random.default_rng(3).standard_normal((4, 96)).astype(np.float32)
    tensors = {"a": quantize(x, "uint4:g32:min=fp16"), "b": quantize(x, "uint8:row:min=bf16"),
               "c": quantize(x[:, :64], "gguf_q4_1")}
    save_quantized(tmp_path / "m.safetensors", tensors)
    back = load_quantized(tmp_path / "m.safetensors")
    for name, q in tensors.items():
        assert back[name].scheme == q.scheme
        assert np.array_equal(back[name].dequantize().view(np.uint32), q.dequantize().view(np.uint32)), name
    with pytest.raises(ValueError, match="two-level"):
        save_quantized(tmp_path / "k.safetensors", {"k": quantize(np.ones((2, 256), np.float32), "gguf_q4_k")})
    assert not (tmp_path / "k.safetensors").exists()
