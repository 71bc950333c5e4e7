"""Results of `precisionlab ptq` and `precisionlab ladder` as LabResults (tables, figures, findings).

Not registered as labs: both run a real model for minutes, and `precisionlab run` stays fast.
The commands build these from `ptq.run_method` / `ptq.ladder.run_ladder` results; the report
renders them like any lab (`--out DIR` writes <name>.json, the PNG plot and an HTML page).

    ptq_lab(result, params, evaluation=None)     per-layer table, summary, task-level tables
    ladder_lab(result, params, model)            step table, difference-against-bytes figure
"""

from __future__ import annotations

import math
from typing import Any

from precisionlab.results import INTERVAL_STYLE, Figure, LabResult, Scalar, Series, Table

DETAIL_KEYS = ("damping", "damping_tries", "dead_columns", "alpha", "clipped_fraction", "scaled", "smoothed",
               "act_scheme", "outlier_columns", "fp32_output_error", "key_error", "value_error")


def _details(details: dict[str, Any]) -> str:
    parts = []
    for key in DETAIL_KEYS:
        if key in details and details[key] is not None:
            value = details[key]
            parts.append(f"{key}={value:.3g}" if isinstance(value, float) else f"{key}={value}")
    return ", ".join(parts)


def ptq_lab(result: Any, params: dict[str, Scalar], evaluation: Any = None, warnings: list[str] | None = None,
            eval_note: str = "") -> LabResult:
    """The `precisionlab ptq` result: one row per layer, the summary, and (given an EvalRun) its task tables."""
    m = result.method
    held_out = result.evaluation_tokens > 0
    columns = ["layer", "shape", "status", f"{m} output err", "RTN output err", "ratio"]
    if held_out:
        columns += [f"{m} held-out err", "RTN held-out err", "held-out ratio"]
    columns += ["seconds", "peak MB", "details"]
    rows: list[list[Scalar]] = []
    for r in result.layers:
        row: list[Scalar] = [r.name, "x".join(str(d) for d in r.shape) or "-", r.status, r.output_error,
                             r.rtn_output_error, r.ratio]
        if held_out:
            row += [r.eval_output_error, r.rtn_eval_output_error, r.eval_ratio]
        row += [r.seconds, r.peak_mb, _details(r.details) or r.note]
        rows.append(row)
    baseline = {"rtn": "itself", "gptq": "RTN of the same scheme", "awq": "RTN of the same scheme",
                "smoothquant": "the same W8A8 without smoothing", "llm_int8": "plain int8 (no fp16 columns)",
                "kivi": "per-token keys and values at the same bits"}[m]
    layers = Table(key="layers", title=f"{m} {result.scheme}: layer-output error against the baseline", columns=columns,
                   rows=rows,
                   note=(f"output err = ||Y_hat - Y||_F / ||Y||_F over the layer's own full-precision inputs; baseline "
                         f"('RTN' columns): {baseline}. Calibration: {result.calibration_tokens} tokens of the "
                         f"calibration data" + (f"; held-out: {result.evaluation_tokens} tokens of the evaluation "
                                                  "part, never seen by the method" if held_out else "")
                         + "; ratio < 1: the method is better on that layer."),
                   formats={c: ".4g" for c in columns if "err" in c or "ratio" in c} | {"seconds": ".2f",
                                                                                     "peak MB": ".0f"})
    findings: dict[str, Scalar] = dict(result.findings())
    summary_keys = [k for k in findings if k.startswith(f"ptq.{m}.") and ".layers." not in k]
    summary = Table(key="summary", title=f"{m} {result.scheme}: summary (findings)", columns=["finding", "value"],
                    rows=[[k, findings[k]] for k in summary_keys],
                    note="layers_improved: layers whose output error is below the baseline's on the calibration "
                         "activations; output_error_ratio: mean over layers of method / baseline.")
    sections = [layers, summary]
    figures: list[Figure] = []
    text = (f"{m} {result.scheme}: {findings[f'ptq.{m}.layers_improved']}/{findings[f'ptq.{m}.layers_total']} "
            f"layers below the baseline, mean ratio {_fmt(findings[f'ptq.{m}.output_error_ratio'])}")
    if evaluation is not None:
        from precisionlab.labs.eval import result_from_run

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
    return LabResult(name="ptq", title=f"Post-training quantization: {m} {result.scheme} on {params.get('model', '')}",
                     sections=sections, figures=figures, findings=findings, params=params, summary=text)


def _fmt(value: Any) -> str:
    return f"{value:.3g}" if isinstance(value, float) else str(value)


def ladder_lab(result: Any, params: dict[str, Scalar], model: dict[str, Any]) -> LabResult:
    """The ladder's table (one row per step tried, with its evidence), findings and plot."""
    unit = "%"
    first = result.steps[0].outcome.tasks if result.steps else {}
    if first:
        unit = next(iter(first.values())).get("unit", "%")
    unit_label = {"%": "% increase", "pp": "pp"}.get(unit, unit)
    columns = ["step", "name", "scheme", "method", "sensitive in float", "model MB", "bits/weight",
               f"difference ({unit_label})", "CI low", "CI high", "verdict", "examples", "needed", "source grid",
               "attempts", "seconds"]
    rows: list[list[Scalar]] = []
    for r in result.steps:
        o = r.outcome
        verdict = r.verdict.upper()
        if r.outcome.grid_aligned:
            verdict = f"GRID-ALIGNED ({o.verdict.upper()}, not evidence)"
        rows.append([r.index, r.step.name, r.step.scheme, r.step.method, "yes" if r.step.keep_sensitive else "no",
                     o.bytes / 1e6, o.bits_per_weight, o.difference, o.ci_low, o.ci_high, verdict, o.examples,
                     o.examples_needed if o.verdict == "inconclusive" else None, o.alignment, len(r.attempts),
                     r.seconds])
    stop = result.stopped_at or "none"
    note = (f"Steps in order, cheapest first; the ladder stops at the first PASS (the whole 95 % interval on the "
            f"good side of --max-drop {result.max_drop:g}, declared before the run). INCONCLUSIVE is not a pass: "
            f"'needed' (shown for INCONCLUSIVE steps) is the number of examples that would decide it"
            + (f"; with --grow the evaluation doubles up to {result.max_examples} examples before moving on"
               if result.grow else "; --grow enlarges the evaluation before moving on")
            + ". source grid: 'aligned' when the scheme reproduced every quantized source weight bit for bit (its "
              "grid already holds the source's values, as int4 groups of 32 with a minimum do on a Q4_1 GGUF): such "
              "a step proves nothing and is never stopped at. Bytes: codes, scales, zero points, padding, fp16 "
              "outlier columns with their indices, and every float parameter at its stored width.")
    if model.get("grid_note"):
        note += f" Source: {model['grid_note']}."
    if result.notes:
        note += " " + " ".join(result.notes)
    table = Table(key="steps", title=f"Escalation ladder at {result.target}: stopped at {stop}", columns=columns,
                  rows=rows, note=note,
                  formats={"model MB": ".2f", "bits/weight": ".4g", f"difference ({unit_label})": ".3g",
                           "CI low": ".3g", "CI high": ".3g", "seconds": ".1f"})
    sections = [table]
    tasks = sorted({t for r in result.steps for t in r.outcome.tasks})
    if len(tasks) > 1:
        task_rows = [[r.step.name, t, r.outcome.tasks[t]["difference"], r.outcome.tasks[t]["ci_low"],
                      r.outcome.tasks[t]["ci_high"], str(r.outcome.tasks[t]["verdict"]).upper()]
                     for r in result.steps for t in tasks if t in r.outcome.tasks]
        sections.append(Table(key="tasks", title="Per task", columns=["step", "task", "difference", "CI low",
                                                                     "CI high", "verdict"], rows=task_rows,
                              note="A step passes only when every task passes; any FAIL fails it."))
    series = []
    for r in result.steps:
        o = r.outcome
        x = o.bytes / 1e6
        label = f"{r.index} {r.step.name}" + (" (grid-aligned)" if o.grid_aligned else "")
        series.append(Series(label, [x, x, x], [o.ci_low, o.difference, o.ci_high], kind="line", style=INTERVAL_STYLE))
    spread = max((abs(v) for s in series for v in s.y if math.isfinite(v)), default=0.0)
    wide = spread > 100 * max(result.max_drop, 1.0)
    figure = Figure(key="difference_bytes", title=f"Ladder at {result.target}: task difference against model bytes",
                    xlabel="model MB (scales, zero points and float layers included)",
                    ylabel=f"difference ({unit_label}), 95 % CI", series=series,
                    hlines=[(0.0, "reference"), (result.max_drop if unit == "%" else -result.max_drop,
                                                 f"threshold {result.max_drop:g}")],
                    yscale="symlog" if wide else "linear",
                    note="each bar: a step's 95 % interval, the marker its estimate"
                         + ("; symmetric log scale" if wide else ""))
    findings: dict[str, Scalar] = dict(result.findings())
    parts = [f"{r.step.name} {r.outcome.difference:+.3g} [{r.outcome.ci_low:+.3g}, {r.outcome.ci_high:+.3g}] "
             f"{r.verdict.upper()}" for r in result.steps]
    summary = f"stopped at {stop}" + ("" if result.stopped_at else f" (remaining option: {result.remaining})")
    summary += "; " + "; ".join(parts)
    return LabResult(name="ladder", title=f"Escalation ladder: {model.get('name', '')} at {result.target}",
                     sections=sections, figures=[figure], findings=findings, params=params, summary=summary)
