"""MX, NVFP4 and fp8 block schemes against hand-derived cases, edge cases and ml_dtypes."""

from __future__ import annotations

import math

import numpy as np
import pytest

from precisionlab.quant import quantize
from precisionlab.quant.packing import pack, unpack

ml_dtypes = pytest.importorskip("ml_dtypes")

E2M1 = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0]  # OCP fp4 magnitudes, codes 0..7


def block(values: list[float], size: int = 32) -> np.ndarray:
    out = np.zeros((1, size), dtype=np.float32)
    out[0, : len(values)] = values
    return out


# ----------------------------------------------------------------------------- MX
def test_mxfp8_floor_clips_957_to_896() -> None:
    # amax 957: floor(log2 957) = 9, emax(e4m3) = 8 -> X = 2^1; 957 / 2 = 478.5 > 448 -> clamps to 448 -> 896
    q = quantize(block([957.0, 1.0]), "mxfp8")
    assert q.scales[0, 0] == 2.0 and q.scale_codes[0, 0] == 127 + 1
    assert q.codes[0, 0] == 0x7E  # e4m3 448 = 0 1111 110
    assert q.dequantize()[0, 0] == 896.0 and q.dequantize()[0, 1] == 1.0


def test_mxfp8_rceil_keeps_957() -> None:
    # RCEIL: X = 2^ceil(log2(957 / 448)) = 4; 957 / 4 = 239.25 -> e4m3 240 (0 1110 111) -> 960
    q = quantize(block([957.0, 1.0]), "mxfp8:rceil")
    assert q.scales[0, 0] == 4.0 and q.scale_codes[0, 0] == 127 + 2
    assert q.codes[0, 0] == 0x77 and q.dequantize()[0, 0] == 960.0


def test_rceil_at_an_exact_power_of_two_ratio() -> None:
    # amax = 6 * 2^3 exactly: RCEIL needs X = 8 (48 / 8 = 6 fits), FLOOR gives 2^(5 - 2) = 8 too
    for rule in ("", ":rceil"):
        q = quantize(block([48.0, 5.0]), f"mxfp4{rule}")
        assert q.scales[0, 0] == 8.0 and q.codes[0, 0] == 0x7


def test_mxfp4_hand_derived_codes() -> None:
    # amax 6 -> X = 2^(2 - 2) = 1; 0.25 is a tie between 0 and 0.5 -> even mantissa (0); 1.25 -> 1.0 (even)
    q = quantize(block([6.0, 3.0, 1.0, 0.5, 0.25, -1.5, 1.25, 5.0]), "mxfp4")
    assert q.scales[0, 0] == 1.0
    assert q.codes[0, :8].tolist() == [0x7, 0x5, 0x2, 0x1, 0x0, 0x8 | 0x3, 0x2, 0x6]  # 5 -> tie 4|6 -> 4
    # amax 7: floor(log2 7) = 2 -> X = 1 and 7 clips to 6 (FLOOR)
    assert quantize(block([7.0]), "mxfp4").dequantize()[0, 0] == 6.0
    # amax 12 -> X = 2; 5 / 2 = 2.5 is a tie between 2 and 3 -> 2 -> 4.0
    q12 = quantize(block([12.0, 5.0]), "mxfp4")
    assert q12.scales[0, 0] == 2.0 and q12.dequantize()[0, :2].tolist() == [12.0, 4.0]


def test_mx_payload_packs_two_fp4_per_byte() -> None:
    q = quantize(block([6.0, 3.0, 1.0]), "mxfp4")
    assert q.packed[0] == 0x57 and q.packed[1] == 0x02  # low nibble first
    assert q.bits_per_element == 4.25 and q.nbytes == 16 + 1


def test_mxint8_is_fixed_point_1_6() -> None:
    # amax 3: X = 2^floor(log2 3) = 2; elements int8 with an implied 2^-6: 3 / 2 = 1.5 -> code 96
    q = quantize(block([3.0, -1.0, 0.01]), "mxint8")
    assert q.scales[0, 0] == 2.0
    codes = q.codes[0, :3].astype(np.int8).tolist()
    assert codes == [96, -32, 0]  # 0.01 / 2 * 64 = 0.32 -> 0
    np.testing.assert_array_equal(q.dequantize()[0, :3], [3.0, -1.0, 0.0])
    # 3.99 / 2 * 64 = 127.68 -> clamps to 127
    assert q.codes.shape == (1, 32) and quantize(block([3.99]), "mxint8").codes[0, 0] == 127


def test_mx_all_zero_block_has_unit_scale() -> None:
    q = quantize(np.zeros((1, 64), dtype=np.float32), "mxfp8")
    assert q.scales.tolist() == [[1.0, 1.0]] and q.scale_codes.tolist() == [[127, 127]]
    assert not q.codes.any() and not q.dequantize().any()


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_mx_nonfinite_block_becomes_nan(bad: float) -> None:
    x = np.ones((1, 64), dtype=np.float32)
    x[0, 5] = bad
    q = quantize(x, "mxfp8")
    assert math.isnan(q.scales[0, 0]) and q.scale_codes[0, 0] == 0xFF  # ue8m0 NaN
    assert not q.codes[0, :32].any()
    out = q.dequantize()
    assert np.isnan(out[0, :32]).all() and (out[0, 32:] == 1.0).all()
    with pytest.raises(ValueError, match="NaN or inf"):
        quantize(x, "mxfp8:nonfinite=error")


def test_mx_exponent_clamps_to_ue8m0_range() -> None:
    tiny = quantize(block([2.0**-140]), "mxfp8")
    assert tiny.scales[0, 0] == 2.0**-127  # floor(log2) - 8 = -148, clamped
    assert tiny.scale_codes[0, 0] == 0


def test_mxfp6_packs_four_per_three_bytes() -> None:
    q = quantize(np.ones((1, 32), dtype=np.float32), "mxfp6")
    assert q.byte_breakdown()["payload"] == 24 and q.bits_per_element == 6.25
    assert unpack(q.packed, 6, 32).tolist() == q.codes.reshape(-1).tolist()


def test_packing_layouts() -> None:
    assert pack(np.array([1, 2, 3, 4], dtype=np.uint8), 6).tolist() == [0x81, 0x30, 0x10]  # 1|2<<6|3<<12|4<<18
    assert pack(np.array([1, 0xA, 3], dtype=np.uint8), 4).tolist() == [0xA1, 0x03]
    assert pack(np.array([1, 2, 3, 0, 2], dtype=np.uint8), 2).tolist() == [0b00111001, 0b10]
    rng = np.random.default_rng(0)
    for bits in (2, 4, 5, 6, 8):
        codes = rng.integers(0, 1 << bits, 101).astype(np.uint8)
        assert unpack(pack(codes, bits), bits, 101).tolist() == codes.tolist()


def test_five_bit_codes_pack_eight_in_five_bytes() -> None:
    codes = [3, 31, 0, 17, 8, 1, 30, 5]
    word = sum(c << (5 * k) for k, c in enumerate(codes))  # c0 | c1 << 5 | ... | c7 << 35, low byte first
    assert pack(np.array(codes, dtype=np.uint8), 5).tolist() == list(word.to_bytes(5, "little"))
    assert pack(np.array([31] * 9, dtype=np.uint8), 5).tolist() == [0xFF] * 5 + [0x1F, 0, 0, 0, 0]


# ----------------------------------------------------------------------------- NVFP4
def test_nvfp4_block_at_tensor_amax_maps_to_six() -> None:
    rng = np.random.default_rng(0)
    for amax in (10.0, 0.37, 123.456, 3.0e-3):
        x = (rng.uniform(-1, 1, (4, 64)) * amax / 2).astype(np.float32)
        x[2, 21] = -amax
        q = quantize(x, "nvfp4")
        assert q.tensor_scale == float(np.float32(np.float32(amax) / 2688.0))
        assert q.scales[2, 1] == 448.0
        assert q.codes[2, 21] == 0xF  # -6 in e2m1
        assert abs(q.dequantize()[2, 21] + amax) <= amax * 2**-20


def test_nvfp4_hand_derived_block() -> None:
    x = np.zeros((1, 32), dtype=np.float32)
    x[0, 0] = 2688.0  # tensor amax -> g = 1
    x[0, 16:20] = [3.0, 1.5, -0.75, 0.2]  # block 1: amax 3 -> s = e4m3(3 / 6) = 0.5
    q = quantize(x, "nvfp4")
    assert q.tensor_scale == 1.0 and q.scales[0, 1] == 0.5
    assert q.codes[0, 16:20].tolist() == [0x7, 0x5, 0x8 | 0x3, 0x1]  # 6, 3, -1.5, 0.4 -> 0.5
    np.testing.assert_array_equal(q.dequantize()[0, 16:20], [3.0, 1.5, -0.75, 0.25])
    assert q.nbytes == 16 + 2 + 4 and q.bits_per_element == 8 * 22 / 32


def test_nvfp4_minscale_option() -> None:
    x = np.zeros((1, 32), dtype=np.float32)
    x[0, 0] = 2688.0
    x[0, 16] = 0.006  # s = 0.001 -> e4m3 subnormal 2^-9 * 1 (0.00195) by default
    sub = quantize(x, "nvfp4")
    normal = quantize(x, "nvfp4:minscale=normal")
    assert sub.scales[0, 1] == 2.0**-9
    assert normal.scales[0, 1] == 2.0**-6  # torchao clamps the block scale up to e4m3's min normal
    assert str(normal.scheme) == "nvfp4:minscale=normal"


def test_nvfp4_nonfinite_and_zero_blocks() -> None:
    x = np.ones((1, 48), dtype=np.float32)
    x[0, 16:32] = 0.0
    x[0, 40] = np.nan
    q = quantize(x, "nvfp4")
    assert q.tensor_scale == float(np.float32(1 / 2688))
    assert q.scales[0, 1] == 1.0 and not q.codes[0, 16:32].any()
    assert math.isnan(q.scales[0, 2]) and np.isnan(q.dequantize()[0, 32:]).all()


# ----------------------------------------------------------------------------- fp8 blocks
def reference_fp8_blocks(x: np.ndarray, rows: int, cols: int, fmt: type) -> np.ndarray:
    """s = fp32(amax / max) per block; x_hat = fp32(fp8(x / s) * s), the cast via ml_dtypes."""
    fmax = float(ml_dtypes.finfo(fmt).max)
    out = np.zeros_like(x)
    for r0 in range(0, x.shape[0], rows):
        for c0 in range(0, x.shape[1], cols):
            b = x[r0 : r0 + rows, c0 : c0 + cols]
            amax = float(np.abs(b).max())
            s = np.float32(1.0) if amax == 0 else np.float32(amax / fmax)
            v = np.clip(b / s, -fmax, fmax)
            out[r0 : r0 + rows, c0 : c0 + cols] = v.astype(fmt).astype(np.float32) * s
    return out


@pytest.mark.parametrize(("scheme", "rows", "cols", "fmt"), [
    ("dsv3_weight", 128, 128, "float8_e4m3fn"),
    ("dsv3_act", 1, 128, "float8_e4m3fn"),
    ("e5m2:g64", 1, 64, "float8_e5m2"),
    ("e4m3", 10**9, 10**9, "float8_e4m3fn"),
])
def test_fp8_blocks_match_ml_dtypes(scheme: str, rows: int, cols: int, fmt: str) -> None:
    rng = np.random.default_rng(11)
    x = (rng.standard_normal((200, 384)) * np.exp(rng.uniform(-6, 6, (200, 1)))).astype(np.float32)
    expected = reference_fp8_blocks(x, rows, cols, getattr(ml_dtypes, fmt))
    np.testing.assert_array_equal(quantize(x, scheme).dequantize(), expected)


def test_fp8_golden_codes_are_x_over_stored_scale() -> None:
    x = np.array([[1.0, 0.3, -2.7, 100.0]], dtype=np.float32)
    q = quantize(x, "e4m3:row")
    s = np.float32(100.0 / 448)
    assert q.scales[0, 0] == s
    expected = (x / s).astype(ml_dtypes.float8_e4m3fn).view(np.uint8)
    np.testing.assert_array_equal(q.codes, expected)


def test_fp8_elements_match_ml_dtypes_exhaustively() -> None:
    # every e4m3 / e3m2 / e2m1 scaled value: the float32 table path equals a direct cast
    values = np.linspace(-500, 500, 200_001, dtype=np.float32)
    for scheme, fmt, top in (("e4m3", "float8_e4m3fn", 448.0), ("e2m1", "float4_e2m1fn", 6.0),
                             ("e3m2", "float6_e3m2fn", 28.0)):
        x = np.concatenate([values * (top / 500), [top]]).astype(np.float32).reshape(1, -1)
        q = quantize(x, f"{scheme}:scale=fp32")
        assert q.scales[0, 0] == 1.0
        expected = x.astype(getattr(ml_dtypes, fmt)).astype(np.float32)
        np.testing.assert_array_equal(q.dequantize(), expected)


def test_ue8m0_scale_option_is_the_mx_rule() -> None:
    x = np.random.default_rng(3).standard_normal((4, 64)).astype(np.float32) * 5
    mx8 = quantize(x, "mxfp8:rceil")
    plain = quantize(x, "e4m3:g32:scale=ue8m0:rceil")
    np.testing.assert_array_equal(plain.codes, mx8.codes)
    np.testing.assert_array_equal(plain.scale_codes, mx8.scale_codes)
    # int8 with a ue8m0 scale: X = 2^(floor(log2 amax) - 6) -> the same codes as MXINT8 (whose X is 2^6 larger)
    ints = quantize(x, "int8:g32:scale=ue8m0")
    mxint8 = quantize(x, "mxint8")
    np.testing.assert_array_equal(ints.codes, mxint8.codes)
    np.testing.assert_array_equal(ints.scales * 64, mxint8.scales)
    np.testing.assert_array_equal(ints.dequantize(), mxint8.dequantize())


def test_mxfp6_hand_derived() -> None:
    # e2m3: max 7.5 = 1.875 * 2^2 -> emax 2. amax 30: X = 2^(floor(log2 30) - 2) = 4.
    # 30 / 4 = 7.5 -> 0 11 111; 1.1 / 4 = 0.275 -> nearest on the 0.125 subnormal grid is 0.25 (0 00 010);
    # -3 / 4 = -0.75 -> 1 00 110 (subnormal 6/8)
    q = quantize(block([30.0, 1.1, -3.0]), "mxfp6")
    assert q.scales[0, 0] == 4.0
    assert q.codes[0, :3].tolist() == [0b011111, 0b000010, 0b100110]
    np.testing.assert_array_equal(q.dequantize()[0, :3], [30.0, 1.0, -3.0])
    # e3m2: max 28 = 1.75 * 2^4 -> emax 4. amax 30: X = 2^(4 - 4) = 1 and 30 clips to 28 (FLOOR): 0 111 11
    q = quantize(block([30.0, 1.1]), "mxfp6_e3m2")
    assert q.scales[0, 0] == 1.0 and q.codes[0, 0] == 0b011111 and q.dequantize()[0, 0] == 28.0
    # 1.1 -> e3m2 near 1 has spacing 0.25: 1.0 (0 011 00)
    assert q.codes[0, 1] == 0b001100
    assert quantize(block([30.0, 1.1]), "mxfp6_e3m2:rceil").scales[0, 0] == 2.0  # 2^ceil(log2(30/28))


@pytest.mark.parametrize("preset", ["mxfp8", "mxfp8_e5m2", "mxfp6", "mxfp6_e3m2", "mxfp4", "mxint8", "nvfp4",
                                    "dsv3_weight", "dsv3_act"])
def test_presets_on_nd_tensors_with_axis(preset: str) -> None:
    # axis=1 on a (2, 48, 3) tensor = the same preset on the tensor with axis 1 moved last
    x = np.random.default_rng(4).standard_normal((2, 48, 3)).astype(np.float32)
    q = quantize(x, f"{preset}:axis=1")
    moved = quantize(np.ascontiguousarray(np.moveaxis(x, 1, -1)), preset)
    assert q.nbytes == moved.nbytes and str(q.scheme) == f"{preset}:axis=1"
    np.testing.assert_array_equal(q.dequantize(), np.moveaxis(moved.dequantize(), -1, 1))
    np.testing.assert_array_equal(q.codes, moved.codes)
