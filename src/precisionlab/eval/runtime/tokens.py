"""The tokenizer of a runtime evaluation: one tokenizer turns every task's texts into the token ids that the
reference and every candidate score, so all of them see the same tokens.

    lm = tokenizer_lm("ref.gguf")          a .gguf file (or a packaged name that is one): llama.cpp's own
                                           tokenizer of that file (llama-cpp-python, vocab_only), what its
                                           server tokenizes a prompt with; a Hugging Face directory: its
                                           tokenizer through transformers. The model's context (context_length)
                                           cuts the documents.
    lm.encode(text), lm.prefix_id          as eval.scoring.CausalLM (no model: only the tokenizer is loaded)
    decode(lm)(ids), prefix_text(lm)       the text a server is sent for token ids

Why llama.cpp's and not transformers' reading of the GGUF: they differ. On SmolLM2, transformers' tokenizer
built from the GGUF metadata splits "\\n\\n" into two "\\n" tokens where llama.cpp has one
token; a server that tokenizes the decoded text again then scores other tokens (the
server scorer refuses that in one line). llama.cpp's tokenizer decodes and re-tokenizes to the same ids.
"""

from __future__ import annotations

import contextlib
import io
from collections.abc import Callable
from pathlib import Path
from typing import Any

from precisionlab import peers
from precisionlab.eval import scoring
from precisionlab.eval.runtime.scorers import DEFAULT_CTX


class LlamaCppTokenizer:
    """llama.cpp's tokenizer of a GGUF file with the part of the Hugging Face interface that scoring uses."""

    def __init__(self, path: str | Path) -> None:
        module = peers.llama_cpp("--runtime llamacpp")
        try:
            self._llm = module.Llama(model_path=str(path), vocab_only=True, verbose=False)
        except ValueError as exc:
            raise ValueError(f"llama.cpp cannot read the vocabulary of {path}: {exc}") from None
        bos, eos = int(self._llm.token_bos()), int(self._llm.token_eos())
        self.bos_token_id = bos if bos >= 0 else None
        self.eos_token_id = eos if eos >= 0 else None
        self.pad_token_id = None

    def __call__(self, text: str, add_special_tokens: bool = False) -> dict[str, list[int]]:
        """Token ids of `text` as llama-cpp-python's completions tokenize a prompt (special tokens parsed)."""
        ids = self._llm.tokenize(text.encode("utf-8"), add_bos=add_special_tokens, special=True)
        return {"input_ids": [int(t) for t in ids]}

    def decode(self, ids: list[int], **_: Any) -> str:
        return str(self._llm.detokenize([int(t) for t in ids], special=True).decode("utf-8", errors="replace"))

    def convert_ids_to_tokens(self, token: int) -> str:
        return self.decode([token])


def load_tokenizer(spec: str) -> tuple[Any, str]:
    """(tokenizer, where it came from) for a model spec (models.loading.resolve; module docstring); ValueError in one
    line."""
    from precisionlab.models.loading import damaged_file_errors, resolve

    source = resolve(spec)
    if source.form == "gguf":
        return LlamaCppTokenizer(source.location), str(source.location)
    transformers = peers.transformers()
    try:
        with contextlib.redirect_stderr(io.StringIO()):  # transformers' own progress bars stay off our output
            tokenizer = transformers.AutoTokenizer.from_pretrained(source.location)
    except damaged_file_errors() as exc:
        raise ValueError(f"cannot read a tokenizer from {source.location}: {str(exc).splitlines()[0]}") from None
    return tokenizer, str(source.location)


def tokenizer_lm(spec: str, max_length: int | None = None) -> scoring.CausalLM:
    """A CausalLM that holds only the tokenizer of `spec` (for scoring.ppl_sequences and encode_pair), with the
    model's context (`context_length`) unless `max_length` is given."""
    tokenizer, _ = load_tokenizer(spec)
    return scoring.CausalLM(None, tokenizer, max_length or context_length(spec))


def context_length(spec: str) -> int:
    """The model's trained context: a GGUF's <arch>.context_length, a directory's max_position_embeddings;
    DEFAULT_CTX when neither says (a hub id). Documents are cut to it as eval cuts them to the model's."""
    import json

    from precisionlab.models.loading import resolve

    source = resolve(spec)
    found = None
    if source.form == "gguf":
        import gguf

        fields = gguf.GGUFReader(source.location).fields
        arch = fields.get("general.architecture")
        if arch is not None:
            value = fields.get(f"{arch.contents()}.context_length")
            found = int(value.contents()) if value is not None else None
    elif source.form == "directory":
        with contextlib.suppress(OSError, ValueError):
            config = json.loads((Path(source.location) / "config.json").read_text(encoding="utf-8"))
            found = config.get("max_position_embeddings") if isinstance(config, dict) else None
    return int(found) if isinstance(found, int) and found > 1 else DEFAULT_CTX


def decode(lm: scoring.CausalLM) -> Callable[[list[int]], str]:
    """Token ids -> their text, special tokens kept and no clean-up of spaces (so the text tokenizes back)."""
    def text(ids: list[int]) -> str:
        return str(lm.tokenizer.decode(ids, skip_special_tokens=False, clean_up_tokenization_spaces=False))

    return text


def prefix_text(lm: scoring.CausalLM) -> str:
    """The prefix token's text (a special token's own spelling, e.g. <|endoftext|>)."""
    return str(lm.tokenizer.convert_ids_to_tokens(lm.prefix_id))
