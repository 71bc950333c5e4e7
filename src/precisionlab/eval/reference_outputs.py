"""The reference model's raw outputs for one task (what the reference cache stores), the reference's metrics and
per-example scores drawn from them, and the scoring settings that belong to the cache key (eval.reference).

    arrays = outputs(loaded, spec, advance, limits)     ppl: per-document NLL and the top-K arrays; choice:
                                                        per-choice log-likelihoods; generate: the tokens;
                                                        retrieval: the embeddings
    metrics, examples = summary(loaded, spec, arrays)
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from precisionlab.eval import ppl_task, scoring
from precisionlab.eval.reference import ragged, unragged


def settings(spec: Any, limits: Any, max_length: int) -> dict[str, Any]:
    """The scoring settings of a task's reference (part of its cache key)."""
    if spec.kind == "ppl":
        return ppl_task.settings(spec, limits, max_length)
    if spec.kind == "generate":
        return {"new_tokens": limits.generate_new_tokens, "batch": scoring.GENERATE_BATCH}
    if spec.kind == "retrieval":
        return {"batch": scoring.EMBED_BATCH}
    return {"acc_norm": "utf-8 bytes"}  # the cached reference holds acc_norm: its rule is part of the key


def _causal(loaded: Any) -> scoring.CausalLM:
    return scoring.CausalLM(loaded.model, loaded.tokenizer, loaded.max_length)


def outputs(loaded: Any, spec: Any, advance: scoring.Advance, limits: Any) -> dict[str, np.ndarray]:
    """The reference model's raw outputs for one task (what the cache stores)."""
    items = spec.items
    if spec.kind == "ppl":
        return ppl_task.reference_arrays(_causal(loaded), spec, limits, advance)
    if spec.kind == "choice":
        choice = scoring.score_choice(_causal(loaded), items, advance)
        flat = ragged(choice.loglik, np.float64)
        return {"loglik": flat["values"], "offsets": flat["offsets"], "acc": choice.acc, "acc_norm": choice.acc_norm,
                "pred": choice.pred, "pred_norm": choice.pred_norm}
    if spec.kind == "generate":
        outputs = scoring.generate(_causal(loaded), [e.prompt for e in items], limits.generate_new_tokens, advance)
        flat = ragged(outputs, np.int64)
        return {"tokens": flat["values"], "offsets": flat["offsets"]}
    queries = scoring.embed(loaded, [p.query for p in items], lambda n: None)
    passages = scoring.embed(loaded, [p.passage for p in items], advance)
    return {"queries": queries, "passages": passages}


def retrieval_hits(queries: np.ndarray, passages: np.ndarray) -> np.ndarray:
    """1.0 where a query's most similar passage (cosine) is its own."""
    q = queries / np.maximum(np.linalg.norm(queries, axis=1, keepdims=True), 1e-12)
    p = passages / np.maximum(np.linalg.norm(passages, axis=1, keepdims=True), 1e-12)
    similarity = q.astype(np.float64) @ p.astype(np.float64).T
    return (np.argmax(similarity, axis=1) == np.arange(len(q))).astype(np.float64)


def summary(loaded: Any, spec: Any,
            arrays: dict[str, np.ndarray]) -> tuple[dict[str, float], dict[str, list]]:
    if spec.kind == "ppl":
        ppl = math.exp(float(arrays["nll"].sum()) / float(arrays["tokens"].sum()))
        return {"ppl": ppl, "tokens": float(arrays["tokens"].sum())}, {
            "nll": arrays["nll"].tolist(), "tokens": arrays["tokens"].astype(int).tolist()}
    if spec.kind == "choice":
        return ({"acc": 100 * float(arrays["acc"].mean()), "acc_norm": 100 * float(arrays["acc_norm"].mean())},
                {"acc": arrays["acc"].tolist(), "acc_norm": arrays["acc_norm"].tolist(),
                 "loglik": unragged(arrays["loglik"], arrays["offsets"])})
    if spec.kind == "generate":
        outputs = unragged(arrays["tokens"], arrays["offsets"])
        if has_answers(spec):
            matches = answer_matches(spec, outputs, loaded.tokenizer)
            return {"exact_match": 100 * float(matches.mean())}, {"exact_match": matches.tolist(), "tokens": outputs}
        return {"exact_match": 100.0}, {"tokens": outputs}
    hits = retrieval_hits(arrays["queries"], arrays["passages"])
    return {"acc@1": 100 * float(hits.mean())}, {"acc@1": hits.tolist()}


def has_answers(spec: Any) -> bool:
    return any(getattr(e, "answer", None) is not None for e in spec.items)


def answer_matches(spec: Any, outputs: Sequence[list[int]], tokenizer: Any) -> np.ndarray:
    """1.0 where the decoded output, stripped, equals the example's answer, stripped (0.0 without an answer)."""
    hits = []
    for example, tokens in zip(spec.items, outputs, strict=True):
        text = tokenizer.decode(tokens, skip_special_tokens=True)
        hits.append(float(example.answer is not None and text.strip() == example.answer.strip()))
    return np.asarray(hits)
