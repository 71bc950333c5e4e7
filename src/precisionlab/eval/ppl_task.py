"""Perplexity tasks in the runner: the scoring settings (plain, or sliding windows for `longppl`), the
reference pass, and a candidate's scores with where its damage lands (eval.damage).

A task with `spec.window` (longppl) is scored in windows of min(spec.window, the model's context) tokens with a
stride of half the window (scoring.ppl_windows), its documents cut to spec.max_tokens; any other perplexity task
scores each document in one forward, cut to Limits.ppl_max_tokens and the model's context.
"""

from __future__ import annotations

import contextlib
import math
import weakref
from collections.abc import Callable
from typing import Any

import numpy as np

from precisionlab.eval import damage, scoring, stats

_COUNTS: weakref.WeakKeyDictionary[Any, np.ndarray] = weakref.WeakKeyDictionary()


def window_of(spec: Any, max_length: int) -> tuple[int | None, int | None]:
    """(window, stride) of a task on a model with a context of max_length tokens ((None, None): unwindowed)."""
    if spec.window is None:
        return None, None
    window = min(int(spec.window), int(max_length))
    return window, window // 2


def max_tokens_of(spec: Any, limits: Any) -> int:
    return int(spec.max_tokens) if spec.max_tokens is not None else int(limits.ppl_max_tokens)


def settings(spec: Any, limits: Any, max_length: int) -> dict[str, Any]:
    """The scoring settings (part of the reference-cache key; the batching too: a different batch changes the
    logits in their last bits)."""
    out: dict[str, Any] = {"max_tokens": max_tokens_of(spec, limits), "top_k": scoring.KL_TOP_K,
                           "batch": scoring.PPL_TOKEN_BUDGET}
    window, stride = window_of(spec, max_length)
    if window is not None:
        out.update(window=window, stride=stride, row_chunk=scoring.ROW_CHUNK)
    return out


def sequences(lm: scoring.CausalLM, spec: Any, limits: Any) -> list[list[int]]:
    return scoring.ppl_sequences(lm, [d.text for d in spec.items], max_tokens_of(spec, limits),
                                 windowed=spec.window is not None)


def score(lm: scoring.CausalLM, spec: Any, limits: Any, advance: scoring.Advance,
          reference: dict[str, np.ndarray] | None = None) -> scoring.PplScores:
    window, stride = window_of(spec, lm.max_length)
    return scoring.score_ppl(lm, sequences(lm, spec, limits), reference=reference, advance=advance, window=window,
                             stride=stride)


def reference_arrays(lm: scoring.CausalLM, spec: Any, limits: Any, advance: scoring.Advance) -> dict[str, np.ndarray]:
    scores = score(lm, spec, limits, advance)
    return {"nll": scores.nll, "tokens": scores.tokens, **scores.reference}


def calibration_counts(lm: scoring.CausalLM) -> np.ndarray:
    """Token counts of the built-in calibration part under the model's tokenizer (once per tokenizer)."""
    with contextlib.suppress(KeyError, TypeError):
        return _COUNTS[lm.tokenizer]
    from precisionlab.eval import data

    texts = [doc.text for doc in data.builtin_split().calibration]
    counts = damage.token_counts(lm.encode, texts, scoring.vocab_size(lm))
    with contextlib.suppress(TypeError):  # a tokenizer that cannot be weakly referenced is counted every time
        _COUNTS[lm.tokenizer] = counts
    return counts


def candidate(lm: scoring.CausalLM, spec: Any, arrays: dict[str, np.ndarray], max_drop: float,
              options: dict[str, Any], advance: scoring.Advance, limits: Any,
              ) -> tuple[dict[str, float], dict[str, Any], dict[str, Any], dict[str, list[Any]], damage.Damage]:
    """(metrics, comparisons, extras, per_example, damage) of one candidate on a perplexity task."""
    scores = score(lm, spec, limits, advance, reference=arrays)
    assert scores.kl is not None and scores.agree is not None
    ppl = math.exp(float(scores.nll.sum()) / float(scores.tokens.sum()))
    comparison = stats.compare_perplexity(arrays["nll"], scores.nll, arrays["tokens"], max_drop,
                                          cand_tokens=scores.tokens, **options)
    kl = stats.bootstrap_ratio(scores.kl, scores.tokens, **options)
    agree = stats.bootstrap_ratio(scores.agree, scores.tokens, percent=True, **options)
    found = damage.analyse(scores.tokens, spec.ids, scores.token, arrays, calibration_counts(lm), _decoder(lm),
                           **options)
    per_example = {"nll": scores.nll.tolist(), "tokens": scores.tokens.astype(int).tolist(),
                   "kl_sum": scores.kl.tolist(), "top1_agree": scores.agree.astype(int).tolist(),
                   "worst_tokens": found.worst_per_document}
    metrics = {"ppl": ppl, "kl": kl.estimate, "top1_agreement": agree.estimate, "nll_increase": found.nll_increase}
    return metrics, {"ppl": comparison}, {"kl": kl, "top1_agreement": agree}, per_example, found


def _decoder(lm: scoring.CausalLM) -> Callable[[int], str]:
    def decode(token: int) -> str:
        return str(lm.tokenizer.decode([token]))

    return decode
