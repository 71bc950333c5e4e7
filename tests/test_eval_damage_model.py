"""Where the damage lands, on real forwards: `eval --json` on a tiny random Llama carries the frequency, position,
concentration and divergence findings, whose buckets add back up (to 1e-9) to the overall KL and NLL increase
computed here with math.fsum from the per-example file; sliding-window scoring equals hand-made forwards of each
token's window; and (slow) the long-context task on SmolLM2 cut to two blocks."""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.model_helpers import require_peers

require_peers()

import torch  # noqa: E402

from tests.export_helpers import tiny_model_dir  # noqa: E402


@functools.cache
def tiny_dir(root: str) -> Path:
    return tiny_model_dir(Path(root) / "tiny")


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tiny_dir(str(tmp_path_factory.mktemp("damage")))


def weighted(findings: dict[str, Any], prefix: str, field: str) -> float:
    """sum over the buckets under prefix of token_share * field."""
    names = {k[len(prefix):].split(".")[0] for k in findings if k.startswith(prefix)}
    assert names
    return math.fsum(findings[f"{prefix}{n}.token_share"] * findings[f"{prefix}{n}.{field}"] for n in names)


def test_eval_json_has_the_breakdowns_and_they_add_up(run_cli, tiny: Path, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    out = tmp_path / "out"
    prompts = tmp_path / "gen.jsonl"  # short prompts: the tiny model's context is 128 tokens
    prompts.write_text("".join(json.dumps({"prompt": f"Item {k}: the value is"}) + "\n" for k in range(6)))
    result = run_cli("eval", "--model", str(tiny), "--schemes", "int4:g32,none+kv=int4:g32", "--tasks",
                     f"ppl,longppl,choice,{prompts}", "--size", "0.25", "--no-cache", "--resamples", "200", "--json",
                     "--out", str(out))
    assert result.exit_code == 0, result.output
    findings = json.loads(result.stdout)["findings"]
    sections = [s["key"] for s in json.loads(result.stdout)["sections"]]
    tables = {s["key"]: s for s in json.loads(result.stdout)["sections"]}
    for task in ("choice", "gen"):  # their worst examples, five per candidate
        assert [r[0] for r in tables[f"{task}_worst"]["rows"]] == ["int4:g32"] * 5 + ["none+kv=int4:g32"] * 5
        assert isinstance(findings[f"eval.{task}.int4:g32.divergence"], bool)
    assert "verdicts" in sections
    for task in ("ppl", "longppl"):
        parts = {f"{task}_by_frequency", f"{task}_by_position", f"{task}_concentration", f"{task}_worst"}
        assert parts <= set(sections)
        records = [json.loads(line) for line in (out / f"eval_{task}_examples.jsonl").read_text().splitlines()]
        for scheme in ("int4:g32", "none+kv=int4:g32"):
            key = f"eval.{task}.{scheme}"
            for kind in ("by_frequency", "by_position"):
                buckets = {k.split(".")[4] for k in findings if k.startswith(f"{key}.{kind}.")}
                assert buckets and all(f"{key}.{kind}.{b}.{f}" in findings for b in buckets
                                       for f in ("tokens", "kl", "nll_increase", "damage_share"))
            assert all(b.startswith("f") or b == "unseen" for b in
                       {k.split(".")[4] for k in findings if k.startswith(f"{key}.by_frequency.")})
            for name in ("top1_tokens", "top5_tokens", "top5_documents", "top1_documents", "gini"):
                assert 0.0 <= findings[f"{key}.concentration.{name}"] <= 1.0
            assert isinstance(findings[f"{key}.divergence"], bool)
            # the overall numbers, from the per-document sums of the per-example file (not the bucket code)
            tokens = math.fsum(r["candidates"][scheme]["tokens"] for r in records)
            kl = math.fsum(r["candidates"][scheme]["kl_sum"] for r in records) / tokens
            increase = (math.fsum(r["candidates"][scheme]["nll"] for r in records)
                        - math.fsum(r["reference"]["nll"] for r in records)) / tokens
            assert kl > 0 and findings[f"{key}.kl"] == pytest.approx(kl, rel=1e-9)
            assert findings[f"{key}.nll_increase"] == pytest.approx(increase, rel=1e-9)
            for kind in ("by_frequency", "by_position"):
                prefix = f"{key}.{kind}."
                assert weighted(findings, prefix, "kl") == pytest.approx(kl, rel=1e-9)
                assert weighted(findings, prefix, "nll_increase") == pytest.approx(increase, rel=1e-9)
                shares = {k: v for k, v in findings.items() if k.startswith(prefix) and k.endswith(".damage_share")}
                assert math.fsum(shares.values()) == pytest.approx(1.0, rel=1e-9)
            worst = [w for r in records for w in r["candidates"][scheme]["worst_tokens"]]
            assert worst and all({"document", "position", "target", "kl", "reference_top", "candidate_top"} <= set(w)
                                 for w in worst)
    context = findings["eval.longppl.model_context"]
    assert context == 128 and findings["eval.longppl.window"] == 128 and findings["eval.longppl.stride"] == 64


def test_sliding_window_scores_equal_hand_made_forwards(tiny: Path) -> None:
    from precisionlab.eval import scoring
    from precisionlab.models import load_model

    loaded = load_model(str(tiny))
    lm = scoring.CausalLM(loaded.model, loaded.tokenizer, loaded.max_length)
    rng = np.random.default_rng(0)
    sequences = [[lm.prefix_id, *rng.integers(1, 120, 150).tolist()], [lm.prefix_id, *rng.integers(1, 120, 40)]]
    window, stride = 48, 16
    scores = scoring.score_ppl(lm, sequences, top_k=8, window=window, stride=stride)
    nll = scores.reference["token_nll"]
    position = scores.token["position"]
    t = 0
    for seq in sequences:
        for p in range(1, len(seq)):  # target p, predicted by the window that starts at b (derived by hand)
            b = 0 if p <= window - 1 else stride * ((p - window) // stride + 1)
            with torch.inference_mode():
                logits = loaded.model(input_ids=torch.tensor([seq[b:p]]), use_cache=False).logits[0, -1]
            expected = -float(torch.log_softmax(logits.double(), dim=-1)[seq[p]])
            assert nll[t] == pytest.approx(expected, abs=2e-4), (p, b)
            assert position[t] == p - b and (b == 0 or p - b >= window - stride)
            t += 1
    assert t == nll.size
    whole = scoring.score_ppl(lm, sequences, top_k=8)
    same = scoring.score_ppl(lm, sequences, top_k=8, window=512)
    np.testing.assert_array_equal(whole.nll, same.nll)  # a window longer than every sequence changes nothing
    np.testing.assert_array_equal(whole.reference["top_logp"], same.reference["top_logp"])
    self_kl = scoring.score_ppl(lm, sequences, reference=scores.reference, window=window, stride=stride)
    np.testing.assert_allclose(self_kl.token["kl"], 0.0, atol=1e-6)


def test_frequencies_are_counted_on_the_calibration_part_only(tiny: Path) -> None:
    from precisionlab.eval import data, ppl_task, scoring
    from precisionlab.models import load_model

    loaded = load_model(str(tiny))
    seen: list[str] = []

    class Watching(scoring.CausalLM):
        def encode(self, text: str) -> list[int]:
            seen.append(text)
            return super().encode(text)

    lm = Watching(loaded.model, loaded.tokenizer, loaded.max_length)
    counts = ppl_task.calibration_counts(lm)
    split = data.builtin_split()
    assert seen == [doc.text for doc in split.calibration]  # every calibration topic, nothing else
    assert not {doc.text for doc in split.evaluation} & set(seen)
    assert int(counts.sum()) == sum(len(loaded.tokenizer(t, add_special_tokens=False)["input_ids"]) for t in seen)
    assert ppl_task.calibration_counts(lm) is counts  # once per tokenizer


@pytest.mark.slow
def test_long_context_on_smollm2_two_blocks() -> None:
    """The long-context task at its documented window (4096 tokens, stride 2048, SmolLM2's context 8192) on two
    documents, SmolLM2 cut to its first two blocks, for a weight scheme and a KV-cache scheme."""
    import transformers

    from precisionlab.eval import runner
    from precisionlab.eval.candidates import parse_candidates
    from precisionlab.eval.tasks import builtin_task
    from precisionlab.labs.eval import result_from_run
    from tests.model_helpers import smollm2

    full = smollm2()
    config = type(full.model.config).from_dict(full.model.config.to_dict())
    config.num_hidden_layers = 2
    model = transformers.AutoModelForCausalLM.from_config(config)
    state = {k: v.clone() for k, v in full.model.state_dict().items()
             if not k.startswith("model.layers.") or int(k.split(".")[2]) < 2}
    model.load_state_dict(state, strict=False)
    model.tie_weights()
    model.eval().requires_grad_(False)
    loaded = dataclasses.replace(full, model=model, fingerprint=f"{full.fingerprint}:first2", name="smollm2[:2]")
    spec = builtin_task("longppl", size=0.5)
    began = time.perf_counter()
    run = runner.evaluate(loaded, parse_candidates(["int4:g128", "none+kv=int4:g32"]), [spec], 1.0, cache=False,
                          n_resamples=500)
    findings = result_from_run(run, {}).findings
    print(f"longppl on SmolLM2[:2], 2 documents: {time.perf_counter() - began:.0f} s")
    assert findings["eval.longppl.model_context"] == 8192
    assert (findings["eval.longppl.window"], findings["eval.longppl.stride"]) == (4096, 2048)
    for scheme in ("int4:g128", "none+kv=int4:g32"):
        key = f"eval.longppl.{scheme}"
        names = ["p0_127", "p128_511", "p512_2047", "p2048_8191"]
        for name in names:
            assert findings[f"{key}.by_position.{name}.tokens"] > 0
            print(scheme, name, findings[f"{key}.by_position.{name}.tokens"], findings[f"{key}.by_position.{name}.kl"],
                  findings[f"{key}.by_position.{name}.ppl"], findings[f"{key}.by_position.{name}.reference_ppl"])
        total = math.fsum(findings[f"{key}.by_position.{n}.tokens"] for n in names)
        assert total == sum(run.tasks[0].reference_examples["tokens"])
        assert math.fsum(findings[f"{key}.by_position.{n}.token_share"] * findings[f"{key}.by_position.{n}.kl"]
                         for n in names) == pytest.approx(findings[f"{key}.kl"], rel=1e-9)
