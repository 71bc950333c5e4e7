"""llama.cpp's own matmul (models.ggml_matmul, through llama-cpp-python's ggml libraries): the weights it reads are
gguf-py's Q4_0 / Q8_0 blocks and precisionlab's gguf_* emulation, and its outputs keep the stated bound."""

from __future__ import annotations

import numpy as np
import pytest

from precisionlab.models import ggml_matmul
from precisionlab.quant import quantize

if ggml_matmul.missing_reason():
    pytest.skip(ggml_matmul.missing_reason(), allow_module_level=True)

gguf = pytest.importorskip("gguf", reason="gguf-py's quantizers are the independent reference")

KINDS = ("Q4_0", "Q8_0")


def _weight(n: int, k: int, seed: int = 0) -> np.ndarray:
    return (np.random.default_rng(seed).standard_normal((n, k)) * 0.05).astype(np.float32)


@pytest.mark.parametrize("kind", KINDS)
def test_the_weight_blocks_are_gguf_pys(kind: str) -> None:
    w = _weight(24, 96)
    with ggml_matmul.GgmlMatmul(w, kind, 1) as mm:
        blocks = mm.weight_blocks()
        assert mm.weight_bytes == ggml_matmul.stored_bytes(kind, 24, 96) == len(blocks)
    reference = gguf.quants.quantize(w, getattr(gguf.GGMLQuantizationType, kind))
    assert blocks == reference.tobytes()


@pytest.mark.parametrize("kind", KINDS)
def test_one_hot_activations_read_the_emulated_weight(kind: str) -> None:
    """v = 127/128 quantizes to Q8_0 exactly (d = 2^-7, code 127), and every product below is exact in fp32:
    the output is v times precisionlab's gguf_* dequantized weight, bit for bit."""
    w = _weight(16, 64, seed=1)
    v = np.float32(127 / 128)
    with ggml_matmul.GgmlMatmul(w, kind, 64) as mm:
        mm.set_input(np.eye(64, dtype=np.float32) * v)
        mm.run()
        read = mm.output().T
    emulated = quantize(w, f"gguf_{kind.lower()}").dequantize()
    assert np.array_equal(read, emulated * v)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("m", [1, 5])
def test_outputs_within_the_stated_bound(kind: str, m: int) -> None:
    w = _weight(64, 576, seed=m)
    x = np.random.default_rng(10 + m).standard_normal((m, 576)).astype(np.float32)
    with ggml_matmul.GgmlMatmul(w, kind, m) as mm:
        mm.set_input(x)
        mm.run()
        y = mm.output().astype(np.float64)
        mm.quantize_activations()  # runs on its own without touching the result
        assert np.array_equal(mm.output(), y)
    emulated = quantize(w, f"gguf_{kind.lower()}").dequantize()
    exact, bound = ggml_matmul.output_bound(x, emulated)
    assert (np.abs(y - exact) <= bound).all()
    assert np.abs(y - exact).max() > 0  # the activations were converted: not the float product


def test_bad_input() -> None:
    with pytest.raises(ValueError, match="whole blocks"):
        ggml_matmul.GgmlMatmul(_weight(4, 40), "Q4_0", 1)
    with pytest.raises(ValueError, match="kinds"):
        ggml_matmul.GgmlMatmul(_weight(4, 64), "Q4_1", 1)
    with ggml_matmul.GgmlMatmul(_weight(4, 64), "Q8_0", 2) as mm, pytest.raises(ValueError, match="shape"):
        mm.set_input(np.zeros((1, 64), np.float32))
