"""gguf_* presets: llama.cpp's block layouts, bytes and reference quantizers, checked against the `gguf` package
(gguf-py's quantizers and dequantizers) and, for the K-quants gguf-py cannot quantize, against llama.cpp's own C
quantizer (blocks stored in tests/data/ggml_kquant_reference.npz by tests/data/make_ggml_reference.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from precisionlab.quant import bits_per_element, parse_scheme, quantize, stored_bytes

gguf = pytest.importorskip("gguf", reason="the gguf package (pip install gguf) is the reference for GGML blocks")
from precisionlab.interop.readers.gguf_blocks import tensor_bytes  # noqa: E402  (needs nothing from gguf)

LEGACY = ["Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1"]
ALL = [*LEGACY, "Q4_K", "Q6_K"]
REFERENCE = Path(__file__).parent / "data" / "ggml_kquant_reference.npz"


def qtype(name: str) -> Any:
    return gguf.GGMLQuantizationType[name]


def preset(name: str) -> str:
    return f"gguf_{name.lower()}"


def bits_equal(a: np.ndarray, b: np.ndarray) -> bool:
    a, b = np.ascontiguousarray(a, dtype=np.float32), np.ascontiguousarray(b, dtype=np.float32)
    return a.shape == b.shape and bool(np.array_equal(a.view(np.uint32), b.view(np.uint32)))


def weights(seed: int = 0) -> dict[str, np.ndarray]:
    """Rows of 512: weight-like, heavy-tailed, one-signed, integer-valued (exact ties), offset, edge cases."""
    rng = np.random.default_rng(seed)
    edge = (rng.standard_normal((8, 512)) * 0.02).astype(np.float32)
    edge[0, :64] = 0.0                          # all-zero blocks
    edge[1, :32] = 0.5                          # a constant block
    edge[2, :32] = -0.0
    edge[3, :32] = np.float32(2.0**-140)        # float32 subnormals
    edge[4, :32] = rng.permutation(np.arange(-16, 16)).astype(np.float32) / 4  # ties at every grid point
    edge[5, 3], edge[5, 9] = 0.3, -0.3          # the largest magnitude twice, opposite signs: the first wins
    edge[6, :32] = 60000.0 * np.sign(rng.standard_normal(32))  # a scale near fp16's top
    edge[7, ::5] = 1.0
    return {
        "normal": (rng.standard_normal((16, 512)) * 0.02).astype(np.float32),
        "heavy": (rng.standard_t(2, (8, 512)) * 0.01).astype(np.float32),
        "positive": rng.random((4, 512)).astype(np.float32),
        "negative": (-3 * rng.random((4, 512))).astype(np.float32),
        "integers": rng.integers(-8, 8, (4, 512)).astype(np.float32),
        "offset": (1 + 0.01 * rng.standard_normal((4, 512))).astype(np.float32),
        "edge": edge,
    }


# --------------------------------------------------------------------------- grammar and bytes
@pytest.mark.parametrize("name", ALL)
def test_preset_is_canonical_and_round_trips(name: str) -> None:
    s = parse_scheme(preset(name))
    assert str(s) == preset(name) and parse_scheme(str(s)) == s and s.ggml == name
    assert str(parse_scheme(f"{preset(name)}:axis=0")) == f"{preset(name)}:axis=0"
    with pytest.raises(ValueError, match="allowed: axis="):
        parse_scheme(f"{preset(name)}:scale=fp32")


@pytest.mark.parametrize(("name", "spelling"), [("Q8_0", "int8:g32"), ("Q4_0", "int4:g32:range=full_neg"),
                                                ("Q4_1", "uint4:g32:min=fp16"), ("Q5_0", "int5:g32:range=full_neg"),
                                                ("Q5_1", "uint5:g32:min=fp16")])
def test_one_level_presets_are_grammar_layouts(name: str, spelling: str) -> None:
    """The preset and its grammar spelling store the same parts: same element, group, scale, min, bytes."""
    s, plain = parse_scheme(preset(name)), parse_scheme(spelling)
    fields = ("element", "granularity", "group", "scale", "min_format", "int_range", "symmetric")
    assert all(getattr(s, f) == getattr(plain, f) for f in fields)
    assert stored_bytes(s, (4, 256)) == stored_bytes(plain, (4, 256))


@pytest.mark.parametrize("name", ALL)
def test_bytes_are_ggmls_block_size(name: str) -> None:
    block, type_size = gguf.GGML_QUANT_SIZES[qtype(name)]
    shape = (3, 4 * 256)
    assert sum(stored_bytes(preset(name), shape).values()) == 3 * 4 * 256 // block * type_size
    assert bits_per_element(preset(name), shape) == 8 * type_size / block


@pytest.mark.parametrize("name", ALL)
def test_quantized_bytes_equal_the_blocks_written(name: str) -> None:
    x = weights()["normal"]
    q = quantize(x, preset(name))
    assert q.nbytes == tensor_bytes(q).size


def test_k_quant_byte_breakdown() -> None:
    # Q4_K per 256: 128 bytes of nibbles, 8 six-bit scales (6 bytes) + fp16 d, 8 six-bit mins + fp16 dmin
    assert stored_bytes("gguf_q4_k", (1, 256)) == {"payload": 128, "scales": 6 + 2, "zero_points": 0, "mins": 6 + 2,
                                                   "outliers": 0, "tensor_scale": 0}
    # Q6_K per 256: 192 bytes of 6-bit codes, 16 int8 scales + fp16 d
    assert stored_bytes("gguf_q6_k", (1, 256)) == {"payload": 192, "scales": 16 + 2, "zero_points": 0, "mins": 0,
                                                   "outliers": 0, "tensor_scale": 0}


@pytest.mark.parametrize("name", ALL)
def test_partial_blocks_and_nonfinite_input_are_refused(name: str) -> None:
    block = gguf.GGML_QUANT_SIZES[qtype(name)][0]
    with pytest.raises(ValueError, match=f"whole blocks of {block}"):
        quantize(np.ones((2, block + 16), np.float32), preset(name))
    with pytest.raises(ValueError, match=f"whole blocks of {block}"):
        stored_bytes(preset(name), (2, block + 16))
    x = np.ones((2, 256), np.float32)
    x[1, 7] = np.nan
    with pytest.raises(ValueError, match="NaN or inf"):
        quantize(x, preset(name))


# --------------------------------------------------------------------------- against gguf-py
@pytest.mark.parametrize("name", LEGACY)
@pytest.mark.parametrize("seed", [0, 1])
def test_legacy_quantizers_equal_gguf_py_bit_for_bit(name: str, seed: int) -> None:
    for kind, x in weights(seed).items():
        expected = gguf.quants.quantize(x, qtype(name))
        q = quantize(x, preset(name))
        assert np.array_equal(tensor_bytes(q), expected.reshape(-1)), (kind, name)
        assert bits_equal(q.dequantize(), gguf.quants.dequantize(expected, qtype(name))), (kind, name)


@pytest.mark.parametrize("name", LEGACY)
def test_float64_and_bf16_input_is_rounded_to_float32_first(name: str) -> None:
    """llama.cpp quantizes float32: a float64 tensor is rounded to float32 once, as gguf-py's astype does."""
    x = np.random.default_rng(5).standard_normal((4, 256)) * 0.02
    expected = gguf.quants.quantize(x.astype(np.float32), qtype(name))
    assert np.array_equal(tensor_bytes(quantize(x, preset(name))), expected.reshape(-1))


@pytest.mark.parametrize("name", ALL)
def test_dequantize_equals_gguf_py_on_any_block_bytes(name: str) -> None:
    """Random bytes exercise every field; their preset tensor dequantizes as gguf-py does and writes them back."""
    from precisionlab.interop.readers.gguf_blocks import quantized_tensor

    block, type_size = gguf.GGML_QUANT_SIZES[qtype(name)]
    rng = np.random.default_rng(7)
    rows, cols = 6, 512
    raw = rng.integers(0, 256, (rows * cols // block, type_size), dtype=np.uint8)
    fp16_at = {"Q8_0": [0], "Q4_0": [0], "Q4_1": [0, 2], "Q5_0": [0], "Q5_1": [0, 2], "Q4_K": [0, 2], "Q6_K": [208]}
    for at in fp16_at[name]:  # finite fp16 fields of either sign
        raw[:, at : at + 2] = rng.uniform(-0.05, 0.05, (raw.shape[0], 1)).astype(np.float16).view(np.uint8)
    q = quantized_tensor(raw.reshape(-1), name, (rows, cols))
    assert str(q.scheme) == preset(name)
    assert bits_equal(q.dequantize(), gguf.quants.dequantize(raw.reshape(rows, -1), qtype(name)))
    assert np.array_equal(tensor_bytes(q), raw.reshape(-1))


# --------------------------------------------------------------------------- K-quants against llama.cpp's C
@pytest.mark.parametrize("name", ["Q4_K", "Q6_K"])
def test_k_quant_quantizers_equal_llama_cpp_reference(name: str) -> None:
    ref = np.load(REFERENCE)
    x, expected = ref["x"], ref[name.lower()]
    q = quantize(x, preset(name))
    got = tensor_bytes(q).reshape(expected.shape)
    differing = np.nonzero((got != expected).any(axis=1))[0]
    assert differing.size == 0, f"{name}: rows {differing.tolist()} differ from llama.cpp's quantize_row_*_ref"
    assert bits_equal(q.dequantize(), gguf.quants.dequantize(expected, qtype(name)))


def test_k_quant_reference_covers_its_edge_cases() -> None:
    """The golden file holds what the tests claim: all-zero and sub-1e-15 super-blocks, zero block scale codes."""
    ref = np.load(REFERENCE)
    q4k = ref["q4_k"].reshape(-1, 144)
    q6k = ref["q6_k"].reshape(-1, 210)
    assert (q6k == 0).all(axis=1).any()  # a super-block stored as zeros (scales below 1e-15)
    sc6 = q6k[:, 192:208].view(np.int8)
    assert (sc6 < 0).any() and (sc6 > 0).any()  # block scales of both signs
    assert (q4k[:, 4:8] & 63 == 0).any()  # a Q4_K block scale code of 0 (its codes come from the search)


def test_q4_k_two_level_parts() -> None:
    x = weights()["normal"]
    q = quantize(x, "gguf_q4_k")
    t = q.two_level
    assert t is not None and t.super_mins is not None and t.min_codes is not None
    assert t.super_scales.shape == (1, 16, 2) and t.scale_codes.shape == (1, 16, 16)
    assert set(np.unique(t.scale_codes)) <= set(range(64)) and t.scale_codes.max() == 63  # the largest scale: 63
    assert t.super_scales.dtype == np.float32 and bits_equal(t.super_scales.astype(np.float16), t.super_scales)
    # x_hat = (d * sc) * q - (dmin * mc): the effective per-32 scale and (negated) min the codes multiply
    d = np.repeat(t.super_scales, 8, axis=-1)
    dmin = np.repeat(t.super_mins, 8, axis=-1)
    assert bits_equal(q.scale_values, (d * t.scale_codes).astype(np.float32))
    assert q.min_values is not None and bits_equal(q.min_values, -(dmin * t.min_codes).astype(np.float32))


def test_q4_0_scale_sign_follows_the_largest_element() -> None:
    """d = max / -8 with max the signed element of largest magnitude: that element is code -8 (value -8 d)."""
    x = np.zeros((1, 32), np.float32)
    x[0, :4] = [0.1, -0.05, 0.8, -0.7]
    q = quantize(x, "gguf_q4_0")
    assert float(q.scale_values[0, 0, 0]) == float(np.float16(np.float32(0.8) / np.float32(-8)))
    assert float(q.dequantize()[0, 2]) == float(np.float32(-8) * q.scale_values[0, 0, 0])  # 0.8 exactly recovered


def test_clipped_elements_are_counted_not_warned() -> None:
    import warnings

    x = np.random.default_rng(2).standard_normal((8, 256)).astype(np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        q = quantize(x, "gguf_q4_k")
    assert q.diagnostics is not None and q.diagnostics.floored_blocks == 0
    assert q.diagnostics.blocks == 8 * 256 // 32 and q.diagnostics.elements == x.size
