"""`export --scheme none`: a float export (no layer quantized), the reference of `eval --runtime llamacpp`; read
back by the gguf package (tensor types) and by transformers (values), never by precisionlab's own reader."""

from __future__ import annotations

from pathlib import Path

from tests.model_helpers import require_peers

require_peers("gguf", "tokenizers")


def test_scheme_none_writes_every_tensor_in_float_and_exactly(run_cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    import gguf
    import torch
    import transformers

    from tests.export_helpers import tiny_model_dir

    model = tiny_model_dir(tmp_path / "m", "llama")
    out = tmp_path / "f32.gguf"
    result = run_cli("export", "--model", str(model), "--scheme", "none", "--float-dtype", "f32", "--to", "gguf",
                     "--out", str(out), "--tokenizer-pre", "gpt-2", "--json")
    assert result.exit_code == 0, result.stderr
    types = {t.tensor_type.name for t in gguf.GGUFReader(str(out)).tensors}
    assert types == {"F32"}
    original = transformers.AutoModelForCausalLM.from_pretrained(model)
    back = transformers.AutoModelForCausalLM.from_pretrained(out.parent, gguf_file=out.name)
    mine, theirs = original.state_dict(), back.state_dict()
    assert set(mine) <= set(theirs)
    for name, value in mine.items():
        assert torch.equal(value, theirs[name]), name


def test_scheme_none_refuses_layer_patterns(run_cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    from tests.export_helpers import tiny_model_dir

    model = tiny_model_dir(tmp_path / "m", "llama")
    result = run_cli("export", "--model", str(model), "--scheme", "none", "--include", "*q_proj", "--to", "gguf",
                     "--out", str(tmp_path / "x.gguf"))
    assert result.exit_code == 2
    assert "--scheme none quantizes none" in result.stderr
    assert not (tmp_path / "x.gguf").exists()

