"""The named symmetric int conventions of the grammar (range=narrow|full|full_neg), and the readers that
report them. Expected codes and scales are worked by hand from the rules (powers of two keep every
quotient exact): narrow s = amax / 7, full s = amax / 7.5, full_neg s = amax / 8 for int4."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import precisionlab as pl
from precisionlab.quant.safetensors_io import load_quantized, save_quantized


@pytest.mark.parametrize("spec", ["int4:g32:range=full", "int4:g32:range=full_neg", "int8:row:range=full",
                                  "int2:g16:range=full_neg", "int4:g128:scale=bf16:range=full"])
def test_parse_format_round_trip(spec: str) -> None:
    scheme = pl.parse_scheme(spec)
    assert str(scheme) == spec and pl.parse_scheme(str(scheme)) == scheme


def test_narrow_is_the_default_and_is_not_written() -> None:
    assert str(pl.parse_scheme("int4:g32:range=narrow")) == "int4:g32"
    assert pl.parse_scheme("int4:g32").int_range == "narrow"


@pytest.mark.parametrize("bad", ["int4:g32:asym:range=full", "e4m3:range=full", "uint4:g32:range=full",
                                 "mxint8:range=full", "int4:range=wide", "int4:range=full:range=narrow"])
def test_range_only_for_symmetric_signed_integers(bad: str) -> None:
    with pytest.raises(ValueError, match="range"):
        pl.parse_scheme(bad)


def block(values: list[float], size: int = 32) -> np.ndarray:
    x = np.zeros(size, dtype=np.float32)
    x[: len(values)] = values
    return x.reshape(1, size)


@pytest.mark.parametrize(("spec", "values", "scale", "codes"), [
    # narrow: amax 0.875 -> s = 0.125, codes +-7
    ("int4:g32", [-0.875, 0.875, 0.3125], 0.125, [-7, 7, 2]),
    # full: amax 0.9375 -> s = 0.9375 / 7.5 = 0.125; -7.5 -> -8 (ties to even), +7.5 -> 8 clips to 7
    ("int4:g32:range=full", [-0.9375, 0.9375, 0.3125], 0.125, [-8, 7, 2]),
    # full_neg: amax 1 -> s = 1 / 8; -1 -> -8 exactly, +1 -> 8 clips to 7
    ("int4:g32:range=full_neg", [-1.0, 1.0, 0.3125], 0.125, [-8, 7, 2]),
    # int8 full: amax 127.5 / 64 -> s = 1 / 64; -127.5 -> -128
    ("int8:g32:range=full", [-127.5 / 64, 1.0, -0.5], 1 / 64, [-128, 64, -32]),
])
def test_codes_and_scales(spec: str, values: list[float], scale: float, codes: list[int]) -> None:
    x = block(values)
    q = pl.quantize(x, spec)
    assert float(q.scale_values.reshape(-1)[0]) == scale
    expected = np.zeros(32)
    expected[: len(codes)] = codes
    assert np.array_equal(q.dequantize().reshape(-1), (expected * scale).astype(np.float32))


def test_full_range_uses_the_extra_code_and_keeps_the_bytes() -> None:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(64, 256)).astype(np.float32)
    narrow, full = pl.quantize(x, "int4:g128"), pl.quantize(x, "int4:g128:range=full")
    assert narrow.nbytes == full.nbytes
    assert np.abs(narrow.dequantize() / narrow.scale_values.repeat(128, axis=-1).reshape(64, 256)).max() == 7
    assert (np.abs(full.dequantize() / full.scale_values.repeat(128, axis=-1).reshape(64, 256)) == 8).any()


def test_saved_files_keep_the_range(tmp_path: Path) -> None:
    x = np.random.default_rng(1).normal(size=(8, 64)).astype(np.float32)
    q = pl.quantize(x, "int4:g32:range=full")
    save_quantized(tmp_path / "q.safetensors", {"w": q})
    back = load_quantized(tmp_path / "q.safetensors")["w"]
    assert str(back.scheme) == "int4:g32:range=full"
    assert np.array_equal(back.dequantize(), q.dequantize())


def test_gguf_q4_0_reports_full_neg(tmp_path: Path) -> None:
    gguf = pytest.importorskip("gguf")
    from tests.test_interop_readers import write_gguf

    data = np.random.default_rng(2).normal(size=(4, 64)).astype(np.float32)
    write_gguf(tmp_path / "q.gguf", {"w": (data, "Q4_0")})
    t = pl.read_checkpoint(tmp_path / "q.gguf")["w"]
    assert t.scheme == "gguf_q4_0" and pl.parse_scheme(t.scheme).int_range == "full_neg"  # codes -8..7, d = max/-8
    del gguf
