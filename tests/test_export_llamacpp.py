"""llama.cpp's activation quantization (quant.ggml_act) against a scalar transcription of ggml's C, element by
element; and, with llama-cpp-python installed, `+act=llamacpp` against llama.cpp itself on a small model."""

from __future__ import annotations

import importlib.util
import math
import struct

import numpy as np
import pytest

from precisionlab.quant import ggml_act

F32 = np.float32


def _fp16(v: float) -> float:
    return struct.unpack("<e", struct.pack("<e", v))[0]  # IEEE half, round to nearest even


def _q8_0_scalar(block: list[float]) -> tuple[list[float], float]:
    """quantize_row_q8_0 (AVX2) for one block of 32, as C does it in float32, then the dot product's values."""
    amax = F32(0)
    for v in block:
        amax = max(amax, F32(abs(v)))
    d = F32(amax / F32(127))
    inv = F32(F32(127) / amax) if amax != 0 else F32(0)
    codes = [float(np.rint(F32(F32(v) * inv))) for v in block]  # _mm256_round_ps(_MM_ROUND_NEAREST): half even
    stored = _fp16(float(d))
    return [float(F32(stored) * F32(c)) for c in codes], float(F32(F32(d) * F32(sum(codes))))


def _q8_k_scalar(block: list[float]) -> list[float]:
    """quantize_row_q8_K_ref for one block of 256."""
    top, amax = F32(0), F32(0)
    for v in block:
        if abs(F32(v)) > amax:
            amax, top = F32(abs(v)), F32(v)
    if amax == 0:
        return [0.0] * len(block)
    iscale = F32(F32(-127) / top)
    out = []
    d = F32(F32(1) / iscale)
    for v in block:
        product = F32(iscale * F32(v))
        below = math.floor(float(product))
        tie = float(product) - below == 0.5
        q = min(127, (below + (below % 2)) if tie else math.floor(float(product) + 0.5))  # nearest, ties to even
        out.append(float(F32(d * F32(q))))
    return out


def _data(n: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal(n) * rng.choice([1e-3, 1.0, 30.0], n)).astype(F32)
    x[:32] = np.arange(32, dtype=F32) - 16  # exact halves after scaling: ties
    x[64:96] = 0  # an all-zero block
    return x


def test_q8_0_and_q8_1_match_the_scalar_c() -> None:
    x = _data(32 * 40, 0)
    values = ggml_act.q8_0(x[None, :])[0]
    values1, correction = ggml_act.q8_1(x[None, :])
    for b in range(40):
        block = [float(v) for v in x[32 * b : 32 * b + 32]]
        expected, s_unrounded = _q8_0_scalar(block)
        assert np.array_equal(values[32 * b : 32 * b + 32], np.asarray(expected, dtype=F32)), b
        total = sum(round(e / _fp16(float(F32(max(abs(v) for v in block)) / F32(127)))) if any(block) else 0
                    for e in expected)
        s = _fp16(s_unrounded)
        stored = _fp16(float(F32(F32(max(abs(F32(v)) for v in block)) / F32(127))))
        assert correction[0, b] == pytest.approx(s - stored * total, abs=0), b
    assert np.array_equal(values, values1[0])


def test_q8_k_matches_the_scalar_c() -> None:
    x = _data(256 * 6, 1)
    values = ggml_act.q8_k(x[None, :])[0]
    for b in range(6):
        block = [float(v) for v in x[256 * b : 256 * b + 256]]
        assert np.array_equal(values[256 * b : 256 * b + 256], np.asarray(_q8_k_scalar(block), dtype=F32)), b


def test_half_rounding() -> None:
    x = _data(64, 2)
    assert np.array_equal(ggml_act.f16(x), x.astype(np.float16).astype(F32))


def test_bf16_rounding() -> None:
    torch = pytest.importorskip("torch")
    x = _data(64, 2)
    assert np.array_equal(ggml_act.bf16(x), torch.from_numpy(x).to(torch.bfloat16).float().numpy())


def test_rows_must_be_whole_blocks() -> None:
    with pytest.raises(ValueError, match="blocks of 256"):
        ggml_act.q8_k(np.zeros((2, 300), dtype=F32))


@pytest.mark.skipif(importlib.util.find_spec("llama_cpp") is None, reason="needs llama-cpp-python")
def test_act_llamacpp_predicts_llama_cpp(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """On a small random Llama exported at Q4_0, llama.cpp's own per-token log-probabilities are predicted by
    +act=llamacpp to 1e-5; at Q8_0 / Q4_1 to 1e-3; the weights-only emulation is at least 5x further away."""
    from tests.export_helpers import tiny_model_dir
    from tests.model_helpers import require_peers

    require_peers("gguf", "tokenizers")
    from precisionlab.export import Recipe, export_model
    from precisionlab.export.llamacpp import compare, comparison_rows
    from precisionlab.models import load_model

    loaded = load_model(str(tiny_model_dir(tmp_path / "m", "llama")))
    texts = ["The quick brown fox jumps over the lazy dog. Numbers 1 2 3 and words.",
             "words, words, words. The lazy dog jumps, a small model reads a small text."]
    sequences = [[0, *loaded.tokenizer(t, add_special_tokens=False)["input_ids"]] for t in texts]
    # Q4_0: to rounding. Q8_0 and Q4_1: llama.cpp departs from the emulation after the first positions of the
    # longer text (a kernel difference not yet explained, docs/export.md), still 5x closer than the weights alone.
    tolerance = {"gguf_q4_0": 1e-5, "gguf_q4_1": 1e-3, "gguf_q8_0": 1e-3}
    for scheme, limit in tolerance.items():
        recipe = Recipe("scheme", scheme, scheme=scheme)
        path = tmp_path / f"{scheme}.gguf"
        export_model(loaded, recipe, "gguf", path, tokenizer_pre="gpt-2", reload=False)
        rows = comparison_rows(compare(loaded, recipe, path, sequences))
        weights_only, emulated = rows[1], rows[2]
        assert emulated[3] < limit, (scheme, rows)  # max |d log p| per token
        assert weights_only[3] > 5 * emulated[3], (scheme, rows)
