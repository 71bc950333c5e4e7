"""What a runtime gives the evaluation, and llama.cpp in this process.

    scorer.logprobs(sequences, advance)    per sequence [t0, t1, ..., tn]: float64 array of n values,
                                           log p(t_i | t_0 .. t_{i-1}) for i = 1 .. n (NaN where the runtime
                                           reports none: a server's first prompt token)
    scorer.logprobs(sequences, advance, texts)   texts[i]: a text whose tokens begin with t1 .. tn (a
                                           perplexity document cut to n tokens), what a server is sent
    scorer.label, scorer.source, scorer.close()

`LlamaCppScorer(path)` loads the GGUF file once in llama-cpp-python (`logits_all`, the library's defaults
otherwise: n_batch 512, KV cache F16, as its server runs), evaluates each sequence (reusing the KV cache of the
prefix it shares with the previous one, as llama-cpp-python's server does: a choice's context is evaluated once
for its continuations; the rows of the shared prefix are the earlier evaluation's) and turns
each row of llama.cpp's float32 logits into log-probabilities with llama-cpp-python's own
`Llama.logits_to_logprobs` (a float32 log-softmax): the function its server's `echo` + `logprobs` replies use,
so the two give the same numbers. float32's rounding there is about 1e-6 at a log-probability of -20.
`kv="f32"` keeps the KV cache in F32 (flash attention off), as benchmarks/bench_llamacpp.py scores, to compare
with precisionlab's emulation without the cache's F16 rounding.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from precisionlab import peers

Advance = Callable[[int], None]
KV_TYPES = {"f32": 0, "f16": 1}
"""GGML type ids of the KV cache (`kv=`; None keeps llama.cpp's default, F16, as its server runs)."""
DEFAULT_CTX = 2048
"""llama.cpp's context for the in-process scorer (llama-cpp-python's server default; longer sequences widen it)."""


def _noop(_: int) -> None:
    return None


class Scorer(Protocol):
    """Per-token log-probabilities of token-id sequences (see the module docstring)."""

    label: str
    source: str

    def logprobs(self, sequences: Sequence[Sequence[int]], advance: Advance = _noop,
                 texts: Sequence[str] | None = None) -> list[np.ndarray]: ...

    def close(self) -> None: ...



def check_sequences(sequences: Sequence[Sequence[int]]) -> None:
    for sequence in sequences:
        if len(sequence) < 2:
            raise ValueError("a scored sequence needs a first token and at least one token after it")


def _evaluate(llm: Any, ids: list[int]) -> None:
    """Evaluate `ids` into llm.scores, reusing the KV cache of the prefix they share with what llm holds (as
    llama-cpp-python's `Llama.generate` does for its server): at least one token is evaluated again."""
    held = llm.input_ids[: llm.n_tokens]
    common = 0
    for a, b in zip(held, ids, strict=False):
        if int(a) != b:
            break
        common += 1
    reuse = common - 1 if common == len(ids) else common
    if reuse > 0:
        llm.n_tokens = reuse  # eval() drops the cache's cells from n_tokens on
        llm.eval(ids[reuse:])
    else:
        llm.reset()
        llm.eval(ids)


class LlamaCppScorer:
    """A GGUF file scored in llama.cpp itself (llama-cpp-python), loaded on first use and kept until close()."""

    def __init__(self, path: str | Path, label: str | None = None, threads: int | None = None,
                 n_ctx: int = DEFAULT_CTX, kv: str | None = None) -> None:
        self.path = Path(path)
        if not self.path.is_file():
            raise ValueError(f"no such GGUF file: {self.path}")
        if self.path.suffix.lower() != ".gguf":
            raise ValueError(f"{self.path} is not a .gguf file")
        self.label = label or self.path.name.removesuffix(".gguf").replace(".", "-")
        self.source = str(self.path)
        self.threads = threads or max(1, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity")
                                      else (os.cpu_count() or 1))
        self.n_ctx = n_ctx
        if kv not in (None, *KV_TYPES):
            raise ValueError(f"kv {kv!r}: choose {' or '.join(KV_TYPES)} (None: llama.cpp's default, F16)")
        self.kv = kv
        self._llm: Any = None

    def _model(self, longest: int) -> Any:
        if self._llm is not None and self._llm.n_ctx() >= longest:
            return self._llm
        self.close()
        module = peers.llama_cpp("--runtime llamacpp")
        self.n_ctx = max(self.n_ctx, longest)
        cache = {} if self.kv is None else {"type_k": KV_TYPES[self.kv], "type_v": KV_TYPES[self.kv],
                                            "flash_attn": False}
        try:
            self._llm = module.Llama(model_path=str(self.path), n_ctx=self.n_ctx, logits_all=True,
                                     n_threads=self.threads, n_threads_batch=self.threads, verbose=False, **cache)
        except ValueError as exc:  # llama-cpp-python's "Failed to load model from file"
            raise ValueError(f"llama.cpp cannot load {self.path}: {exc}") from None
        return self._llm

    def logprobs(self, sequences: Sequence[Sequence[int]], advance: Advance = _noop,
                 texts: Sequence[str] | None = None) -> list[np.ndarray]:
        """`texts` (what a server is sent) are not needed here: the token ids are evaluated as they are."""
        check_sequences(sequences)
        if not sequences:
            return []
        llm = self._model(max(len(s) for s in sequences))
        module = peers.llama_cpp("--runtime llamacpp")
        vocab = int(llm.n_vocab())
        out = []
        for sequence in sequences:
            ids = [int(t) for t in sequence]
            bad = [t for t in ids if not 0 <= t < vocab]
            if bad:
                raise ValueError(f"token id {bad[0]} is outside {self.path.name}'s vocabulary of {vocab}: the "
                                 "tokenizer is not this model's")
            _evaluate(llm, ids)
            logits = np.array(llm.scores[: len(ids) - 1], dtype=np.float32)
            logp = module.Llama.logits_to_logprobs(logits)
            targets = np.asarray(ids[1:], dtype=np.int64)
            out.append(np.asarray(logp[np.arange(len(targets)), targets], dtype=np.float64))
            advance(1)
        return out

    def close(self) -> None:
        if self._llm is not None:
            self._llm.close()
            self._llm = None
