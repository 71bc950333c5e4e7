"""The bar on the real model (slow: minutes): SmolLM2-135M exported in float (F32) and at gguf_q4_0, evaluated
in llama.cpp itself with `eval --runtime llamacpp`: a verdict, with the reference's perplexity and arrays
llama.cpp's own (its per-token log-probabilities, scored again here in llama-cpp-python directly)."""

from __future__ import annotations

import importlib.util
import itertools
import json
import math
from pathlib import Path

import numpy as np
import pytest

from tests.model_helpers import require_packaged, require_peers

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(importlib.util.find_spec("llama_cpp") is None, reason="needs llama-cpp-python")]
require_peers("gguf")


def test_smollm2_q4_0_gets_a_verdict_from_llama_cpp(run_cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    require_packaged("smollm2-135m")
    import llama_cpp

    f32, q4 = tmp_path / "f32.gguf", tmp_path / "q4_0.gguf"
    for scheme, out, extra in (("none", f32, ("--float-dtype", "f32")), ("gguf_q4_0", q4, ())):
        result = run_cli("export", "--model", "smollm2-135m", "--scheme", scheme, "--to", "gguf", "--out", str(out),
                         "--no-verify", *extra)
        assert result.exit_code == 0, result.stderr
    result = run_cli("eval", "--runtime", "llamacpp", "--reference", str(f32), "--candidates", str(q4), "--tasks",
                     "ppl", "--size", "0.1", "--threads", "1", "--json", "--out", str(tmp_path / "out"))
    assert result.exit_code == 0, result.stderr
    findings = json.loads(result.stdout)["findings"]
    assert findings["eval.ppl.q4_0.verdict"] in ("pass", "fail", "inconclusive")
    assert findings["eval.ppl.q4_0.ci_low"] <= findings["eval.ppl.q4_0.difference"] <= findings["eval.ppl.q4_0.ci_high"]
    arrays = np.load(tmp_path / "out" / "eval_runtime_ppl_logprobs.npz")
    # the reference arrays are llama.cpp's: the first document scored again through llama-cpp-python's API
    tokens, offsets = arrays["tokens"], arrays["offsets"]
    first = [int(arrays["first"][0]), *(int(t) for t in tokens[offsets[0] : offsets[1]])]
    llm = llama_cpp.Llama(model_path=str(f32), n_ctx=2048, logits_all=True, n_threads=1, verbose=False)
    try:
        llm.eval(first)
        logits = np.array(llm.scores[: len(first) - 1], dtype=np.float64)
    finally:
        llm.close()
    top = logits.max(axis=1, keepdims=True)
    logp = logits - top - np.log(np.exp(logits - top).sum(axis=1, keepdims=True))  # float64 log-softmax
    direct = logp[np.arange(len(first) - 1), first[1:]]
    assert np.abs(arrays["f32"][offsets[0] : offsets[1]] - direct).max() < 1e-4
    # the reference's perplexity is that of those arrays, from each document's second token on
    scored = np.concatenate([arrays["f32"][a + 1 : b] for a, b in itertools.pairwise(offsets)])
    assert findings["eval.ppl.reference.ppl"] == pytest.approx(math.exp(-float(scored.mean())), rel=1e-9)
