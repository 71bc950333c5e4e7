"""Tagged safetensors files: round trips, interop with the safetensors library, and clear errors."""

from __future__ import annotations

import contextlib
import json
import struct
from collections.abc import Iterator
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


@contextlib.contextmanager
def refused(path: Path, fragment: str) -> Iterator[None]:
    """Expect a ValueError that names `path` and, with the path taken out, says `fragment` (so the file name,
    which holds "safetensors", cannot satisfy a pattern on its own)."""
    with pytest.raises(ValueError) as info:
        yield
    message = str(info.value)
    assert str(path) in message, message
    assert fragment in message.replace(str(path), "<file>"), message


def test_refused_cannot_pass_on_the_path_alone(tmp_path: Path) -> None:
    path = tmp_path / "corrupt_overlap_outside.safetensors"
    with pytest.raises(AssertionError), refused(path, "overlap"):
        raise ValueError(f"{path}: something else went wrong")


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
    with refused(tmp_path / "cut.safetensors", "bad record for tensor 't1'"):
        load_quantized(tmp_path / "cut.safetensors")


def test_untagged_file_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "plain.safetensors"
    write_safetensors(path, {"w": ("F32", np.ones(3, dtype=np.float32))})
    with refused(path, "not a precisionlab quantized file (no 'precisionlab.quant' tag in its metadata)"):
        load_quantized(path)


def test_mismatched_tag_is_refused(tmp_path: Path, tensors: dict) -> None:
    path = tmp_path / "q.safetensors"
    save_quantized(path, {"w": tensors["t1"]})
    entries, meta = read_safetensors(path)
    record = json.loads(meta["w"])
    record["element"] = "e2m1 (fnuz, max 6)"
    meta["w"] = json.dumps(record)
    raw = {name: (e.dtype, e.raw()) for name, e in entries.items()}
    write_safetensors(path, raw, meta)
    with refused(path, "tensor 'w' is tagged 'e2m1 (fnuz, max 6)' / 'ue8m0', which does not match its scheme mxfp4"):
        load_quantized(path)
    record["scheme"] = "mxfp8"  # the e4m3 element, but codes sized for fp4
    meta["w"] = json.dumps(record)
    write_safetensors(path, raw, meta)
    with refused(path, "tagged 'e2m1 (fnuz, max 6)' / 'ue8m0', which does not match its scheme mxfp8"):
        load_quantized(path)
    record["element"] = "e4m3 (fn, max 448)"
    meta["w"] = json.dumps(record)
    write_safetensors(path, raw, meta)
    with refused(path, "tensor 'w' codes hold 8192 bytes; scheme mxfp8 on shape (64, 250) needs 16384"):
        load_quantized(path)


@pytest.mark.parametrize(("damage", "fragment"), [
    ("short", "header too small"),
    ("huge_header", "header too large"),
    ("bad_json", "invalid JSON in header"),
    ("truncated", "incomplete metadata, file not fully covered"),
    ("overlap", "invalid offset for tensor"),
    ("empty", "header too small"),
])
def test_corrupt_files_give_clear_errors(tmp_path: Path, tensors: dict, damage: str, fragment: str) -> None:
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
    elif damage == "empty":
        blob = b""
    else:  # the second tensor in the data section is moved onto the first one's bytes
        first, second = sorted((k for k in header if k != "__metadata__"), key=lambda k: header[k]["data_offsets"])[:2]
        size = header[second]["data_offsets"][1] - header[second]["data_offsets"][0]
        begin = header[first]["data_offsets"][0]
        header[second]["data_offsets"] = [begin, begin + size]
        text = json.dumps(header).encode()
        text += b" " * (-len(text) % 8)
        blob = struct.pack("<Q", len(text)) + text + blob[8 + length :]
    path.write_bytes(blob)
    with refused(path, f"not a valid safetensors file (Error while deserializing header: {fragment}"):
        load_quantized(path)


def _rewrite(path: Path, change) -> None:  # type: ignore[no-untyped-def]
    """Re-write a file after change(tensors, metadata) edits its entries / records in place."""
    entries, meta = read_safetensors(path)
    raw = {name: (e.dtype, e.raw().copy()) for name, e in entries.items()}
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
    ("int8:row:outliers=2",
     lambda t, m: t.update({"w.outlier_rows": ("F32", t["w.outlier_rows"][1].astype(np.float32))}),
     "entry 'w.outlier_rows' holds 500 F32 values; scheme int8:row:outliers=2 on shape [64, 250] needs 500 F16"),
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
    with refused(path, fragment):
        load_quantized(path)


def test_dotted_names_round_trip(tmp_path: Path) -> None:
    x = np.random.default_rng(2).standard_normal((8, 64)).astype(np.float32)
    q = {"model.layers.0.mlp.w": quantize(x, "int4:g32"), "model.layers.0": quantize(x, "mxfp4")}
    save_quantized(tmp_path / "q.safetensors", q)
    back = load_quantized(tmp_path / "q.safetensors")
    for name, value in q.items():
        np.testing.assert_array_equal(back[name].dequantize(), value.dequantize())
    with pytest.raises(ValueError, match="tensor name '__metadata__' is empty or reserved"):
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
    with refused(path, "bad record for tensor 'w': "):
        load_quantized(path)


_MANY_TENSORS = """
import resource, sys
import numpy as np
from precisionlab.quant import quantize
from precisionlab.quant.safetensors_io import load_quantized, read_safetensors, save_quantized, write_safetensors
from precisionlab.labs.quant_compare import iter_tensors
from pathlib import Path
folder = Path(sys.argv[1])
x = np.arange(64, dtype=np.float32).reshape(2, 32)
write_safetensors(folder / "plain.safetensors", {f"t{i}": ("F32", x + i) for i in range(600)})
write_safetensors(folder / "bf16.safetensors", {f"b{i}": ("BF16", np.full(4, 0x3F80 + i, np.uint16))
                                                for i in range(600)})
save_quantized(folder / "q.safetensors", {f"w{i}": quantize(x + i, "int4:g16") for i in range(300)})  # 600 entries
resource.setrlimit(resource.RLIMIT_NOFILE, (256, 256))
entries, _ = read_safetensors(folder / "plain.safetensors")
assert len(entries) == 600 and all((e.raw() == x + int(name[1:])).all() for name, e in entries.items())
bf16, _ = read_safetensors(folder / "bf16.safetensors")
assert all(e.to_float32()[0] == np.uint32(0x3F80 + int(n[1:]) << 16).view(np.float32) for n, e in bf16.items())
tensors, _ = iter_tensors(folder / "plain.safetensors")
assert len([load() for _, load, _ in tensors]) == 600
assert len(load_quantized(folder / "q.safetensors")) == 300
print("ok")
"""


def test_a_file_of_600_tensors_reads_under_ulimit_256(tmp_path: Path) -> None:
    # every entry was memory-mapped when the file was read, one open file descriptor each: 600 tensors under
    # `ulimit -n 256` failed with "Too many open files"; entries are now read one at a time, when asked for
    import subprocess
    import sys

    pytest.importorskip("resource")
    proc = subprocess.run([sys.executable, "-c", _MANY_TENSORS, str(tmp_path)], capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr[-2000:]


@pytest.mark.parametrize(("dtype", "array", "fragment"), [
    ("BF16", np.array([1.7]), "is float64 data declared BF16: pass its bit patterns as uint16"),  # was 9e-41
    ("I32", np.array([2**40]), "is int64 data declared I32: pass a int32 array"),  # was INT32_MIN
    ("F16", np.array([70000.0], dtype=np.float32), "is float32 data declared F16"),  # was inf
    ("F8_E4M3", np.array([0.5], dtype=np.float16), "is float16 data declared F8_E4M3: pass its bit patterns as uint8"),
    ("U8", np.array([300], dtype=np.int16), "is int16 data declared U8"),  # was 44
])
def test_values_are_never_cast_on_write(tmp_path: Path, dtype: str, array: np.ndarray, fragment: str) -> None:
    path = tmp_path / "w.safetensors"
    with pytest.raises(TypeError) as info:
        write_safetensors(path, {"w": (dtype, array)})
    assert fragment in str(info.value) and "does not cast" in str(info.value)
    assert not list(tmp_path.iterdir())  # nothing written, no temporary file left


def test_bf16_and_fp8_bit_patterns_round_trip_without_torch(tmp_path: Path) -> None:
    # the library's numpy API has no bf16 / fp8 dtype: they are written and read as their bit patterns
    bits = np.array([[0x3F80, 0xC040], [0x0001, 0x7F80]], dtype=np.uint16)  # 1, -3, the smallest subnormal, inf
    fp8 = np.array([0x38, 0xC4, 0x7E, 0x01], dtype=np.uint8)  # e4m3: 1, -3, 448, 2^-9
    write_safetensors(tmp_path / "b.safetensors", {"b": ("BF16", bits), "f": ("F8_E4M3", fp8)})
    entries, _ = read_safetensors(tmp_path / "b.safetensors")
    assert entries["b"].dtype == "BF16" and entries["b"].shape == (2, 2)
    np.testing.assert_array_equal(entries["b"].raw(), bits)
    np.testing.assert_array_equal(entries["b"].to_float32(), [[1.0, -3.0], [2.0**-133, np.inf]])
    np.testing.assert_array_equal(entries["f"].to_float32(), [1.0, -3.0, 448.0, 2.0**-9])


def test_without_the_safetensors_package_the_message_is_one_line(tmp_path: Path, run_cli,  # type: ignore[no-untyped-def]
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "w.safetensors"
    write_safetensors(path, {"w": ("F32", np.ones((4, 32), dtype=np.float32))})
    monkeypatch.setitem(__import__("sys").modules, "safetensors", None)  # `import safetensors` now fails
    with pytest.raises(ModuleNotFoundError, match=r"needs the safetensors package: pip install safetensors$"):
        read_safetensors(path)
    result = run_cli("quant", "compare", str(path), "-s", "int8:row")
    assert result.exit_code == 2
    assert result.output.strip() == ("error: reading and writing .safetensors files needs the safetensors package: "
                                     "pip install safetensors")
    np.save(tmp_path / "w.npy", np.ones((4, 32), dtype=np.float32))  # .npy files need no package
    assert run_cli("quant", "compare", str(tmp_path / "w.npy"), "-s", "int8:row").exit_code == 0
