"""NF4 codebook: bitsandbytes' float32 table bit for bit (its published constants, and bitsandbytes itself
where it is installed); nearest-value encoding; bitsandbytes' codes, scales and values."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from precisionlab.formats.codebook import NF4
from precisionlab.quant import quantize

# bitsandbytes' float32 NF4 table as published in its source: `get_4bit_type("nf4")` in
# bitsandbytes/functional.py (bitsandbytes 0.50.2; the same sixteen constants as the CUDA kernel's
# dDequantizeNF4 in csrc/kernels.cu and QLoRA's appendix E), written here as the float32 values' decimals.
PUBLISHED = [
    -1.0, -0.6961928009986877, -0.5250730514526367, -0.39491748809814453, -0.28444138169288635,
    -0.18477343022823334, -0.09105003625154495, 0.0, 0.07958029955625534, 0.16093020141124725,
    0.24611230194568634, 0.33791524171829224, 0.44070982933044434, 0.5626170039176941,
    0.7229568362236023, 1.0,
]


def test_nf4_is_the_published_float32_table_bit_for_bit() -> None:
    # the exact quantiles rounded once differ from these by up to 6 float32 ulps (bitsandbytes' points come
    # from a float32 linspace); every value must be the same float32, bit for bit
    assert len(NF4.values) == 16 and NF4.bits == 4
    ours = np.asarray(NF4.values, dtype=np.float64)
    assert (ours.astype(np.float32).astype(np.float64) == ours).all()  # float32 values
    np.testing.assert_array_equal(np.asarray(NF4.values, dtype=np.float32).view(np.uint32),
                                  np.asarray(PUBLISHED, dtype=np.float32).view(np.uint32))
    assert NF4.values[7] == 0.0 and NF4.values[0] == -1.0 and NF4.values[-1] == 1.0


def _bitsandbytes():  # type: ignore[no-untyped-def]
    torch = pytest.importorskip("torch")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        functional = pytest.importorskip("bitsandbytes.functional", reason="bitsandbytes is not installed")
    return torch, functional


def test_nf4_table_equals_bitsandbytes_itself() -> None:
    _, functional = _bitsandbytes()
    theirs = functional.get_4bit_type("nf4", device="cpu").numpy()
    np.testing.assert_array_equal(np.asarray(NF4.values, dtype=np.float32).view(np.uint32), theirs.view(np.uint32))


def test_nf4_codes_scales_and_values_equal_bitsandbytes_nibbles_swapped() -> None:
    # bitsandbytes' blockwise NF4 (absmax per 64, nearest table value): the same absmax, the same codes and the
    # same dequantized floats; its packing puts the FIRST element of each pair in the HIGH nibble, precisionlab's
    # (like torchao's fp4 and the MX formats here) in the LOW nibble
    torch, functional = _bitsandbytes()
    w = torch.from_numpy((np.random.default_rng(0).standard_normal((256, 512)) * 0.02).astype(np.float32))
    packed, state = functional.quantize_4bit(w, blocksize=64, quant_type="nf4")
    q = quantize(w.numpy(), "nf4:g64")
    theirs = packed.view(-1).numpy()
    np.testing.assert_array_equal(state.absmax.numpy(), q.scales.reshape(-1))
    np.testing.assert_array_equal(((theirs & 0xF) << 4) | (theirs >> 4), q.packed)  # nibbles swapped
    np.testing.assert_array_equal(functional.dequantize_4bit(packed, state).numpy(), q.dequantize())


def test_nf4_encode_picks_nearest() -> None:
    table = np.asarray(NF4.values)
    v = np.linspace(-1.2, 1.2, 2001).astype(np.float32)
    codes = NF4.encode(v)
    distance = np.abs(v[:, None].astype(np.float64) - table[None, :])
    expected = distance.argmin(axis=1)  # argmin takes the first (smaller) value on a tie
    np.testing.assert_array_equal(codes, expected)
    np.testing.assert_array_equal(NF4.decode(codes), table[codes].astype(np.float32))
