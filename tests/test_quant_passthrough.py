"""`quant save` / `quant compare` on a model-like file: what is quantized, what passes through unchanged,
and a tensor a scheme cannot take. Pass-through bytes are checked against the input as the safetensors
library itself reads both files (an independent reader), not through precisionlab's reader."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("safetensors", reason="quant save / compare on .safetensors need the safetensors package")

from safetensors import safe_open

from precisionlab.quant.safetensors_io import (
    TAG_KEY,
    load_passthrough,
    load_quantized,
    write_safetensors,
)

RNG = np.random.default_rng(11)
TENSORS = {
    "model.embed_tokens.weight": ("F32", RNG.standard_normal((64, 32)).astype(np.float32)),
    "model.layers.0.mlp.down_proj.weight": ("F32", RNG.standard_normal((32, 128)).astype(np.float32)),
    "model.layers.0.input_layernorm.weight": ("F32", (1 + 0.1 * RNG.standard_normal(32)).astype(np.float32)),
    "model.layers.0.self_attn.q_proj.bias": ("F16", RNG.standard_normal(32).astype(np.float16)),
    "tok_ids": ("I32", np.arange(7, dtype=np.int32)),
    "lm_head.weight": ("F32", RNG.standard_normal((64, 32)).astype(np.float32)),
}
MATRICES = {"model.embed_tokens.weight", "model.layers.0.mlp.down_proj.weight", "lm_head.weight"}


@pytest.fixture
def model(tmp_path: Path) -> Path:
    path = tmp_path / "model.safetensors"
    write_safetensors(path, TENSORS)
    return path


def library_read(path: Path, name: str) -> np.ndarray:
    with safe_open(str(path), framework="numpy") as handle:
        return handle.get_tensor(name)


def saved(run_cli, model: Path, *args: str) -> tuple[dict, Path]:  # type: ignore[no-untyped-def]
    out = model.parent / "q.safetensors"
    result = run_cli("quant", "save", str(model), "-s", "int8:row", "-o", str(out), "--json", *args)
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout), out


def test_tensors_not_quantized_pass_through_unchanged_and_are_tagged(run_cli, model: Path) -> None:  # type: ignore[no-untyped-def]
    data, out = saved(run_cli, model)
    quantized, passed = load_quantized(out), load_passthrough(out)
    assert set(quantized) == MATRICES  # the usual practice: matrices only
    assert set(passed) == set(TENSORS) - MATRICES  # nothing dropped: every other tensor is in the file
    for name in passed:
        original = library_read(model, name)
        copy = library_read(out, name)
        assert copy.dtype == original.dtype and copy.shape == original.shape
        assert copy.tobytes() == original.tobytes()
    with safe_open(str(out), framework="numpy") as handle:
        metadata = handle.metadata()
    assert metadata[TAG_KEY] == "1"
    bias = json.loads(metadata["model.layers.0.self_attn.q_proj.bias"])
    assert bias == {"passthrough": True, "dtype": "F16", "shape": [32],
                    "reason": "1-D: only matrices are quantized (--vectors quantizes 1-D tensors too)"}
    assert json.loads(metadata["tok_ids"])["reason"] == "not a float tensor"
    assert data["findings"]["save.tensors"] == 3 and data["findings"]["save.passthrough_tensors"] == 3
    assert data["findings"]["save.passthrough_bytes"] == 32 * 4 + 32 * 2 + 7 * 4
    rows = {row[0]: row for row in data["sections"][0]["rows"]}
    assert set(rows) == set(TENSORS)
    assert rows["tok_ids"][3] == "unchanged" and rows["lm_head.weight"][3] == "int8:row"


def test_include_exclude_min_size_and_embeddings_choose_what_is_quantized(run_cli, model: Path) -> None:  # type: ignore[no-untyped-def]
    _, out = saved(run_cli, model, "--keep-embeddings")
    assert set(load_quantized(out)) == {"model.layers.0.mlp.down_proj.weight"}
    reasons = {n: p.reason for n, p in load_passthrough(out).items()}
    assert reasons["lm_head.weight"] == reasons["model.embed_tokens.weight"] == \
        "an embedding or lm_head (--keep-embeddings)"
    _, out = saved(run_cli, model, "--include", "*.mlp.*,lm_head*")
    assert set(load_quantized(out)) == {"model.layers.0.mlp.down_proj.weight", "lm_head.weight"}
    _, out = saved(run_cli, model, "--exclude", "*down_proj*")
    assert "model.layers.0.mlp.down_proj.weight" in load_passthrough(out)
    _, out = saved(run_cli, model, "--min-size", "4096")  # 32 x 128 = 4096 passes, 64 x 32 = 2048 does not
    assert set(load_quantized(out)) == {"model.layers.0.mlp.down_proj.weight"}
    assert load_passthrough(out)["lm_head.weight"].reason == "2048 elements, under --min-size 4096"
    _, out = saved(run_cli, model, "--vectors")
    assert set(load_quantized(out)) == MATRICES | {"model.layers.0.input_layernorm.weight",
                                                   "model.layers.0.self_attn.q_proj.bias"}


def test_a_scheme_that_cannot_take_one_tensor_skips_it_with_a_note(run_cli, model: Path) -> None:  # type: ignore[no-untyped-def]
    # int8:row:outliers=1 on a 1-D tensor: one row, which the outlier option would keep whole in fp16.
    # Before, this ended the whole file with "error: outliers=1 would keep every one of the 1 rows in fp16".
    out = model.parent / "q.safetensors"
    result = run_cli("quant", "save", str(model), "-s", "int8:row:outliers=1", "-o", str(out), "--vectors")
    assert result.exit_code == 0, result.output
    warnings = [line for line in result.stderr.splitlines() if line.startswith("warning: ")]
    assert warnings and all("written through unchanged" in line for line in warnings)
    assert any("model.layers.0.input_layernorm.weight" in line for line in warnings)
    passed = load_passthrough(out)
    assert "outliers=1 would keep every one of the 1 rows" in passed["model.layers.0.input_layernorm.weight"].reason
    assert set(load_quantized(out)) == MATRICES


def test_nothing_to_quantize_is_an_error_and_writes_nothing(run_cli, model: Path) -> None:  # type: ignore[no-untyped-def]
    out = model.parent / "q.safetensors"
    result = run_cli("quant", "save", str(model), "-s", "int8:row", "-o", str(out), "--include", "nothing*")
    assert result.exit_code == 2 and result.stderr.startswith("error: ")
    assert "no tensor was quantized with int8:row" in result.stderr and not out.exists()


def test_compare_reports_a_bad_tensor_and_compares_the_rest(run_cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    bad = RNG.standard_normal((8, 32)).astype(np.float32)
    bad[0, 0] = np.inf
    path = tmp_path / "m.safetensors"
    write_safetensors(path, {"good": ("F32", RNG.standard_normal((8, 32)).astype(np.float32)), "bad": ("F32", bad),
                             "skip.me": ("F32", RNG.standard_normal((8, 32)).astype(np.float32))})
    result = run_cli("quant", "compare", str(path), "-s", "int8:row", "--exclude", "skip.*", "--json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    rows = {row[0]: row for row in data["sections"][0]["rows"]}
    assert set(rows) == {"good", "bad"} and rows["good"][3] is not None
    assert rows["bad"][3] is None and "holds 1 NaN/inf value(s)" in rows["bad"][-1]
    assert "Not compared: skip.me (excluded by --exclude skip.*)" in data["sections"][0]["note"]
