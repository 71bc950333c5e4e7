"""Tagged safetensors files: round trips, interop with the safetensors library, and clear errors."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import numpy as np
import pytest

from precisionlab.quant import quantize
from precisionlab.quant.safetensors_io import load_quantized, read_safetensors, save_quantized, write_safetensors

SCHEMES = ["int4:g128:asym", "mxfp4", "nvfp4", "int8:row:outliers=2", "mxfp6_e3m2", "int8:g32:scale=bf16",
           "e4m3:g32:scale=e4m3", "uint4:g64", "nf4:g64", "dsv3_weight", "mxint8:rceil"]


@pytest.fixture
def tensors() -> dict:
    x = np.random.default_rng(0).standard_normal((64, 250)).astype(np.float32)
    return {f"t{i}": quantize(x, s) for i, s in enumerate(SCHEMES)}


def test_round_trip(tmp_path: Path, tensors: dict) -> None:
    path = tmp_path / "q.safetensors"
    save_quantized(path, tensors)
    back = load_quantized(path)
    assert set(back) == set(tensors)
    for name, q in tensors.items():
        b = back[name]
        assert b.scheme == q.scheme and b.shape == q.shape and b.nbytes == q.nbytes
        np.testing.assert_array_equal(b.codes, q.codes)
        np.testing.assert_array_equal(b.dequantize(), q.dequantize())
    assert not [p for p in tmp_path.iterdir() if p.name != "q.safetensors"]  # no temp files left


def test_safetensors_library_reads_our_file(tmp_path: Path, tensors: dict) -> None:
    safetensors = pytest.importorskip("safetensors")
    path = tmp_path / "q.safetensors"
    save_quantized(path, tensors)
    with safetensors.safe_open(str(path), framework="numpy") as fh:
        meta = fh.metadata()
        assert meta["precisionlab.quant"] == "1"
        record = json.loads(meta["t1"])
        assert record["scheme"] == "mxfp4" and record["element"].startswith("e2m1 (finite")
        np.testing.assert_array_equal(fh.get_tensor("t0.codes"), tensors["t0"].packed)


def test_we_read_the_librarys_file(tmp_path: Path) -> None:
    numpy_io = pytest.importorskip("safetensors.numpy")
    data = {"a": np.arange(6, dtype=np.float32).reshape(2, 3), "b": np.ones(4, dtype=np.float16)}
    numpy_io.save_file(data, str(tmp_path / "lib.safetensors"), metadata={"k": "v"})
    entries, meta = read_safetensors(tmp_path / "lib.safetensors")
    assert meta == {"k": "v"}
    np.testing.assert_array_equal(entries["a"].to_float32(), data["a"])
    np.testing.assert_array_equal(entries["b"].to_float32(), data["b"])


def test_a_file_rewritten_by_the_safetensors_library_still_loads(tmp_path: Path, tensors: dict) -> None:
    """Re-saving our file with safetensors and its own 'format': 'pt' metadata keeps every record."""
    safetensors = pytest.importorskip("safetensors")
    torch_io = pytest.importorskip("safetensors.torch")  # numpy has no float8 dtype for the e4m3 scales
    path = tmp_path / "q.safetensors"
    save_quantized(path, tensors)
    with safetensors.safe_open(str(path), framework="pt") as fh:
        meta = {**fh.metadata(), "format": "pt"}
        data = {key: fh.get_tensor(key) for key in fh.keys()}  # noqa: SIM118 (a file handle, not a dict)
    torch_io.save_file(data, str(tmp_path / "again.safetensors"), metadata=meta)
    back = load_quantized(tmp_path / "again.safetensors")
    assert set(back) == set(tensors)
    np.testing.assert_array_equal(back["t1"].dequantize(), tensors["t1"].dequantize())
    meta["t1"] = meta["t1"][:-5]  # a record cut short is still an error, not foreign metadata
    torch_io.save_file(data, str(tmp_path / "cut.safetensors"), metadata=meta)
    with pytest.raises(ValueError, match="bad record for tensor 't1'"):
        load_quantized(tmp_path / "cut.safetensors")


def test_untagged_file_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "plain.safetensors"
    write_safetensors(path, {"w": ("F32", np.ones(3, dtype=np.float32))})
    with pytest.raises(ValueError, match="not a precisionlab quantized file"):
        load_quantized(path)


def test_mismatched_tag_is_refused(tmp_path: Path, tensors: dict) -> None:
    path = tmp_path / "q.safetensors"
    save_quantized(path, {"w": tensors["t1"]})
    entries, meta = read_safetensors(path)
    record = json.loads(meta["w"])
    record["element"] = "e2m1 (fnuz, max 6)"
    meta["w"] = json.dumps(record)
    raw = {name: (e.dtype, np.asarray(e.raw).reshape(e.shape)) for name, e in entries.items()}
    write_safetensors(path, raw, meta)
    with pytest.raises(ValueError, match="does not match its scheme"):
        load_quantized(path)
    record["element"] = "e2m1 (finite, max 6)"
    record["scheme"] = "mxfp8"  # codes sized for fp4
    meta["w"] = json.dumps(record)
    write_safetensors(path, raw, meta)
    with pytest.raises(ValueError, match=r"does not match|needs"):
        load_quantized(path)


@pytest.mark.parametrize("damage", ["short", "huge_header", "bad_json", "truncated", "overlap"])
def test_corrupt_files_give_clear_errors(tmp_path: Path, tensors: dict, damage: str) -> None:
    path = tmp_path / "q.safetensors"
    save_quantized(path, {"w": tensors["t0"]})
    blob = path.read_bytes()
    (length,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8 : 8 + length])
    if damage == "short":
        blob = blob[:5]
    elif damage == "huge_header":
        blob = struct.pack("<Q", 10**12) + blob[8:]
    elif damage == "bad_json":
        blob = blob[:8] + b"#" + blob[9:]
    elif damage == "truncated":
        blob = blob[:-10]
    else:
        header["w.scales"]["data_offsets"] = [0, header["w.scales"]["data_offsets"][1] - header["w.scales"][
            "data_offsets"][0]]
        text = json.dumps(header).encode()
        text += b" " * (-len(text) % 8)
        blob = struct.pack("<Q", len(text)) + text + blob[8 + length :]
    path.write_bytes(blob)
    with pytest.raises(ValueError, match=r"safetensors|outside|overlap|corrupt"):
        load_quantized(path)


def _rewrite(path: Path, change) -> None:  # type: ignore[no-untyped-def]
    """Re-write a file after change(tensors, metadata) edits its entries / records in place."""
    entries, meta = read_safetensors(path)
    raw = {name: (e.dtype, np.asarray(e.raw).reshape(e.shape).copy()) for name, e in entries.items()}
    change(raw, meta)
    write_safetensors(path, raw, meta)


def _set_shape(meta: dict, name: str, shape: list) -> None:
    record = json.loads(meta[name])
    record["shape"] = shape
    meta[name] = json.dumps(record)


@pytest.mark.parametrize(("scheme", "change", "fragment"), [
    ("nvfp4", lambda t, m: t.update({"w.tensor_scale": ("F32", np.zeros(0, np.float32))}), "needs 1 F32"),
    ("nvfp4", lambda t, m: t.update({"w.tensor_scale": ("F32", np.array([np.nan], np.float32))}), "finite"),
    ("nvfp4", lambda t, m: t.pop("w.tensor_scale"), "lacks its entry"),
    ("int8:row:outliers=2", lambda t, m: t.update({"w.outlier_rows": ("F32", t["w.outlier_rows"][1])}), "F16"),
    ("int8:row:outliers=2", lambda t, m: t.update({"w.outlier_index": ("I32", np.array([5, 64], np.int32))}),
     "ascending rows"),
    ("int4:g128:asym", lambda t, m: t.update({"w.zero_points": ("U8", t["w.zero_points"][1][:-1])}), "needs 64 U8"),
    ("int4:g128", lambda t, m: t.update({"w.scales": ("F32", t["w.scales"][1].astype(np.float32))}), "needs F16"),
    ("int4:g128", lambda t, m: _set_shape(m, "w", [64, -250]), "bad record"),
    ("int4:g128", lambda t, m: _set_shape(m, "w", [64, 257]), "needs"),
])
def test_inconsistent_entries_are_refused(tmp_path: Path, scheme: str, change, fragment: str) -> None:  # type: ignore[no-untyped-def]
    x = np.random.default_rng(1).standard_normal((64, 250)).astype(np.float32)
    path = tmp_path / "q.safetensors"
    save_quantized(path, {"w": quantize(x, scheme)})
    _rewrite(path, change)
    with pytest.raises(ValueError, match=fragment):
        load_quantized(path)


def test_dotted_names_round_trip(tmp_path: Path) -> None:
    x = np.random.default_rng(2).standard_normal((8, 64)).astype(np.float32)
    q = {"model.layers.0.mlp.w": quantize(x, "int4:g32"), "model.layers.0": quantize(x, "mxfp4")}
    save_quantized(tmp_path / "q.safetensors", q)
    back = load_quantized(tmp_path / "q.safetensors")
    for name, value in q.items():
        np.testing.assert_array_equal(back[name].dequantize(), value.dequantize())
    with pytest.raises(ValueError, match="reserved"):
        save_quantized(tmp_path / "r.safetensors", {"__metadata__": q["model.layers.0"]})
    assert not (tmp_path / "r.safetensors").exists()


def test_we_read_a_torch_bf16_file(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    torch_io = pytest.importorskip("safetensors.torch")
    t = torch.randn(3, 40).to(torch.bfloat16)
    torch_io.save_file({"layer.w": t}, str(tmp_path / "bf16.safetensors"))
    entries, _ = read_safetensors(tmp_path / "bf16.safetensors")
    assert entries["layer.w"].dtype == "BF16"
    np.testing.assert_array_equal(entries["layer.w"].to_float32(), t.float().numpy())  # torch's own widening
    np.testing.assert_array_equal(quantize(entries["layer.w"].to_float32(), "int4:g32").codes,
                                  quantize(t, "int4:g32").codes)


@pytest.mark.parametrize("shape", [[4, 33.5], [4.0, 33.0], ["4", "33"], [True, 132], "4x33"])
def test_record_shape_must_be_integers(tmp_path: Path, shape: object) -> None:
    # a record shape of [4, 33.5] was read as (4, 33) and loaded (int() truncated it)
    q = quantize(np.random.default_rng(0).standard_normal((4, 33)).astype(np.float32), "int4:g16")
    path = tmp_path / "w.safetensors"
    save_quantized(path, {"w": q})
    raw = path.read_bytes()
    (length,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8 : 8 + length])
    record = json.loads(header["__metadata__"]["w"])
    record["shape"] = shape
    header["__metadata__"]["w"] = json.dumps(record)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    path.write_bytes(struct.pack("<Q", len(text)) + text + raw[8 + length :])
    with pytest.raises(ValueError, match="bad record for tensor 'w'"):
        load_quantized(path)
