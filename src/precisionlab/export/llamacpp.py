"""Score an exported GGUF file in llama.cpp itself (llama-cpp-python) and compare with precisionlab's emulations.

    runs = compare(loaded, recipe, gguf_path, sequences)    per-token log-probabilities of each path
    rows = comparison_rows(runs)                              perplexity and differences against llama.cpp

The same token ids (the eval perplexity set's sequences: the prefix token, then the text's tokens) go to both:
llama.cpp scores them with `logits_all` (its KV cache in F32 by default here, flash attention off, so that
the cache's F16 rounding is not what is measured: `kv="f16"` is llama.cpp's default), precisionlab scores
them with the evaluated weights installed in the transformers model, once with the weights alone and once with
llama.cpp's activation quantization added (`+act=llamacpp`, models.llamacpp).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from precisionlab import peers

KV_TYPES = {"f32": 0, "f16": 1}


@dataclass
class Run:
    label: str
    logprobs: list[np.ndarray]
    """Per sequence: log p(token t | tokens < t) for t = 1 .. n - 1 (float64)."""

    @property
    def ppl(self) -> float:
        flat = np.concatenate(self.logprobs)
        return math.exp(-float(flat.mean()))



def _log_softmax(logits: np.ndarray) -> np.ndarray:
    x = logits.astype(np.float64)
    top = x.max(axis=-1, keepdims=True)
    return x - top - np.log(np.exp(x - top).sum(axis=-1, keepdims=True))


def _picked(logp: np.ndarray, sequence: list[int]) -> np.ndarray:
    targets = np.asarray(sequence[1:], dtype=np.int64)
    return logp[np.arange(len(targets)), targets]


def llamacpp_logprobs(path: str | Path, sequences: list[list[int]], threads: int = 1, kv: str = "f32",
                      n_batch: int | None = None, flash_attn: bool = False, label: str | None = None) -> Run:
    """llama.cpp's per-token log-probabilities of each sequence (its logits, logits_all), one sequence at a time:
    each sequence in one batch, or `n_batch` tokens at a time (1: token by token, as generation runs)."""
    llama_cpp = peers.llama_cpp()
    n_ctx = max(len(s) for s in sequences) + 8
    batch = n_batch or n_ctx
    llm = llama_cpp.Llama(model_path=str(path), n_ctx=n_ctx, n_batch=batch, n_ubatch=batch, logits_all=True,
                          n_threads=threads, n_threads_batch=threads, type_k=KV_TYPES[kv], type_v=KV_TYPES[kv],
                          flash_attn=flash_attn, verbose=False)
    out = []
    try:
        for sequence in sequences:
            llm.reset()
            llm.eval(sequence)
            logits = np.array(llm.scores[: len(sequence) - 1], dtype=np.float32)
            out.append(_picked(_log_softmax(logits), sequence))
    finally:
        llm.close()
    return Run(label or f"llama.cpp (KV {kv.upper()})", out)


LLAMACPP_VARIANTS: tuple[tuple[str, dict[str, Any]], ...] = (("llama.cpp, token by token (n_batch 1)", {"n_batch": 1}),
                     ("llama.cpp, KV cache F16", {"kv": "f16"}),
                     ("llama.cpp, flash attention on", {"flash_attn": True}))
"""llama.cpp run with a float-rounding-level change of its own (which kernels, which cache precision): its
distance from the baseline run is how far llama.cpp moves from itself, the floor no emulation can beat."""


def llamacpp_variants(path: str | Path, sequences: list[list[int]], threads: int = 1) -> list[Run]:
    """llama.cpp's log-probabilities under each of LLAMACPP_VARIANTS."""
    return [llamacpp_logprobs(path, sequences, threads, label=label, **kw) for label, kw in LLAMACPP_VARIANTS]


def model_logprobs(model: Any, sequences: list[list[int]], label: str) -> Run:
    """The transformers model's per-token log-probabilities, one sequence at a time, float32."""
    import torch

    out = []
    with torch.inference_mode():
        for sequence in sequences:
            ids = torch.tensor([sequence], dtype=torch.long)
            logits = model(input_ids=ids, use_cache=False).logits[0, :-1].float().numpy()
            out.append(_picked(_log_softmax(logits), sequence))
    return Run(label, out)


def compare(loaded: Any, recipe: Any, gguf_path: str | Path, sequences: list[list[int]], threads: int = 1,
            kv: str = "f32") -> list[Run]:
    """[float model, weights emulated, weights + act=llamacpp, llama.cpp] on the same sequences."""
    from precisionlab.export.plan import prepare
    from precisionlab.models.llamacpp import block_mins, linear_types, llamacpp_activations

    runs = [model_logprobs(loaded.model, sequences, "float model (precisionlab)")]
    prepared = prepare(loaded, recipe)
    try:
        runs.append(model_logprobs(loaded.model, sequences, f"{recipe.description} (weights emulated)"))
        scheme = recipe.scheme
        types = linear_types(loaded, prepared.report, scheme)
        with llamacpp_activations(loaded.model, types, block_mins(prepared.report, loaded.model, scheme, types)):
            runs.append(model_logprobs(loaded.model, sequences, f"{recipe.description}+act=llamacpp"))
    finally:
        prepared.restore()
    runs.append(llamacpp_logprobs(gguf_path, sequences, threads, kv))
    return runs


def comparison_rows(runs: list[Run], against: Run | None = None) -> list[list[Any]]:
    """Per run: perplexity, its relative difference from llama.cpp's, and the per-token log-probability
    differences (max |d|, mean |d|, RMS) against llama.cpp's (the last run unless `against`)."""
    base = against or runs[-1]
    theirs = np.concatenate(base.logprobs)
    rows = []
    for run in runs:
        mine = np.concatenate(run.logprobs)
        d = mine - theirs
        rows.append([run.label, run.ppl, (run.ppl - base.ppl) / base.ppl, float(np.abs(d).max()),
                     float(np.abs(d).mean()), float(np.sqrt(np.mean(d * d))), int(d.size)])
    return rows
