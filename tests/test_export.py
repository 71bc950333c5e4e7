"""precisionlab export: round trips on small random models of every supported architecture, checked against
independent readers (gguf's GGUFReader and dequantizer, gguf-py's own quantizer, compressed-tensors'
decompression through transformers) and the bad-input rules."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from tests.export_helpers import tiny_model_dir
from tests.model_helpers import require_peers

require_peers("gguf", "compressed_tensors", "tokenizers")


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("export-models")
    return {kind: tiny_model_dir(root / kind, kind) for kind in ("llama", "qwen2", "gpt2")} | {
        "llama-untied": tiny_model_dir(root / "llama-untied", "llama", tie=False, seed=1)}


def _load(path: Path):  # type: ignore[no-untyped-def]
    from precisionlab.models import load_model

    return load_model(str(path))


def _originals(path: Path) -> dict[str, np.ndarray]:
    from safetensors.numpy import load_file

    return load_file(str(path / "model.safetensors"))


def _bits(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a, dtype=np.float32).view(np.uint32)


def _permute(w: np.ndarray, heads: int) -> np.ndarray:
    """llama.cpp's converter's LlamaModel.permute, written out again (the file stores q / k rows this way)."""
    return w.reshape(heads, 2, w.shape[0] // heads // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


# --------------------------------------------------------------------------- GGUF
@pytest.mark.parametrize("arch", ["llama", "qwen2", "llama-untied"])
@pytest.mark.parametrize("scheme,kind", [("gguf_q4_0", "Q4_0"), ("gguf_q8_0", "Q8_0"), ("gguf_q4_1", "Q4_1"),
                                         ("gguf_q5_0", "Q5_0"), ("int4:g32", "Q4_0")])
def test_gguf_round_trip(models, run_cli, tmp_path, arch, scheme, kind) -> None:  # type: ignore[no-untyped-def]
    import gguf

    from precisionlab.quant import quantize

    out = tmp_path / "m.gguf"
    result = run_cli("export", "--model", str(models[arch]), "--scheme", scheme, "--to", "gguf", "--out", str(out),
                     "--tokenizer-pre", "gpt-2", "--json")
    assert result.exit_code == 0, result.output
    findings = json.loads(result.output[result.output.index("{"):])["findings"]
    assert findings["export.verified"] is True
    originals = _originals(models[arch])
    reader = gguf.GGUFReader(str(out))
    tensors = {t.name: t for t in reader.tensors}
    config = json.loads((models[arch] / "config.json").read_text())
    heads, kv_heads = config["num_attention_heads"], config["num_key_value_heads"]
    quantized_bytes = 0
    for name, w in originals.items():
        if not name.startswith("model.layers.") or not name.endswith("proj.weight"):
            continue
        block, part = name.split(".")[2], name.split(".")[-2]
        target = {"q_proj": "attn_q", "k_proj": "attn_k", "v_proj": "attn_v", "o_proj": "attn_output",
                  "gate_proj": "ffn_gate", "up_proj": "ffn_up", "down_proj": "ffn_down"}[part]
        t = tensors[f"blk.{block}.{target}.weight"]
        assert t.tensor_type.name == kind
        expected = quantize(w, scheme).dequantize()
        if arch.startswith("llama") and part in ("q_proj", "k_proj"):
            expected = _permute(expected, heads if part == "q_proj" else kv_heads)
        got = gguf.quants.dequantize(np.asarray(t.data), t.tensor_type).reshape(w.shape)
        assert np.array_equal(_bits(got), _bits(expected)), name
        if scheme.startswith("gguf_") and kind in ("Q4_0", "Q8_0", "Q4_1", "Q5_0"):
            source = _permute(w, heads if part == "q_proj" else kv_heads) if (
                arch.startswith("llama") and part in ("q_proj", "k_proj")) else w
            reference = gguf.quants.quantize(source, getattr(gguf.GGMLQuantizationType, kind))
            assert np.array_equal(np.asarray(t.data).reshape(-1), reference.reshape(-1)), name  # gguf-py's quantizer
        quantized_bytes += int(t.n_bytes)
    assert quantized_bytes == findings["export.bytes.quantized"] == findings["export.bytes.quantized_predicted"]
    assert ("output.weight" in tensors) == (arch == "llama-untied")
    assert tensors["token_embd.weight"].tensor_type.name == "F32"  # excluded by default, kept at its width
    assert tensors["blk.0.attn_norm.weight"].tensor_type.name == "F32"


def test_gguf_logits_through_transformers(models, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """The exported file, loaded by transformers, computes the logits of the evaluated (fake-quantized) model."""
    import torch
    import transformers

    from precisionlab.export import Recipe, export_model
    from precisionlab.models.weights import quantized_weights

    loaded = _load(models["llama"])
    out = tmp_path / "m.gguf"
    export_model(loaded, Recipe("scheme", "gguf_q4_0", scheme="gguf_q4_0"), "gguf", out, tokenizer_pre="gpt-2")
    ids = torch.tensor([loaded.tokenizer("The quick brown fox, 1 2 3 words.")["input_ids"]])
    with quantized_weights(loaded.model, "gguf_q4_0"), torch.no_grad():
        expected = loaded.model(input_ids=ids).logits
    back = transformers.AutoModelForCausalLM.from_pretrained(str(tmp_path), gguf_file=out.name, dtype=torch.float32)
    with torch.no_grad():
        got = back(input_ids=ids).logits
    assert torch.equal(got, expected)
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(tmp_path), gguf_file=out.name)
    text = "Numbers 1 2 3 and words, a lazy dog."
    assert tokenizer(text)["input_ids"] == loaded.tokenizer(text)["input_ids"]


def test_gguf_keeps_a_bf16_model_in_bf16(models, tmp_path) -> None:  # type: ignore[no-untyped-def]
    import gguf
    import torch

    from precisionlab.export import Recipe, export_model

    loaded = _load(models["llama"])
    with torch.no_grad():  # weights that bf16 holds exactly: auto writes BF16, and the values survive
        for p in loaded.model.parameters():
            p.copy_(p.to(torch.bfloat16).float())
    result = export_model(loaded, Recipe("scheme", "gguf_q8_0", scheme="gguf_q8_0"), "gguf", tmp_path / "b.gguf",
                          tokenizer_pre="gpt-2")
    assert result.verification.ok
    types = {t.name: t.tensor_type.name for t in gguf.GGUFReader(str(tmp_path / "b.gguf")).tensors}
    assert types["token_embd.weight"] == "BF16"
    with pytest.raises(ValueError, match="would change values"):
        export_model(_load(models["llama"]), Recipe("scheme", "gguf_q8_0", scheme="gguf_q8_0"), "gguf",
                     tmp_path / "c.gguf", float_dtype="f16", tokenizer_pre="gpt-2")
    assert not (tmp_path / "c.gguf").exists()


# --------------------------------------------------------------------------- compressed-tensors
@pytest.mark.parametrize("arch", ["llama", "qwen2"])
@pytest.mark.parametrize("scheme", ["int4:g32", "int8:row", "uint4:g32", "int4:g64:asym", "e4m3:row", "e4m3",
                                    "e4m3:block32x32"])
def test_compressed_tensors_round_trip(models, run_cli, tmp_path, arch, scheme) -> None:  # type: ignore[no-untyped-def]
    import torch
    import transformers

    from precisionlab.quant import quantize

    out = tmp_path / "ct"
    result = run_cli("export", "--model", str(models[arch]), "--scheme", scheme, "--to", "compressed-tensors",
                     "--out", str(out), "--json")
    assert result.exit_code == 0, result.output
    config = json.loads((out / "config.json").read_text())
    qc = config["quantization_config"]
    assert qc["quant_method"] == "compressed-tensors" and qc["quantization_status"] == "compressed"
    assert qc["ignore"] == ["lm_head"]
    model = transformers.AutoModelForCausalLM.from_pretrained(
        str(out), dtype=torch.float32, quantization_config=transformers.CompressedTensorsConfig(dequantize=True))
    state = {k: v.float().numpy() for k, v in model.state_dict().items()}
    for name, w in _originals(models[arch]).items():
        if name.endswith("proj.weight"):
            assert np.array_equal(_bits(state[name]), _bits(quantize(w, scheme).dequantize())), name
        elif name in state:
            assert np.array_equal(_bits(state[name]), _bits(w)), name


def test_compressed_tensors_with_transformers_compressed_forward(models, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """transformers' default load (compressed modules, decompressed in forward) computes the evaluated logits."""
    import torch
    import transformers

    from precisionlab.export import Recipe, export_model
    from precisionlab.models.weights import quantized_weights

    loaded = _load(models["llama"])
    export_model(loaded, Recipe("scheme", "int4:g32", scheme="int4:g32"), "compressed-tensors", tmp_path / "ct")
    ids = torch.tensor([loaded.tokenizer("The quick brown fox, 1 2 3 words.")["input_ids"]])
    with quantized_weights(loaded.model, "int4:g32"), torch.no_grad():
        expected = loaded.model(input_ids=ids).logits
    back = transformers.AutoModelForCausalLM.from_pretrained(str(tmp_path / "ct"), dtype=torch.float32)
    with torch.no_grad():
        got = back(input_ids=ids).logits
    assert torch.equal(got, expected)


def test_eval_loads_a_compressed_tensors_directory(models, tmp_path) -> None:  # type: ignore[no-untyped-def]
    from precisionlab.export import Recipe, export_model
    from precisionlab.models.weights import quantized_weights

    loaded = _load(models["qwen2"])
    export_model(loaded, Recipe("scheme", "e4m3:row", scheme="e4m3:row"), "compressed-tensors", tmp_path / "ct")
    back = _load(tmp_path / "ct")
    with quantized_weights(loaded.model, "e4m3:row"):
        for (name, a), (_, b) in zip(loaded.model.state_dict().items(), back.model.state_dict().items(), strict=True):
            assert np.array_equal(_bits(a.numpy()), _bits(b.numpy())), name


# --------------------------------------------------------------------------- --from
def test_from_ptq_ships_the_saved_gptq_codes(models, run_cli, tmp_path) -> None:  # type: ignore[no-untyped-def]
    import gguf

    from precisionlab.quant import quantize
    from precisionlab.quant.safetensors_io import load_quantized

    weights = tmp_path / "w.safetensors"
    ran = run_cli("ptq", "--model", str(models["llama"]), "--method", "gptq", "--scheme", "gguf_q4_0",
                  "--calib-size", "256", "--no-eval", "--save", str(weights), "--out", str(tmp_path / "ptq"))
    assert ran.exit_code == 0, ran.output
    saved = json.loads((tmp_path / "ptq" / "ptq.json").read_text())
    assert saved["params"]["save"] == str(weights.resolve())
    out = tmp_path / "g.gguf"
    result = run_cli("export", "--model", str(models["llama"]), "--from", str(tmp_path / "ptq" / "ptq.json"),
                     "--to", "gguf", "--out", str(out), "--tokenizer-pre", "gpt-2")
    assert result.exit_code == 0, result.output
    stored = load_quantized(weights)
    tensors = {t.name: t for t in gguf.GGUFReader(str(out)).tensors}
    name = "model.layers.1.mlp.down_proj"
    got = gguf.quants.dequantize(np.asarray(tensors["blk.1.ffn_down.weight"].data), gguf.GGMLQuantizationType.Q4_0)
    assert np.array_equal(_bits(got.reshape(stored[name].shape)), _bits(stored[name].dequantize()))
    rtn = quantize(_originals(models["llama"])[f"{name}.weight"], "gguf_q4_0").dequantize()
    assert not np.array_equal(_bits(got.reshape(rtn.shape)), _bits(rtn))  # GPTQ's codes, not re-quantized


def test_from_awq_weights_file_folds_the_scales(models, run_cli, tmp_path) -> None:  # type: ignore[no-untyped-def]
    import torch
    import transformers

    from precisionlab.quant.safetensors_io import load_passthrough, load_quantized

    weights = tmp_path / "w.safetensors"
    ran = run_cli("ptq", "--model", str(models["llama"]), "--method", "awq", "--scheme", "int4:g32",
                  "--calib-size", "256", "--no-eval", "--save", str(weights))
    assert ran.exit_code == 0, ran.output
    out = tmp_path / "ct"
    result = run_cli("export", "--model", str(models["llama"]), "--from", str(weights), "--to",
                     "compressed-tensors", "--out", str(out))
    assert result.exit_code == 0, result.output
    back = transformers.AutoModelForCausalLM.from_pretrained(
        str(out), dtype=torch.float32, quantization_config=transformers.CompressedTensorsConfig(dequantize=True))
    state = back.state_dict()
    for name, q in load_quantized(weights).items():
        assert np.array_equal(_bits(state[f"{name}.weight"].numpy()), _bits(q.dequantize())), name
    originals = _originals(models["llama"])
    folds = load_passthrough(weights)
    assert folds
    quantized = load_quantized(weights)
    for name, p in folds.items():  # the norm divided by the saved scales, as ptq.structure.fold_scales does
        prev = name[: -len(".awq_scales")]
        if prev in quantized:  # a previous linear that is quantized itself: its codes hold the fold (checked above)
            continue
        source = originals[f"{prev}.weight"].astype(np.float64)  # a norm's weight, or a linear's output rows
        expected = (source / (p.array if source.ndim == 1 else p.array[:, None])).astype(np.float32)
        assert np.array_equal(_bits(state[f"{prev}.weight"].numpy()), _bits(expected)), prev


def test_from_recipe_gives_each_layer_its_scheme(models, run_cli, tmp_path) -> None:  # type: ignore[no-untyped-def]
    import gguf

    from precisionlab.export import write_recipe

    recipe = write_recipe(tmp_path / "recipe.json", {"model.layers.0.mlp.down_proj": "gguf_q8_0",
                                                     "model.layers.1.self_attn.q_proj": "gguf_q4_0"},
                          budget_bytes=1000, note="from a search")
    out = tmp_path / "r.gguf"
    result = run_cli("export", "--model", str(models["llama"]), "--from", str(recipe), "--to", "gguf", "--out",
                     str(out), "--tokenizer-pre", "gpt-2")
    assert result.exit_code == 0, result.output
    types = {t.name: t.tensor_type.name for t in gguf.GGUFReader(str(out)).tensors}
    assert types["blk.0.ffn_down.weight"] == "Q8_0" and types["blk.1.attn_q.weight"] == "Q4_0"
    assert types["blk.0.attn_q.weight"] == "F32"


def test_from_ladder_step(models, run_cli, tmp_path) -> None:  # type: ignore[no-untyped-def]
    import torch
    import transformers

    from precisionlab.quant import quantize

    ladder = {"lab": "ladder", "findings": {
        "ladder.steps_tried": 2, "ladder.stopped_at": "g32",
        "ladder.steps.0.name": "outliers-fp16", "ladder.steps.0.scheme": "int4:g32", "ladder.steps.0.method":
            "outliers", "ladder.steps.0.include": "", "ladder.steps.0.exclude": "",
        "ladder.steps.1.name": "g32", "ladder.steps.1.scheme": "int4:g32", "ladder.steps.1.method": "rtn",
        "ladder.steps.1.include": "model.layers.1.*", "ladder.steps.1.exclude": "lm_head,*embed*",
        "ladder.steps.1.verdict": "pass"}}
    path = tmp_path / "ladder.json"
    path.write_text(json.dumps(ladder))
    refused = run_cli("export", "--model", str(models["llama"]), "--from", str(path), "--step", "0", "--to",
                      "compressed-tensors", "--out", str(tmp_path / "x"))
    assert refused.exit_code == 2 and "fp16 input columns" in refused.output
    assert not (tmp_path / "x").exists()
    missing = run_cli("export", "--model", str(models["llama"]), "--from", str(path), "--to", "gguf", "--out",
                      str(tmp_path / "x.gguf"))
    assert missing.exit_code == 2 and "--step" in missing.output
    out = tmp_path / "ct"
    result = run_cli("export", "--model", str(models["llama"]), "--from", str(path), "--step", "1", "--to",
                     "compressed-tensors", "--out", str(out))
    assert result.exit_code == 0, result.output
    back = transformers.AutoModelForCausalLM.from_pretrained(
        str(out), dtype=torch.float32, quantization_config=transformers.CompressedTensorsConfig(dequantize=True))
    state = back.state_dict()
    originals = _originals(models["llama"])
    for name, w in originals.items():
        if name.endswith("proj.weight"):
            expected = quantize(w, "int4:g32").dequantize() if name.startswith("model.layers.1.") else w
            assert np.array_equal(_bits(state[name].numpy()), _bits(expected)), name


def test_ladder_records_its_steps_and_export_ships_the_gptq_step(run_cli, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """A real ladder run (--max-drop 0: the climb goes on at least to the GPTQ step) records each step's layers
    and saves the calibrated steps' codes; export --step ships a step's values."""
    import torch
    import transformers

    from precisionlab.quant.safetensors_io import load_quantized

    model = tiny_model_dir(tmp_path / "m", "llama", layers=3)
    out_dir = tmp_path / "ladder"
    ran = run_cli("ladder", "--model", str(model), "--target", "int4", "--max-drop", "0", "--examples", "2",
                  "--calib-size", "128", "--resamples", "100", "--out", str(out_dir), "--json")
    assert ran.exit_code == 0, ran.output
    findings = json.loads((out_dir / "ladder.json").read_text())["findings"]
    gptq = next(i for i in range(findings["ladder.steps_tried"]) if findings[f"ladder.steps.{i}.method"] == "gptq")
    assert findings[f"ladder.steps.{gptq}.exclude"] == "lm_head,*embed*,model.layers.0.*,model.layers.2.*"
    weights = out_dir / findings[f"ladder.steps.{gptq}.weights"]
    stored = load_quantized(weights)
    assert sorted({n.split(".")[2] for n in stored}) == ["1"]
    assert findings["ladder.steps.0.include"] == "" and findings["ladder.steps.0.exclude"] == ""
    # int4:g128 on rows of 64 pads (precisionlab) where GGUF cannot: the step is refused for GGUF, not rounded
    refused = run_cli("export", "--model", str(model), "--from", str(out_dir / "ladder.json"), "--step", str(gptq),
                      "--to", "gguf", "--out", str(tmp_path / "x.gguf"))
    assert refused.exit_code == 2 and "no GGML type" in refused.output
    # the per-channel step quantizes the embedding too, which compressed-tensors does not hold: refused
    per_channel = next(i for i in range(findings["ladder.steps_tried"])
                       if findings[f"ladder.steps.{i}.name"] == "per-channel")
    embedding = run_cli("export", "--model", str(model), "--from", str(out_dir / "ladder.json"), "--step",
                        str(per_channel), "--to", "compressed-tensors", "--out", str(tmp_path / "pc"))
    assert embedding.exit_code == 2 and "Embedding" in embedding.output
    out = tmp_path / "gptq"
    shipped = run_cli("export", "--model", str(model), "--from", str(out_dir / "ladder.json"), "--step", str(gptq),
                      "--to", "compressed-tensors", "--out", str(out))
    assert shipped.exit_code == 0, shipped.output
    back = transformers.AutoModelForCausalLM.from_pretrained(
        str(out), dtype=torch.float32, quantization_config=transformers.CompressedTensorsConfig(dequantize=True))
    state = back.state_dict()
    for name, w in _originals(model).items():
        if name.endswith("proj.weight"):
            expected = stored[name.removesuffix(".weight")].dequantize() if name.startswith("model.layers.1.") else w
            assert np.array_equal(_bits(state[name].numpy()), _bits(expected)), name


# --------------------------------------------------------------------------- bad input
@pytest.mark.parametrize("args,message", [
    (["--scheme", "int4:g128", "--to", "gguf"], "nearest that exists is Q4_0 (gguf_q4_0)"),
    (["--scheme", "int4:g32:asym", "--to", "gguf"], "nearest that exists is Q4_1"),
    (["--scheme", "int8:row", "--to", "gguf"], "nearest that exists is Q8_0"),
    (["--scheme", "e5m2:row", "--to", "compressed-tensors"], "no e5m2 weight type"),
    (["--scheme", "gguf_q4_1", "--to", "compressed-tensors"], "no format for this preset"),
    (["--scheme", "uint4:g32:min=fp16", "--to", "compressed-tensors"], "not a float block min"),
    (["--scheme", "gguf_q4_k", "--to", "gguf"], "not a multiple of 256"),
    (["--scheme", "int4:g48", "--to", "compressed-tensors"], "not a multiple of 48"),
])
def test_bad_input_is_one_line_and_writes_nothing(models, run_cli, tmp_path, args, message) -> None:  # type: ignore[no-untyped-def]
    out = tmp_path / ("x.gguf" if "gguf" in args else "x")
    result = run_cli("export", "--model", str(models["llama"]), *args, "--out", str(out))
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:") and message in lines[0], result.output
    assert not out.exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".x")]


def test_existing_output_needs_force(models, run_cli, tmp_path) -> None:  # type: ignore[no-untyped-def]
    out = tmp_path / "m.gguf"
    out.write_bytes(b"keep me")
    args = ["export", "--model", str(models["llama"]), "--scheme", "gguf_q8_0", "--to", "gguf", "--out", str(out),
            "--tokenizer-pre", "gpt-2"]
    result = run_cli(*args)
    assert result.exit_code == 2 and "--force" in result.output
    assert out.read_bytes() == b"keep me"
    assert run_cli(*args, "--force").exit_code == 0
    assert out.read_bytes()[:4] == b"GGUF"


def test_architecture_without_gguf_mapping(models, run_cli, tmp_path) -> None:  # type: ignore[no-untyped-def]
    result = run_cli("export", "--model", str(models["gpt2"]), "--scheme", "gguf_q8_0", "--to", "gguf", "--out",
                     str(tmp_path / "g.gguf"))
    assert result.exit_code == 2 and "has no GGUF mapping" in result.output
    ct = run_cli("export", "--model", str(models["gpt2"]), "--scheme", "int8:row", "--to", "compressed-tensors",
                 "--out", str(tmp_path / "g"))
    assert ct.exit_code == 2 and "Conv1D" in ct.output
    assert list(tmp_path.iterdir()) == []


def test_unknown_pre_tokenizer_is_named(models, run_cli, tmp_path) -> None:  # type: ignore[no-untyped-def]
    result = run_cli("export", "--model", str(models["llama"]), "--scheme", "gguf_q8_0", "--to", "gguf", "--out",
                     str(tmp_path / "g.gguf"))
    assert result.exit_code == 2 and "--tokenizer-pre" in result.output
    assert not (tmp_path / "g.gguf").exists()


def test_a_quantized_embedding_cannot_go_to_compressed_tensors(models, run_cli, tmp_path) -> None:  # type: ignore[no-untyped-def]
    result = run_cli("export", "--model", str(models["llama"]), "--scheme", "int8:row", "--exclude", "none",
                     "--to", "compressed-tensors", "--out", str(tmp_path / "c"))
    assert result.exit_code == 2 and "Embedding" in result.output
    assert not (tmp_path / "c").exists()


def test_compressed_tensors_config_names_the_architecture(models, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """A model whose config lists no architectures (a GGUF source's conversion) is still written as a causal LM:
    without it precisionlab (and vLLM) would not know what to load."""
    from precisionlab.export import Recipe, export_model

    loaded = _load(models["llama"])
    loaded.model.config.architectures = None
    export_model(loaded, Recipe("scheme", "int8:row", scheme="int8:row"), "compressed-tensors", tmp_path / "ct")
    assert json.loads((tmp_path / "ct" / "config.json").read_text())["architectures"] == ["LlamaForCausalLM"]
    assert _load(tmp_path / "ct").kind == "causal-lm"


def test_nvfp4_is_never_written_to_other_values() -> None:
    """compressed-tensors divides e4m3 block scales by a global scale (precisionlab multiplies them by g), and its
    nvfp4 decompression computes in bfloat16 (unpack_fp4_from_uint8's default dtype), so fp32(v * s_b * g) comes
    back rounded to bf16. A tensor is refused when no float32 G reproduces every block's scale, or when CT's own
    decompression of what would be written differs from the evaluated values; nothing else is written."""
    import torch

    from precisionlab.interop.writers import compressed as ct
    from precisionlab.quant import quantize

    rng = np.random.default_rng(0)
    reasons = {"global scale": 0, "decompression": 0}
    for _ in range(20):
        q = quantize((rng.standard_normal((32, 64)) * rng.uniform(0.01, 10)).astype(np.float32), "nvfp4")
        try:
            tensors, fmt, fields = ct.compress(q)
        except ValueError as exc:
            reasons["global scale" if "global scale" in str(exc) else "decompression"] += 1
            continue
        scheme = ct.scheme_object(fields, fmt, ["Linear"])  # written only if CT reads back the same values
        back = ct.compressor(fmt).decompress(dict(tensors), scheme)["weight"].to(torch.float32).numpy()
        assert np.array_equal(_bits(back), _bits(q.dequantize()))
    assert reasons["global scale"] and reasons["decompression"], reasons
