"""llama.cpp's activation quantization (quant.ggml_act) against a scalar transcription of ggml's C, element by
element; and, with llama-cpp-python installed, `+act=llamacpp` against llama.cpp itself on a small model."""

from __future__ import annotations

import ctypes
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
    # longer text, though every quantized matmul is exact given llama.cpp's own input (the test below): a float
    # rounding difference upstream moves an activation across a rounding boundary of its int8 code, and the
    # flipped code carries on (docs/export.md); still 5x closer than the weights alone.
    tolerance = {"gguf_q4_0": 1e-5, "gguf_q4_1": 1e-3, "gguf_q8_0": 1e-3}
    for scheme, limit in tolerance.items():
        recipe = Recipe("scheme", scheme, scheme=scheme)
        path = tmp_path / f"{scheme}.gguf"
        export_model(loaded, recipe, "gguf", path, tokenizer_pre="gpt-2", reload=False)
        rows = comparison_rows(compare(loaded, recipe, path, sequences))
        weights_only, emulated = rows[1], rows[2]
        assert emulated[3] < limit, (scheme, rows)  # max |d log p| per token
        assert weights_only[3] > 5 * emulated[3], (scheme, rows)


def test_ggml_tensor_layout_is_ggml_h() -> None:
    """struct ggml_tensor by hand from ggml.h: type (4, padded to 8), buffer 8, ne 4x8, nb 4x8, op 4,
    op_params 16x4, flags 4, src 10x8, view_src 8, view_offs 8, data 8, name 64, extra 8, padding 8."""
    from precisionlab.export.llamacpp_trace import GgmlTensor

    assert GgmlTensor.data.offset == 8 + 8 + 32 + 32 + 4 + 64 + 4 + 80 + 8 + 8
    assert GgmlTensor.name.offset == 256
    assert ctypes.sizeof(GgmlTensor) == 336


def test_a_strided_node_reads_as_numpy_lays_it_out() -> None:
    """A transposed (non-contiguous) F32 view and an F16 tensor, described as ggml describes them (ne[0] the
    fastest dimension, nb in bytes), read back as the arrays they are."""
    from precisionlab.export.llamacpp_trace import GgmlTensor, _read

    base = np.arange(12, dtype=F32).reshape(3, 4)  # 3 rows of 4
    t = GgmlTensor()
    t.type = 0
    t.ne[:] = [3, 4, 1, 1]  # the transpose: 4 rows of 3, a row's elements 16 bytes apart
    t.nb[:] = [16, 4, 48, 48]
    t.data = base.ctypes.data_as(ctypes.c_void_p).value
    assert np.array_equal(_read(t).reshape(4, 3), base.T)
    half = np.array([[0.5, -2.0], [65504.0, 1e-3]], dtype=np.float16)
    t.type = 1
    t.ne[:] = [2, 2, 1, 1]
    t.nb[:] = [2, 4, 8, 8]
    t.data = half.ctypes.data_as(ctypes.c_void_p).value
    assert np.array_equal(_read(t).reshape(2, 2), half.astype(F32))


def _tiny(tmp_path):  # type: ignore[no-untyped-def]
    from tests.export_helpers import tiny_model_dir
    from tests.model_helpers import require_peers

    require_peers("gguf", "tokenizers")
    from precisionlab.models import load_model

    loaded = load_model(str(tiny_model_dir(tmp_path / "m", "llama")))
    text = "The quick brown fox jumps over the lazy dog. Numbers 1 2 3 and words."
    return loaded, [0, *loaded.tokenizer(text, add_special_tokens=False)["input_ids"]]


@pytest.mark.skipif(importlib.util.find_spec("llama_cpp") is None, reason="needs llama-cpp-python")
def test_llama_cpp_graph_tensors_and_each_quantized_matmul(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """llama.cpp's own attn_norm-0 is the RMS norm of the token rows computed here as ggml's C does (float64
    sum of float32 squares, float32 1/sqrtf), exactly; and every quantized matmul of a Q8_0 and a Q4_0 export,
    fed llama.cpp's own input, gives llama.cpp's output to float rounding (the emulation is exact per op)."""
    torch = pytest.importorskip("torch")
    from precisionlab.export import Recipe, export_model
    from precisionlab.export.llamacpp_trace import capture_tensors, matmul_check

    loaded, tokens = _tiny(tmp_path)
    hidden = int(loaded.model.config.hidden_size)
    for scheme in ("gguf_q8_0", "gguf_q4_0"):
        path = tmp_path / f"{scheme}.gguf"
        export_model(loaded, Recipe("scheme", scheme, scheme=scheme), "gguf", path, tokenizer_pre="gpt-2",
                     reload=False)
        tensors = capture_tensors(path, tokens)
        assert tensors["result_output"][-1].size == len(tokens) * int(loaded.model.config.vocab_size)
        x = loaded.model.model.embed_tokens.weight.detach().float().numpy()[tokens]
        w = loaded.model.model.layers[0].input_layernorm.weight.detach().float().numpy()
        mean = ((x * x).astype(np.float64).sum(-1, keepdims=True) / hidden).astype(F32)
        scale = F32(1) / np.sqrt(mean + F32(loaded.model.config.rms_norm_eps))
        assert np.array_equal(tensors["attn_norm-0"][-1].reshape(len(tokens), hidden), (x * scale) * w)
        rows = matmul_check(path, tensors, int(loaded.model.config.num_hidden_layers))
        assert len(rows) == 7 * 2 + 1, rows  # seven Linears in each of two blocks, and the tied head
        assert max(r[3] for r in rows) < 2e-6, rows
    del torch


@pytest.mark.skipif(importlib.util.find_spec("llama_cpp") is None, reason="needs llama-cpp-python")
def test_float_export_agrees_with_llama_cpp_every_way(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """With nothing quantized (an all-F32 export) llama.cpp and the transformers model agree to float rounding,
    and so do llama.cpp's own ways of running it (token by token, KV F16 within F16 rounding, flash attention)."""
    from precisionlab.export.llamacpp import comparison_rows, llamacpp_logprobs, llamacpp_variants, model_logprobs
    from precisionlab.export.llamacpp_trace import write_float_gguf

    loaded, tokens = _tiny(tmp_path)
    path = write_float_gguf(loaded, tmp_path / "f32.gguf", tokenizer_pre="gpt-2")
    import gguf

    assert {t.tensor_type.name for t in gguf.GGUFReader(str(path)).tensors} == {"F32"}
    base = llamacpp_logprobs(path, [tokens])
    rows = comparison_rows([model_logprobs(loaded.model, [tokens], "float"), *llamacpp_variants(path, [tokens]),
                            base])
    assert rows[0][3] < 1e-4, rows  # the float model
    assert rows[1][3] < 1e-4, rows  # token by token
    assert rows[2][3] < 1e-2, rows  # KV F16: F16 rounding of K and V
    assert rows[3][3] < 1e-2, rows  # flash attention (on SmolLM2 it gives the same numbers with KV F32 and F16)
