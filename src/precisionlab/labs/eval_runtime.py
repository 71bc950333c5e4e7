"""The LabResult of a runtime evaluation (`precisionlab eval --runtime llamacpp` / `--server URL`):
one table per task (the reference and each candidate as the runtime scored them, the difference with its
interval and the verdict), one verdict summary, and the findings under eval's keys.

Findings (docs/eval.md): `eval.runtime` (llamacpp / server), `eval.<task>.reference.<metric>` and
`.reference.source`, and per candidate `eval.<task>.<label>.<metric>`, `.difference`, `.ci_low`, `.ci_high`,
`.verdict`, `.n`, `.min_detectable`, `.examples_needed`, `.source`; perplexity also `.dlogp_mean` (with
`_ci_low` / `_ci_high`) and `.dlogp_max`; choice also `.acc_norm`, `.acc_norm_difference`, `_ci_low`,
`_ci_high`, `_verdict` and `.mcnemar_p`.
"""

from __future__ import annotations

from typing import Any

from precisionlab.results import LabResult, Scalar, Table

METRIC_LABELS = {"ppl": "ppl", "acc": "acc %"}
UNIT_LABELS = {"%": "% increase", "pp": "pp"}
RUNTIMES = {"llamacpp": "llama.cpp in this process (llama-cpp-python)", "server": "a completions server"}


def runtime_result(run: Any, params: dict[str, Scalar]) -> LabResult:
    """Tables and findings of an eval.runtime.run.RuntimeRun."""
    findings: dict[str, Scalar] = {"eval.runtime": run.runtime}
    sections = [_task_table(run, task, findings) for task in run.tasks]
    verdicts = Table(key="verdicts", title="Verdicts", columns=["candidate", *[t.name for t in run.tasks]],
                     rows=[[c["label"], *[t.outcome(c["label"]).comparisons[t.primary].verdict.upper()
                                          for t in run.tasks]] for c in run.candidates],
                     note=f"Against --max-drop {run.max_drop:g}, both sides scored by {RUNTIMES[run.runtime]}.")
    sections.append(verdicts)
    title = f"Task-level evaluation in the runtime: {run.reference['label']} against its candidates"
    passed = sum(t.outcome(c["label"]).comparisons[t.primary].verdict == "pass" for t in run.tasks
                 for c in run.candidates)
    total = len(run.tasks) * len(run.candidates)
    summary = (f"{passed} of {total} candidate-task verdicts pass at --max-drop {run.max_drop:g}; reference and "
               f"candidates scored by {RUNTIMES[run.runtime]} ({run.seconds:.1f} s)")
    return LabResult(name="eval", title=title, sections=sections, figures=[], findings=findings, params=params,
                     summary=summary)


def _task_table(run: Any, task: Any, findings: dict[str, Scalar]) -> Table:
    primary, unit = task.primary, task.unit
    metric = METRIC_LABELS[primary]
    unit_label = UNIT_LABELS[unit]
    extra = (["mean |d log p|", "CI low ", "CI high ", "max |d log p|"] if task.kind == "ppl" else
             ["acc_norm %", "acc_norm diff pp", "acc_norm verdict", "McNemar p"])
    columns = ["model", metric, f"difference ({unit_label})", "CI low", "CI high", "verdict", "n", "min detectable",
               "needed", *extra, "source"]
    base = f"eval.{task.name}"
    ref_extra: list[Scalar] = [0.0, None, None, 0.0] if task.kind == "ppl" else [task.reference["acc_norm"], None,
                                                                                  None, None]
    rows: list[list[Scalar]] = [[f"reference ({run.reference['label']})", task.reference[primary], None, None, None,
                                 None, len(task.spec.items), None, None, *ref_extra, run.reference["source"]]]
    for key, value in task.reference.items():
        findings[f"{base}.reference.{key}"] = value
    findings[f"{base}.reference.source"] = run.reference["source"]
    for outcome in task.outcomes:
        comparison = outcome.comparisons[primary]
        interval = comparison.interval
        key = f"{base}.{outcome.candidate}"
        findings.update({f"{key}.{primary}": outcome.metrics[primary], f"{key}.difference": interval.estimate,
                         f"{key}.ci_low": interval.low, f"{key}.ci_high": interval.high,
                         f"{key}.verdict": comparison.verdict, f"{key}.n": interval.n,
                         f"{key}.min_detectable": comparison.min_detectable,
                         f"{key}.examples_needed": comparison.examples_needed, f"{key}.source": outcome.source})
        if task.kind == "ppl":
            gap = outcome.extras["dlogp_mean"]
            findings.update({f"{key}.dlogp_mean": gap.estimate, f"{key}.dlogp_mean_ci_low": gap.low,
                             f"{key}.dlogp_mean_ci_high": gap.high, f"{key}.dlogp_max": outcome.metrics["dlogp_max"]})
            cells: list[Scalar] = [gap.estimate, gap.low, gap.high, outcome.metrics["dlogp_max"]]
        else:
            norm = outcome.comparisons["acc_norm"]
            findings.update({f"{key}.acc_norm": outcome.metrics["acc_norm"],
                             f"{key}.acc_norm_difference": norm.interval.estimate,
                             f"{key}.acc_norm_ci_low": norm.interval.low, f"{key}.acc_norm_ci_high": norm.interval.high,
                             f"{key}.acc_norm_verdict": norm.verdict})
            mc = comparison.mcnemar
            if mc is not None:
                findings[f"{key}.mcnemar_p"] = mc.p_value
            cells = [outcome.metrics["acc_norm"], norm.interval.estimate, norm.verdict.upper(),
                     mc.p_value if mc is not None else None]
        rows.append([outcome.candidate, outcome.metrics[primary], interval.estimate, interval.low, interval.high,
                     comparison.verdict.upper(), interval.n, comparison.min_detectable, comparison.examples_needed,
                     *cells, outcome.source])
    return Table(key=task.name, title=f"{task.name}: {metric} in the runtime", columns=columns, rows=rows,
                 note=_note(run, task),
                 formats={metric: ".6g", f"difference ({unit_label})": ".3g", "CI low": ".3g", "CI high": ".3g",
                          "min detectable": ".3g", "mean |d log p|": ".3g", "CI low ": ".3g", "CI high ": ".3g",
                          "max |d log p|": ".3g", "acc_norm %": ".4g", "acc_norm diff pp": ".3g", "McNemar p": ".3g"})


def _note(run: Any, task: Any) -> str:
    higher = "above" if task.higher_is_better else "below"
    threshold = -run.max_drop if task.higher_is_better else run.max_drop
    note = (f"{len(task.spec.items)} examples; the reference and every candidate scored by "
            f"{RUNTIMES[run.runtime]} on the same token ids; difference = candidate - reference, 95 % CI by paired "
            f"bootstrap ({run.settings['n_resamples']} resamples, seed {run.settings['seed']}) over the data's "
            f"units as eval resamples them. Verdict against --max-drop {run.max_drop:g}: PASS when the whole interval "
            f"is {higher} {threshold:g}, FAIL when it is all on the other side, INCONCLUSIVE otherwise.")
    if task.kind == "ppl":
        note += (" Every document's tokens are scored from its second on (a server gives the first none); "
                 "|d log p| is per token against the reference's log-probability, in nats.")
    else:
        note += " acc_norm divides each continuation's log-likelihood by its length in UTF-8 bytes, as eval does."
    for outcome in task.outcomes:
        if outcome.comparisons[task.primary].note:
            note += f" {outcome.candidate}: {outcome.comparisons[task.primary].note}."
    return note


def source_line(run: Any) -> list[str]:
    """Where each model was scored (for the CLI's closing lines)."""
    out = [f"reference {run.reference['label']}: {run.reference['source']}"]
    out += [f"candidate {c['label']}: {c['source']}" for c in run.candidates]
    return out
