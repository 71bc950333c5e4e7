"""GGUF tensors report their gguf_* preset, and the preset reproduces them: the grid-alignment fact.

Oracles: the files themselves (the packaged SmolLM2-135M GGUF, written by llama.cpp; files written by
gguf's own GGUFWriter and gguf.quants.quantize), `gguf.quants.dequantize`, and for the K-quants, which
gguf-py cannot quantize, llama.cpp's C quantizer's blocks in tests/data/ggml_kquant_reference.npz.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import precisionlab as pl
from precisionlab.quant import parse_scheme, quantize
from tests import interop_writers as writers
from tests.test_interop_readers import same_bits, smollm2_path, write_gguf

gguf = pytest.importorskip("gguf", reason="reading GGUF files needs the gguf package (pip install gguf)")
from precisionlab.interop.readers.gguf_blocks import tensor_bytes  # noqa: E402
from precisionlab.interop.readers.gguf_file import quantized  # noqa: E402

REFERENCE = Path(__file__).parent / "data" / "ggml_kquant_reference.npz"
PRESET = {"Q8_0": "gguf_q8_0", "Q4_0": "gguf_q4_0", "Q4_1": "gguf_q4_1", "Q5_0": "gguf_q5_0", "Q5_1": "gguf_q5_1",
          "Q4_K": "gguf_q4_k", "Q6_K": "gguf_q6_k"}


def test_every_smollm2_tensor_is_grid_aligned_with_its_scheme() -> None:
    """For every quantized tensor of the packaged SmolLM2 GGUF: its scheme, applied to its own dequantized
    values, gives those values back bit for bit, and writes the file's own block bytes."""
    smollm2_path()
    ckpt = writers.smollm2_checkpoint()
    checked = {}
    for name, t in ckpt.items():
        if t.layout == "gguf:F32":
            assert t.scheme is None
            continue
        type_name = t.details["ggml_type"]
        assert t.scheme == PRESET[type_name] and str(parse_scheme(t.scheme)) == t.scheme, name
        values = t.dequantize()
        q = quantize(values, t.scheme)
        assert same_bits(q.dequantize(), values), name  # quantize(dequantize) == dequantize
        assert np.array_equal(tensor_bytes(q), t.refs["blocks"].load().reshape(-1)), name  # the same blocks
        checked[type_name] = checked.get(type_name, 0) + 1
    assert checked == {"Q4_1": 210, "Q8_0": 1}


def test_the_plain_grammar_spellings_are_grid_aligned_too() -> None:
    """precisionlab's own rule under the same layout (uint4:g32:min=fp16, int8:g32) also gives SmolLM2's values
    back; an integer zero point (uint4:g32) or a symmetric int4 grid moves nearly every value."""
    smollm2_path()
    ckpt = writers.smollm2_checkpoint()
    q4_1 = [t for t in ckpt.values() if t.layout == "gguf:Q4_1"][:12]
    for t in q4_1:
        values = t.dequantize()
        assert same_bits(quantize(values, "uint4:g32:min=fp16").dequantize(), values), t.name
    values = q4_1[0].dequantize()
    for other in ("uint4:g32", "int4:g32"):
        assert np.mean(quantize(values, other).dequantize() != values) > 0.9, other
    embedding = ckpt["token_embd.weight"].dequantize()
    assert same_bits(quantize(embedding, "int8:g32").dequantize(), embedding)


def test_a_read_tensor_is_a_quantized_tensor_under_its_preset() -> None:
    smollm2_path()
    t = writers.smollm2_checkpoint()["blk.0.attn_q.weight"]
    q = quantized(t)
    assert str(q.scheme) == "gguf_q4_1" and q.shape == t.shape == (576, 576)
    assert q.nbytes == t.stored_nbytes and q.bits_per_element == 5.0
    assert same_bits(q.dequantize(), writers.smollm2_weight("blk.0.attn_q.weight"))
    assert q.mins is not None and q.mins.shape == (576, 576 // 32)
    with pytest.raises(ValueError, match="not a GGUF block tensor"):
        quantized(writers.smollm2_checkpoint()["output_norm.weight"])


@pytest.mark.parametrize("type_name", ["Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1"])
def test_the_preset_reproduces_a_file_gguf_quantized(tmp_path: Path, type_name: str) -> None:
    """The float weights a file was made from, quantized under the tensor's reported scheme, give the file's
    blocks (the file written by GGUFWriter from gguf.quants.quantize)."""
    rng = np.random.default_rng(11)
    data = (rng.standard_t(4, size=(24, 512)) * 0.02).astype(np.float32)
    data[2, :32] = 0.0
    data[4, 9] = 2.5
    write_gguf(tmp_path / "m.gguf", {"w": (data, type_name)})
    t = pl.read_checkpoint(tmp_path / "m.gguf")["w"]
    assert t.scheme == PRESET[type_name]
    q = quantize(data, t.scheme)
    assert np.array_equal(tensor_bytes(q), t.refs["blocks"].load().reshape(-1))
    assert same_bits(q.dequantize(), t.dequantize())


@pytest.mark.parametrize("type_name", ["Q4_K", "Q6_K"])
def test_the_preset_reproduces_llama_cpps_k_quant_blocks_in_a_file(tmp_path: Path, type_name: str) -> None:
    """llama.cpp's own Q4_K / Q6_K blocks of known float weights, written into a GGUF file, read back with the
    preset scheme; quantizing those weights under it gives the same blocks."""
    ref = np.load(REFERENCE)
    x, blocks = ref["x"], ref[type_name.lower()]
    write_gguf(tmp_path / "k.gguf", {"w": (blocks.reshape(x.shape[0], -1), type_name)})
    t = pl.read_checkpoint(tmp_path / "k.gguf")["w"]
    assert t.scheme == PRESET[type_name] and t.shape == x.shape
    q = quantize(x, t.scheme)
    assert np.array_equal(tensor_bytes(q), t.refs["blocks"].load().reshape(-1))
    assert same_bits(q.dequantize(), t.dequantize())


@pytest.mark.parametrize("type_name", ["Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1"])
def test_one_level_presets_are_fixed_points(type_name: str) -> None:
    """quantize(dequantize(b)) == dequantize(b), as values, for the one-level types on llama.cpp-made blocks of
    varied data (weights, one-signed, offset, tiny, integer-valued): each block's extreme elements are grid
    points, so the re-derived d and m round to the stored ones. (The K-quants' search need not return its own grid: see
    docs/interop.md.)"""
    x = np.load(REFERENCE)["x"]
    values = quantize(x, PRESET[type_name]).dequantize()
    assert same_bits(values, gguf.quants.dequantize(gguf.quants.quantize(x, gguf.GGMLQuantizationType[type_name]),
                                                     gguf.GGMLQuantizationType[type_name]))
    again = quantize(values, PRESET[type_name]).dequantize()
    assert np.array_equal(again, values)  # as values: 0 * d can change the sign of a zero when d changes sign
