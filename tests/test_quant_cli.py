"""`precisionlab quant demo | drill | compare` through the CLI runner, and the two registered labs."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from precisionlab.labs import get_lab
from precisionlab.quant.safetensors_io import write_safetensors


def _json(result) -> dict:  # type: ignore[no-untyped-def]
    assert result.exit_code == 0, result.output
    return json.loads(result.output[result.output.index("{"):])


def test_demo_findings(run_cli) -> None:  # type: ignore[no-untyped-def]
    data = _json(run_cli("quant", "demo", "--cols", "256", "--window", "8", "--json"))
    f = data["findings"]
    assert f["demo.outlier_amax_ratio"] == pytest.approx(45.0)
    # rounding error is uniform, rms = step / sqrt(12), with step = amax / 127: per tensor a typical row
    # gets the outlier's step, 45x its own, so per-row scaling cuts its rms error ~45x (Lab 3: ~45x)
    assert f["demo.typical_row_error_ratio"] == pytest.approx(45.0, rel=0.1)
    # per row, the error energy is 45^2 (outlier row) + 63 (typical rows) in units of a typical row's;
    # in fp16 the outlier row costs under one typical row (relative 2^-12 on values ~45/3.5 amax), so the
    # total error falls ~sqrt((2025 + 63) / 64) = 5.7x (Lab 3: ~5x) for N bytes out of ~64 N (~1.5%)
    assert f["demo.fp16_row_error_gain"] == pytest.approx((2088 / 64) ** 0.5, rel=0.15)
    assert f["demo.fp16_row_memory_overhead"] == pytest.approx((256 * 2 + 4 - 256 - 2) / (64 * 256 + 128))
    assert f["demo.g32_fp32_compression"] == pytest.approx(4 / 1.125)
    assert f["demo.delayed_stale_steps"] == 8 and f["demo.current_stale_steps"] == 0


def test_drill_findings(run_cli) -> None:  # type: ignore[no-untyped-def]
    data = _json(run_cli("quant", "drill", "--json"))
    f = data["findings"]
    expected = {"per_tensor": 16386, "per_row": 16512, "g128": 16640, "g64": 16896, "g32": 17408, "g16": 18432,
                "g8": 20480}
    assert {k: f[f"drill.bytes.{k}"] for k in expected} == expected
    assert f["drill.rest_rms_improvement"] > 3  # rms improves several-fold ...
    assert 0.9 < f["drill.rest_max_change"] < 1.2  # ... while the max barely moves
    # straddling a g32 boundary puts 2*32 - 4 = 60 ordinary weights per row on the outliers' coarse step
    # (12.5 / 127) instead of 32 - 4 = 28; that step's uniform rounding error dominates the rest rms, so
    # the ratio is about sqrt(60 / 28) = 1.46
    assert f["drill.alignment_damage_ratio"] == pytest.approx((60 / 28) ** 0.5, rel=0.05)
    rel = [f[f"drill.rel_err_w.{k}"] for k in expected]
    assert rel == sorted(rel, reverse=True)


def test_compare_npy_and_safetensors(run_cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    w = np.random.default_rng(0).standard_normal((64, 256)).astype(np.float32)
    np.save(tmp_path / "w.npy", w)
    data = _json(run_cli("quant", "compare", str(tmp_path / "w.npy"), "-s", "int8:row,mxfp4", "-s", "nvfp4",
                         "--json"))
    f = data["findings"]
    assert f["compare.w.mxfp4.bits_per_element"] == 4.25
    assert f["compare.w.int8:row.sqnr_db"] > f["compare.w.nvfp4.sqnr_db"] > f["compare.w.mxfp4.sqnr_db"] - 3
    bits = (w.view(np.uint32) >> 16).astype(np.uint16)  # bf16 by truncation
    ids = np.arange(4, dtype=np.int32)
    write_safetensors(tmp_path / "m.safetensors", {"layer.w": ("BF16", bits), "ids": ("I32", ids)})
    out = tmp_path / "out"
    data = _json(run_cli("quant", "compare", str(tmp_path / "m.safetensors"), "-s", "int4:g128", "--json",
                         "--out", str(out)))
    assert "compare.layer.w.int4:g128.rel_err" in data["findings"]
    assert "Skipped integer tensors: ids" in data["sections"][0]["note"]
    assert (out / "quant_compare.json").exists() and (out / "quant_compare_error_vs_bits.png").exists()


BAD_HEADER = "not a valid safetensors file (Error while deserializing header: invalid JSON"


@pytest.mark.parametrize(("make", "fragment"), [
    (lambda p: p.write_text("hello"), "read .npy or .safetensors"),
    (lambda p: p.write_bytes(b"\x05\x00\x00\x00\x00\x00\x00\x00{bad}"), BAD_HEADER),
    (lambda p: np.save(p, np.arange(5)), "needs a float array"),
    (lambda p: np.save(p, np.array([1.0, np.nan], dtype=np.float32)), "NaN/inf"),
])
def test_compare_bad_input_exits_2(run_cli, tmp_path: Path, make, fragment: str) -> None:  # type: ignore[no-untyped-def]
    name = "x.txt" if "read .npy" in fragment else ("x.safetensors" if "safetensors file" in fragment else "x.npy")
    path = tmp_path / name
    make(path)
    out = tmp_path / "out"
    result = run_cli("quant", "compare", str(path), "--out", str(out))
    assert result.exit_code == 2
    assert fragment in result.output
    assert not out.exists()  # nothing partially written


def test_compare_unknown_scheme_lists_close_matches(run_cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    np.save(tmp_path / "w.npy", np.ones((4, 32), dtype=np.float32))
    result = run_cli("quant", "compare", str(tmp_path / "w.npy"), "-s", "mxfp5")
    assert result.exit_code == 2 and "did you mean" in result.output and "mxfp4" in result.output


def test_bad_demo_option_exits_2(run_cli) -> None:  # type: ignore[no-untyped-def]
    assert run_cli("quant", "demo", "--cols", "0").exit_code == 2
    for ratio in ("inf", "nan", "-1", "1e6"):
        result = run_cli("quant", "demo", "--ratio", ratio, "--cols", "8")
        assert result.exit_code == 2 and "--ratio must be in" in result.output


@pytest.mark.parametrize("name", ["quant_demo", "quant_drill"])
def test_registered_labs_run_quick(name: str) -> None:
    lab = get_lab(name)
    result = lab.run(**lab.quick)
    assert result.findings and result.sections
    json.dumps(result.to_dict(), allow_nan=False)


def test_compare_progress_goes_to_stderr_only(tmp_path: Path) -> None:
    # a real process with rich forced to draw its bar (as on a terminal): stdout stays pure JSON
    import os
    import subprocess
    import sys

    np.save(tmp_path / "w.npy", np.random.default_rng(0).standard_normal((8, 64)).astype(np.float32))
    env = {**os.environ, "FORCE_COLOR": "1", "TTY_COMPATIBLE": "1", "TTY_INTERACTIVE": "1", "TERM": "xterm"}
    main = "from precisionlab.cli.main import cli; cli()"
    proc = subprocess.run([sys.executable, "-c", main, "quant", "compare", "w.npy", "-s", "int8:row", "--json"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "compare.w.int8:row.rel_err" in json.loads(proc.stdout)["findings"]
    assert "w: int8:row" in proc.stderr or "quantizing" in proc.stderr  # the bar was drawn, on stderr


def test_save_writes_a_tagged_file(run_cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    from precisionlab.quant import quantize
    from precisionlab.quant.safetensors_io import load_quantized

    rng = np.random.default_rng(3)
    w = rng.standard_normal((16, 96)).astype(np.float32)
    bits = (w.view(np.uint32) >> 16).astype(np.uint16)  # bf16 by truncation
    src = tmp_path / "m.safetensors"
    ml_dtypes = pytest.importorskip("ml_dtypes")
    fp8 = w[:8, :32].astype(ml_dtypes.float8_e4m3fn)
    ids = np.arange(3, dtype=np.int32)
    write_safetensors(src, {"model.layers.0.w": ("BF16", bits), "bias": ("F32", w[0]), "ids": ("I32", ids),
                            "fp8.w": ("F8_E4M3", fp8.view(np.uint8))})
    data = _json(run_cli("quant", "save", str(src), "-s", "e4m3:block8x32", "-o", str(tmp_path / "q.safetensors"),
                         "--json"))
    assert data["findings"]["save.tensors"] == 2  # bias is 1-D (no 2-D blocks), ids are integers
    assert "bias" in data["sections"][0]["note"] and "ids" in data["sections"][0]["note"]
    back = load_quantized(tmp_path / "q.safetensors")
    widened = (bits.astype(np.uint32) << 16).view(np.float32)
    expected = quantize(widened, "e4m3:block8x32")
    assert set(back) == {"model.layers.0.w", "fp8.w"} and back["model.layers.0.w"].dtype == "bfloat16"
    assert back["fp8.w"].dtype == "float8_e4m3fn"
    # the file's fp8 values, widened by ml_dtypes (independently of our decoder), give the same packed codes
    np.testing.assert_array_equal(back["fp8.w"].packed, quantize(fp8.astype(np.float32), "e4m3:block8x32").packed)
    np.testing.assert_array_equal(back["model.layers.0.w"].packed, expected.packed)
    np.testing.assert_array_equal(back["model.layers.0.w"].scales, expected.scales)


def test_save_bad_input_writes_nothing(run_cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    w = np.ones((4, 32), dtype=np.float32)
    w[1, 2] = np.nan
    np.save(tmp_path / "w.npy", w)
    out = tmp_path / "q.safetensors"
    result = run_cli("quant", "save", str(tmp_path / "w.npy"), "-s", "int8:row", "-o", str(out))
    assert result.exit_code == 2 and "NaN or inf" in result.output  # int8's default nonfinite=error
    assert run_cli("quant", "save", str(tmp_path / "w.npy"), "-s", "int8", "-o", str(tmp_path / "q.npy")).exit_code == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == ["w.npy"]  # nothing written, no temp file left
    assert run_cli("quant", "save", str(tmp_path / "w.npy"), "-s", "mxfp8", "-o", str(out)).exit_code == 0
    from precisionlab.quant.safetensors_io import load_quantized

    assert np.isnan(load_quantized(out)["w"].dequantize()[1]).all()  # MX: the block is stored as NaN


def test_compare_and_save_with_gguf_presets(run_cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """gguf_* presets and min= from the command line; K-quant tensors are not written to safetensors."""
    rng = np.random.default_rng(4)
    w = (rng.standard_normal((8, 512)) * 0.02).astype(np.float32)
    write_safetensors(tmp_path / "m.safetensors", {"a.w": ("F32", w), "c.w": ("F32", np.resize(w, (4, 576)))})
    data = _json(run_cli("quant", "compare", str(tmp_path / "m.safetensors"), "-s", "gguf_q4_1,gguf_q5_0",
                         "-s", "uint4:g32:min=fp16", "--json"))
    f = data["findings"]
    assert f["compare.a.w.gguf_q4_1.bits_per_element"] == 5.0 and f["compare.c.w.gguf_q5_0.bits_per_element"] == 5.5
    assert f["compare.a.w.uint4:g32:min=fp16.bits_per_element"] == 5.0
    out = tmp_path / "q.safetensors"
    data = _json(run_cli("quant", "save", str(tmp_path / "m.safetensors"), "-s", "gguf_q5_1", "-o", str(out),
                         "--json"))
    assert data["findings"]["save.tensors"] == 2
    result = run_cli("quant", "save", str(tmp_path / "m.safetensors"), "-s", "gguf_q6_k", "-o",
                     str(tmp_path / "k.safetensors"))
    assert result.exit_code == 2 and "two-level" in result.output and result.output.count("\n") == 1
    assert not (tmp_path / "k.safetensors").exists()
