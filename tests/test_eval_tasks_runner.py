"""The evaluation runner on small slices: the reference is computed once and cached (a second run skips its
forward pass), candidates are paired with it, per-example records are written, candidates apply and undo."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from tests.model_helpers import minilm, smollm2_slice

torch = pytest.importorskip("torch")

from precisionlab.eval import data, runner  # noqa: E402
from precisionlab.eval.candidates import parse_candidate, parse_candidates  # noqa: E402
from precisionlab.eval.reference import reference_key  # noqa: E402
from precisionlab.eval.tasks import TaskSpec, resolve_tasks  # noqa: E402

SHORT = runner.Limits(ppl_max_tokens=64, generate_new_tokens=8, probe_tokens=64)
"""Short sequences: the tests check the machinery, not the model."""


def small_tasks() -> list[TaskSpec]:
    split = data.builtin_split()
    return [TaskSpec("ppl", "ppl", tuple(data.ppl_documents(split, 3)), "builtin"),
            TaskSpec("choice", "choice", tuple(data.choice_examples(split, 2)), "builtin")]


class Counting:
    def __init__(self) -> None:
        self.starts: list[str] = []
        self.advanced = 0

    def start(self, description: str, total: int) -> None:
        self.starts.append(description)

    def advance(self, n: int) -> None:
        self.advanced += n

    def done(self, description: str) -> None:
        return None


def test_reference_is_cached_and_the_second_run_skips_its_pass(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    loaded = smollm2_slice()
    tasks = small_tasks()
    calls: list[str] = []
    real = runner.reference_pass

    def spy(loaded_model, spec, advance, limits):  # type: ignore[no-untyped-def]
        calls.append(spec.name)
        return real(loaded_model, spec, advance, limits)

    monkeypatch.setattr(runner, "reference_pass", spy)
    candidates = parse_candidates(["int8:row"])
    first = runner.evaluate(loaded, candidates, tasks, 1.0, cache_dir=tmp_path, n_resamples=500, limits=SHORT)
    assert calls == ["ppl", "choice"] and not any(t.reference_cached for t in first.tasks)
    progress = Counting()
    second = runner.evaluate(loaded, candidates, tasks, 1.0, cache_dir=tmp_path, n_resamples=500, progress=progress,
                             limits=SHORT)
    assert calls == ["ppl", "choice"]  # no new reference pass
    assert all(t.reference_cached for t in second.tasks)
    assert not any(s.startswith("reference") for s in progress.starts)
    assert progress.advanced == 3 + 2  # the candidate's examples only
    for a, b in zip(first.tasks, second.tasks, strict=True):
        assert a.reference == b.reference
        ca, cb = a.outcomes[0].comparisons[a.primary], b.outcomes[0].comparisons[b.primary]
        assert (ca.interval.low, ca.interval.high, ca.verdict) == (cb.interval.low, cb.interval.high, cb.verdict)
    assert len(list((tmp_path / "eval").glob("reference-*.npz"))) == 2


def test_reference_key_depends_on_model_data_and_settings() -> None:
    base = reference_key("model-a", "ppl", "data-1", {"top_k": 1024})
    assert base == reference_key("model-a", "ppl", "data-1", {"top_k": 1024})
    assert len({base, reference_key("model-b", "ppl", "data-1", {"top_k": 1024}),
                reference_key("model-a", "ppl", "data-2", {"top_k": 1024}),
                reference_key("model-a", "ppl", "data-1", {"top_k": 256})}) == 4


def test_a_damaged_cache_entry_is_recomputed(tmp_path: Path) -> None:
    loaded = smollm2_slice()
    tasks = small_tasks()[:1]
    runner.evaluate(loaded, parse_candidates(["int8:row"]), tasks, 1.0, cache_dir=tmp_path, n_resamples=500,
                    limits=SHORT)
    (entry,) = (tmp_path / "eval").glob("reference-*.npz")
    entry.write_bytes(b"not an npz")
    again = runner.evaluate(loaded, parse_candidates(["int8:row"]), tasks, 1.0, cache_dir=tmp_path,
                            n_resamples=500, limits=SHORT)
    assert not again.tasks[0].reference_cached


def test_candidates_apply_and_undo_and_records_pair_up(tmp_path: Path) -> None:
    loaded = smollm2_slice()
    before = {n: p.detach().clone() for n, p in loaded.model.named_parameters()}
    tasks = small_tasks()
    candidates = parse_candidates(["int8:row", "int8:row+act=int8:row", "none+kv=int8:row", "int4"])
    run = runner.evaluate(loaded, candidates, tasks, 1.0, cache=False, n_resamples=500, limits=SHORT)
    for name, p in loaded.model.named_parameters():
        assert torch.equal(p, before[name]), name
    assert all(not m._forward_pre_hooks and not m._forward_hooks for m in loaded.model.modules())
    ppl = run.task("ppl")
    int8, w8a8, kv, int4 = (ppl.outcome(c.label) for c in candidates)
    assert int8.metrics["kl"] < int4.metrics["kl"] and w8a8.metrics["kl"] > 0 and kv.metrics["kl"] > 0
    assert int4.comparisons["ppl"].interval.low > int8.comparisons["ppl"].interval.high
    none_run = next(c for c in run.candidates if c.label == "none+kv=int8:row")
    assert none_run.model_bytes == loaded.nbytes and math.isnan(none_run.bits_per_weight)
    w8a8_run = next(c for c in run.candidates if c.label == "int8:row+act=int8:row")
    assert w8a8_run.act_layers == 4 * 7
    assert run.candidates[0].layer_output_err < run.candidates[3].layer_output_err
    paths = runner.write_examples(run, tmp_path)
    names = sorted(p.name for p in paths)
    assert names == ["eval_choice_examples.jsonl", "eval_layers.jsonl", "eval_ppl_examples.jsonl"]
    records = [json.loads(line) for line in (tmp_path / "eval_ppl_examples.jsonl").read_text().splitlines()]
    assert [r["id"] for r in records] == [d.id for d in tasks[0].items]
    for i, record in enumerate(records):
        assert record["reference"]["nll"] == pytest.approx(ppl.reference_examples["nll"][i])
        assert set(record["candidates"]) == {c.label for c in candidates}
        assert record["candidates"]["int4"]["nll"] == pytest.approx(int4.per_example["nll"][i])
    choice = [json.loads(line) for line in (tmp_path / "eval_choice_examples.jsonl").read_text().splitlines()]
    assert all(len(r["reference"]["loglik"]) == 4 for r in choice)


def test_a_candidate_holds_the_model_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """While a candidate is scored, its quantized weights sit in the model's own storage and the originals wait on
    disk (they were kept in memory beside them: a second copy of the selected weights, 3.07x the fp32 model at
    the peak); the layer-output error still sees the originals, and the model comes back bit for bit."""
    monkeypatch.setenv("PRECISIONLAB_CACHE", str(tmp_path))  # the spill goes under the cache root, on disk
    loaded = smollm2_slice()
    params = dict(loaded.model.named_parameters())
    before = {n: p.detach().clone() for n, p in params.items()}
    pointers = {n: p.data_ptr() for n, p in params.items()}
    seen: list[tuple[str, int, bool, int]] = []

    class Inspect(Counting):
        def start(self, description: str, total: int) -> None:
            if description.startswith("int4"):
                moved = sum(p.data_ptr() != pointers[n] for n, p in params.items())
                name = "model.layers.0.mlp.down_proj.weight"
                spilled = len(list(tmp_path.glob("spill/precisionlab-originals-*/*.safetensors")))
                seen.append((description, moved, not torch.equal(params[name], before[name]), spilled))

    run = runner.evaluate(loaded, parse_candidates(["int4"]), small_tasks()[:1], 1.0, cache=False,
                          n_resamples=500, limits=SHORT, progress=Inspect())
    assert seen == [("int4: ppl", 0, True, 4 * 7)]  # in place, quantized, every block linear's original on disk
    assert run.candidates[0].layer_output_err > 0.05  # measured against the originals read back from disk
    for name, p in params.items():
        assert p.data_ptr() == pointers[name] and torch.equal(p, before[name]), name
    assert not list(tmp_path.glob("spill/*"))  # the spill directory is removed


def test_the_spill_falls_back_to_the_temporary_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    blocked = tmp_path / "cache"
    blocked.write_text("a file where the cache root's directory would go")
    monkeypatch.setenv("PRECISIONLAB_CACHE", str(blocked))
    assert runner.spill_parent() is None
    monkeypatch.setenv("PRECISIONLAB_CACHE", str(tmp_path / "fine"))
    assert runner.spill_parent() == str(tmp_path / "fine" / "spill")


@pytest.mark.slow  # 7-13 s; a sibling test covers the same path in the default suite
def test_the_source_grid_caveat_measured_through_eval() -> None:
    """SmolLM2's block linears are GGUF Q4_1. The quant library's gguf_q4_1 (llama.cpp's rule) and its grammar
    spelling uint4:g32:min=fp16 reproduce every one of them, so eval reports them grid-aligned with zero weight
    error and an identical model on every task; gguf_q4_0 (no minimum) does not hold that grid."""
    from precisionlab.labs.eval import result_from_run

    loaded = smollm2_slice()
    tasks = small_tasks()
    labels = ["gguf_q4_1", "uint4:g32:min=fp16", "gguf_q4_0", "int4:g128"]
    run = runner.evaluate(loaded, parse_candidates(labels), tasks, 1.0, cache=False, n_resamples=500, limits=SHORT)
    result = result_from_run(run, {})
    for label in labels[:2]:
        cand = next(c for c in run.candidates if c.label == label)
        assert cand.alignment == "aligned" and cand.quantized_layers == 4 * 7 and cand.bits_per_weight == 5.0
        assert cand.rel_err == 0.0 and math.isinf(cand.sqnr_db) and cand.layer_output_err == 0.0
        assert all(layer["unchanged"] for layer in cand.layers)
        for task in run.tasks:
            outcome = task.outcome(label)
            assert outcome.comparisons[task.primary].interval.estimate == 0.0
            assert outcome.per_example[task.primary if task.kind != "ppl" else "nll"] == \
                task.reference_examples[task.primary if task.kind != "ppl" else "nll"]
            assert result.findings[f"eval.{task.name}.{label}.grid_aligned"] is True
            assert result.findings[f"eval.{task.name}.{label}.rel_err"] == 0.0
        ppl = run.task("ppl").outcome(label)
        assert ppl.metrics["kl"] == 0.0 and ppl.metrics["top1_agreement"] == 100.0
    q4_0 = next(c for c in run.candidates if c.label == "gguf_q4_0")
    assert q4_0.alignment == "no" and q4_0.rel_err > 0.01
    assert result.findings["eval.ppl.gguf_q4_0.grid_aligned"] is False
    errors = result.section("errors").records()
    assert [r["source grid"] for r in errors] == ["aligned", "aligned", "no", "no"]
    for task in run.tasks:  # every comparison says it: the task tables carry the column too
        records = result.section(task.name).records()
        assert [r["source grid"] for r in records] == [None, "aligned", "aligned", "no", "no"]
    int4 = next(c for c in run.candidates if c.label == "int4:g128")
    assert int4.alignment == "no" and not any(layer["unchanged"] for layer in int4.layers)
    assert result.findings["eval.choice.int4:g128.grid_aligned"] is False
    assert "gguf_q4_1 (= uint4:g32:min=fp16) reproduces it" in result.section("errors").note


def test_user_generation_file_with_answers(tmp_path: Path) -> None:
    loaded = smollm2_slice()
    from precisionlab.eval import scoring

    prompts = ["The for statement", "An exception is"]
    lm = scoring.CausalLM(loaded.model, loaded.tokenizer, loaded.max_length)
    outputs = scoring.generate(lm, prompts, SHORT.generate_new_tokens)
    first_answer = loaded.tokenizer.decode(outputs[0], skip_special_tokens=True)
    path = tmp_path / "qa.jsonl"
    path.write_text(json.dumps({"prompt": prompts[0], "answer": f"  {first_answer.strip()} "}) + "\n"
                    + json.dumps({"prompt": prompts[1], "answer": "certainly not this"}) + "\n")
    (spec,) = resolve_tasks([str(path)], "causal-lm")
    assert (spec.name, spec.kind) == ("qa", "generate")
    run = runner.evaluate(loaded, parse_candidates(["int8:row"]), [spec], 1.0, cache=False, n_resamples=500,
                          limits=SHORT)
    task = run.task("qa")
    assert task.reference["exact_match"] == 50.0  # the first answer is the reference's own output
    assert task.reference_examples["exact_match"] == [1.0, 0.0]


def test_retrieval_on_minilm() -> None:
    loaded = minilm()
    spec = TaskSpec("retrieval", "retrieval", tuple(data.retrieval_pairs(data.builtin_split(), 12)), "builtin")
    run = runner.evaluate(loaded, parse_candidates(["int8:row", "int2:g32"]), [spec], 1.0, cache=False,
                          n_resamples=500, limits=SHORT)
    task = run.task("retrieval")
    int8, int2 = task.outcomes
    assert task.reference["acc@1"] > 50
    assert int8.metrics["cosine"] > 0.99 > int2.metrics["cosine"]
    assert int8.comparisons["acc@1"].interval.contains(0.0)
    assert np.all(np.asarray(int8.per_example["cosine"]) <= 1 + 1e-9)


def test_bad_runs() -> None:
    loaded = minilm()
    spec = TaskSpec("retrieval", "retrieval", tuple(data.retrieval_pairs(data.builtin_split(), 2)), "builtin")
    with pytest.raises(ValueError, match="KV-cache quantization applies to causal LMs"):
        runner.evaluate(loaded, [parse_candidate("none+kv=int8:row")], [spec], 1.0, cache=False)
    with pytest.raises(ValueError, match="--max-drop must be a finite number"):
        runner.evaluate(loaded, [parse_candidate("int8:row")], [spec], -1.0, cache=False)
    with pytest.raises(ValueError, match="task 'ppl' needs a causal LM"):
        resolve_tasks(["ppl"], "encoder")
    with pytest.raises(ValueError, match="not a built-in task"):
        resolve_tasks(["nope"], "causal-lm")


def test_candidate_specs() -> None:
    assert parse_candidate("int8:ROW+act=int8:row").label == "int8:row+act=int8:row"
    assert parse_candidate("none+kv=e4m3:row").weights is None
    assert [c.label for c in parse_candidates(["int8:row,int8:channel", "mxfp4"])] == ["int8:row", "mxfp4"]
    for bad, message in (("int8:row+act", "expected act=SCHEME"), ("none", "quantizes nothing"),
                         ("int8:row+kv=int8+kv=int4", "twice"), ("int9", "unknown element")):
        with pytest.raises(ValueError, match=message):
            parse_candidate(bad)
