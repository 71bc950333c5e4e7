"""Bad input to the model commands: one line `error: ...` and exit 2, before any long work.

A damaged GGUF (its first 100 bytes) crashed eval, ptq and ladder with exit 1 and "this is a bug in precisionlab"
(a struct.error from inside transformers' conversion); a damaged safetensors file in a model directory did the
same (SafetensorError). The loader now reads a GGUF file's header with the gguf package before converting it, and
turns what a damaged file raises into one ValueError line. `eval --schemes ""` silently ran the default four
schemes: an empty list is bad input.
"""

from __future__ import annotations

import re
import types
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.model_helpers import require_peers


def one_line_error(result: Any, text: str) -> None:
    assert result.exit_code == 2, result.output
    assert "converting" not in result.stderr  # the file is refused before the conversion
    heartbeat = re.compile(r"^(loading .*|[a-z]+: working): [0-9.]+ s( \(.*\))?$")  # cli.progress: under load
    lines = [line for line in result.stderr.splitlines() if line.strip() and not heartbeat.match(line)]
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: ") and text in lines[0], result.stderr
    assert "internal error" not in result.output and "Traceback" not in result.output


def write_gguf(path: Path) -> Path:
    """A small but valid GGUF file (gguf's own writer): some metadata and two tensors, a few kilobytes."""
    gguf = pytest.importorskip("gguf", reason="GGUF test files are written with the gguf package")
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_block_count(1)
    writer.add_context_length(64)
    rng = np.random.default_rng(0)
    writer.add_tensor("token_embd.weight", rng.standard_normal((32, 16)).astype(np.float32))
    writer.add_tensor("blk.0.attn_norm.weight", np.ones(16, dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


@pytest.fixture
def damaged(tmp_path: Path) -> dict[str, Path]:
    whole = write_gguf(tmp_path / "whole.gguf").read_bytes()
    assert len(whole) > 2000
    files = {"first 100 bytes": whole[:100], "half": whole[: len(whole) // 2], "all but 100 bytes": whole[:-100],
             "empty": b""}
    out = {}
    for name, content in files.items():
        path = tmp_path / f"{name.replace(' ', '_')}.gguf"
        path.write_bytes(content)
        out[name] = path
    return out


COMMANDS = {
    "eval": ["eval", "--schemes", "int8:row", "--tasks", "ppl"],
    "ptq": ["ptq", "--method", "rtn", "--scheme", "int4:g128"],
    "ladder": ["ladder", "--target", "int4"],
    "qat": ["qat", "--scheme", "int4:g64", "--steps", "1", "--no-eval"],
}


@pytest.mark.parametrize("command", list(COMMANDS))
def test_a_damaged_gguf_is_one_line_and_exit_2(run_cli, damaged: dict[str, Path], command: str) -> None:  # type: ignore[no-untyped-def]
    require_peers("gguf")
    for name, path in damaged.items():
        result = run_cli(*COMMANDS[command], "--model", str(path))
        one_line_error(result, f"{path}: not a readable GGUF file: ")
        assert name  # (each damage in turn)


def test_the_loader_refuses_a_damaged_gguf_with_a_value_error(damaged: dict[str, Path]) -> None:
    require_peers("gguf")
    from precisionlab.models import load_model

    with pytest.raises(ValueError, match="not a readable GGUF file: truncated: 100 bytes"):
        load_model(str(damaged["first 100 bytes"]), cache=False)


def test_a_damaged_safetensors_file_in_a_model_directory(run_cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    require_peers()
    import transformers

    config = transformers.BertConfig(vocab_size=32, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                                     intermediate_size=32, max_position_embeddings=32)
    model = transformers.BertModel(config)
    model.save_pretrained(tmp_path / "bert")
    weights = tmp_path / "bert" / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:100])
    result = run_cli("eval", "--model", str(tmp_path / "bert"), "--schemes", "int8:row")
    one_line_error(result, f"cannot load {tmp_path / 'bert'}:")


def test_a_damaged_cache_entry_is_converted_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A converted GGUF model in the cache that no longer loads (a truncated model.safetensors) is not an error: the
    file is converted again. transformers is replaced by a stand-in that fails on the cache entry like a damaged
    safetensors file does and returns a small model for the GGUF file itself."""
    require_peers("gguf")
    from safetensors import SafetensorError

    from precisionlab.models import loading

    gguf_file = write_gguf(tmp_path / "m.gguf")
    monkeypatch.setenv("PRECISIONLAB_CACHE", str(tmp_path / "cache"))
    calls: list[str] = []

    class Model:
        config = types.SimpleNamespace(max_position_embeddings=64)

        def eval(self) -> Model:
            return self

        def requires_grad_(self, _flag: bool) -> Model:
            return self

    def load(location: Any, gguf_file: str | None = None, **_kwargs: Any) -> Model:
        calls.append("gguf" if gguf_file else "cache")
        if gguf_file is None:
            raise SafetensorError("Error while deserializing header: invalid header length")
        return Model()

    stand_in = types.SimpleNamespace(
        __version__="0", AutoModelForCausalLM=types.SimpleNamespace(from_pretrained=load),
        AutoTokenizer=types.SimpleNamespace(from_pretrained=lambda *a, **k: object()))
    monkeypatch.setattr(loading.peers, "transformers", lambda: stand_in)
    saved: list[Path] = []
    monkeypatch.setattr(loading, "_save_converted", lambda model, tokenizer, target, meta: saved.append(target))
    digest = loading.file_sha256(gguf_file)
    entry = loading.cache_root() / "models" / f"{digest[:24]}-tf0-v{loading.CACHE_FORMAT}"
    entry.mkdir(parents=True)
    (entry / "config.json").write_text("{}")
    (entry / "precisionlab.json").write_text(f'{{"format": {loading.CACHE_FORMAT}, "tensor_types": {{}}}}')
    source = loading.ModelSource(str(gguf_file), "gguf", str(gguf_file), "m")
    loaded = loading._load_gguf(source, "float32", True, None)
    assert calls == ["cache", "gguf"] and saved == [entry]  # tried the entry, converted the file, cached it again
    assert not loaded.from_cache and loaded.source_types == {"F32": 2}


@pytest.mark.parametrize(("args", "option"), [
    (["--schemes", ""], "--schemes"), (["--schemes", ","], "--schemes"), (["--tasks", ""], "--tasks"),
    (["--tasks", " , "], "--tasks"),
])
def test_eval_refuses_an_empty_list(run_cli, args: list[str], option: str) -> None:  # type: ignore[no-untyped-def]
    """Checked before the model is named or loaded: the unknown model would be the error otherwise."""
    result = run_cli("eval", "--model", "no-such-model", *args)
    one_line_error(result, f"{option}: an empty list")


@pytest.mark.parametrize("option", ["--include", "--exclude"])
def test_eval_refuses_an_empty_pattern(run_cli, option: str) -> None:  # type: ignore[no-untyped-def]
    one_line_error(run_cli("eval", "--model", "no-such-model", option, ""), f"{option}: an empty value")


@pytest.mark.parametrize("args", [["ptq", "--method", "rtn", "--scheme", "int4:g128", "--eval-tasks", ""],
                                  ["ladder", "--tasks", ","]])
def test_ptq_and_ladder_refuse_an_empty_task_list(run_cli, args: list[str]) -> None:  # type: ignore[no-untyped-def]
    one_line_error(run_cli(*args, "--model", "no-such-model"), f"{args[-2]}: an empty list")


def test_a_list_with_items_keeps_them_and_drops_blanks() -> None:
    from precisionlab.cli.common import split_commas

    assert split_commas(("int8:row,,int4", " nvfp4 ")) == ["int8:row", "int4", "nvfp4"]
    assert split_commas(()) == []  # not given: the command's default
    with pytest.raises(ValueError, match="an empty list"):
        split_commas(("",))
