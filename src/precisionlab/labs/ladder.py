"""The result of `precisionlab ladder` as a LabResult: the step table (the rungs the byte plan skipped
among them, marked), a per-task table, the difference-against-bytes figure and the findings.

Not registered as a lab: the ladder runs a real model for minutes, and `precisionlab run` stays fast. The
command builds it from `ptq.ladder.run_ladder`'s result; the report renders it like any lab.

    ladder_lab(result, params, model)                  # speed=SpeedRun (ptq.ladder.speed) adds the decode ratio
"""

from __future__ import annotations

import math
from typing import Any

from precisionlab.results import INTERVAL_STYLE, Figure, LabResult, Scalar, Series, Table


def _percent(confidence: float) -> str:
    """99.7222 % -> '99.72 %' (enough digits to tell it from 100)."""
    return f"{100 * confidence:.4g} %"


def _ratio(value: float) -> Scalar:
    return "no kernel" if math.isnan(value) else value


def ladder_lab(result: Any, params: dict[str, Scalar], model: dict[str, Any], speed: Any = None) -> LabResult:
    """The ladder's table (one row per step tried, with its evidence, and per skipped rung), findings and plot.
    `speed` (an eval.speed.SpeedRun of the tried steps, labelled by step name) adds the step table's decode
    ratio column, the speed table and its ladder.speed.<step>.* findings."""
    ratios: dict[str, float] = {}
    if speed is not None:
        from precisionlab.ptq.ladder.speed import step_ratios

        ratios = step_ratios(speed)
    unit = "%"
    first = result.steps[0].outcome.tasks if result.steps else {}
    if first:
        unit = next(iter(first.values())).get("unit", "%")
    unit_label = {"%": "% increase", "pp": "pp"}.get(unit, unit)
    budget = result.budget
    level = _percent(budget.confidence)
    columns = ["step", "name", "scheme", "method", "sensitive in float", "model MB", "bits/weight",
               f"difference ({unit_label})", "CI low", "CI high", "verdict", "examples", "needed", "source grid",
               "attempts", "seconds"] + (["decode ratio"] if speed is not None else [])
    skipped_before: dict[str, list[Any]] = {}
    for s in result.skipped:
        skipped_before.setdefault(s.instead.name, []).append(s)
    tried = {r.step.name for r in result.steps}
    rows: list[list[Scalar]] = []

    def skipped_row(s: Any) -> list[Scalar]:
        return [None, s.step.name, s.step.scheme, s.step.method, "yes" if s.step.keep_sensitive else "no",
                s.bytes / 1e6, None, None, None, None, "SKIPPED", None, None,
                None, None, None] + ([None] if speed is not None else [])

    for r in result.steps:
        rows += [skipped_row(s) for s in skipped_before.get(r.step.name, [])]
        o = r.outcome
        verdict = r.verdict.upper()
        if r.outcome.grid_aligned:
            verdict = f"GRID-ALIGNED ({o.verdict.upper()}, not evidence)"
        rows.append([r.index, r.step.name, r.step.scheme, r.step.method, "yes" if r.step.keep_sensitive else "no",
                     o.bytes / 1e6, o.bits_per_weight, o.difference, o.ci_low, o.ci_high, verdict, o.examples,
                     o.examples_needed if o.verdict == "inconclusive" else None, o.alignment, len(r.attempts),
                     r.seconds] + ([_ratio(ratios.get(r.step.name, math.nan))] if speed is not None else []))
    rows += [skipped_row(s) for s in result.skipped if s.instead.name not in tried]
    stop = result.stopped_at or "none"
    note = (f"Steps in order, cheapest first; the ladder stops at the first PASS (the whole {level} interval on "
            f"the good side of --max-drop {result.max_drop:g}, declared before the run). The interval is that wide "
            f"so the stop keeps its claim: {budget.claim()}. INCONCLUSIVE is not a pass: "
            f"'needed' (shown for INCONCLUSIVE steps) is the number of examples that would decide it"
            + (f"; with --grow the evaluation doubles up to {result.max_examples} examples before moving on"
               if result.grow else "; --grow enlarges the evaluation before moving on")
            + ". source grid: 'aligned' when the scheme reproduced every quantized source weight bit for bit (its "
              "grid already holds the source's values, as int4 groups of 32 with a minimum do on a Q4_1 GGUF): such "
              "a step proves nothing and is never stopped at. Bytes: codes, scales, zero points, padding, fp16 "
              "outlier columns with their indices, and every float parameter at its stored width.")
    if result.skipped:
        note += " SKIPPED: " + "; ".join(f"{s.step.name} {s.reason}" for s in result.skipped) + "."
    if model.get("grid_note"):
        note += f" Source: {model['grid_note']}."
    if result.notes:
        note += " " + " ".join(result.notes)
    table = Table(key="steps", title=f"Escalation ladder at {result.target}: stopped at {stop}", columns=columns,
                  rows=rows, note=note,
                  formats={"model MB": ".2f", "bits/weight": ".4g", f"difference ({unit_label})": ".3g",
                           "CI low": ".3g", "CI high": ".3g", "seconds": ".1f", "decode ratio": ".3g"})
    if speed is not None:
        table.note += (" decode ratio: the step's decode tokens/s on the real kernel of its scheme over the float "
                       "reference's, median of paired repetitions (the speed table); 'no kernel' where the step runs "
                       "emulated only.")
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
                    ylabel=f"difference ({unit_label}), {level} CI", series=series,
                    hlines=[(0.0, "reference"), (result.max_drop if unit == "%" else -result.max_drop,
                                                 f"threshold {result.max_drop:g}")],
                    yscale="symlog" if wide else "linear",
                    note=f"each bar: a step's {level} interval, the marker its estimate"
                         + ("; symmetric log scale" if wide else ""))
    findings: dict[str, Scalar] = dict(result.findings())
    if speed is not None:
        from precisionlab.eval.speed import speed_part

        part = speed_part(speed, prefix="ladder.speed")
        sections += part.tables
        findings.update(part.findings)
    parts = [f"{r.step.name} {r.outcome.difference:+.3g} [{r.outcome.ci_low:+.3g}, {r.outcome.ci_high:+.3g}] "
             f"{r.verdict.upper()}" for r in result.steps]
    summary = f"stopped at {stop}" + ("" if result.stopped_at else f" (remaining option: {result.remaining})")
    summary += "; " + "; ".join(parts)
    return LabResult(name="ladder", title=f"Escalation ladder: {model.get('name', '')} at {result.target}",
                     sections=sections, figures=[figure], findings=findings, params=params, summary=summary)
