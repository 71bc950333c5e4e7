"""The result of `precisionlab search` as a LabResult: the chosen recipe and the frontier with their evidence,
the uniform formats beside them, the sensitivities and bytes the solver saw, and the proxy's rank agreement.

Not registered as a lab (it runs a real model for minutes); the command builds it from `search.run.search`.

    search_lab(run, params)

Findings (stable keys): search.budget, .bits_per_weight, .model_bytes, .difference, .ci_low, .ci_high, .verdict
(the first task's primary comparison of the recipe at --budget), search.predicted_kl / .measured_kl,
search.recipe.<layer> (its format), search.sensitivity.<unit>.<format> and search.bytes.<unit>.<format> (what
the solver saw), search.uniform.<format>.difference / .ci_low / .ci_high / .verdict / .bits_per_weight,
search.frontier.<i>.budget / .bits_per_weight / .difference / .ci_low / .ci_high / .verdict / .predicted_kl /
.measured_kl, search.best_uniform (the uniform format of most bytes within the budget),
search.proxy.spearman.<format> and .all (rank correlation of the proxy with the direct measure),
search.seconds.<phase>.
"""

from __future__ import annotations

import math
from typing import Any

from precisionlab.results import INTERVAL_STYLE, Figure, LabResult, Scalar, Series, Table

UNIT_LABELS = {"%": "% increase", "pp": "pp"}


def search_lab(run: Any, params: dict[str, Scalar]) -> LabResult:
    task = run.settings["tasks"][0]
    findings: dict[str, Scalar] = {}
    chosen = run.chosen
    first = chosen.outcome[task]
    findings.update({"search.budget": chosen.budget, "search.budget_unit": run.settings["budget_unit"],
                     "search.bits_per_weight": chosen.bits_per_weight, "search.model_bytes": chosen.model_bytes,
                     "search.difference": first["difference"], "search.ci_low": first["ci_low"],
                     "search.ci_high": first["ci_high"], "search.verdict": first["verdict"],
                     "search.predicted_kl": chosen.predicted_kl, "search.measured_kl": chosen.measured_kl,
                     "search.sensitivity_measure": run.settings["sensitivity"]})
    for layer, fmt in chosen.recipe.items():
        findings[f"search.recipe.{layer}"] = fmt
    for unit, row in zip(run.units, run.costs, strict=True):
        for fmt, cost in zip(run.formats, row, strict=True):
            if cost is None:
                continue
            findings[f"search.sensitivity.{unit.name}.{fmt}"] = run.sensitivity[(unit.name, fmt)]
            findings[f"search.bytes.{unit.name}.{fmt}"] = cost
    for fmt, p in run.uniform.items():
        o = p.outcome[task]
        base = f"search.uniform.{fmt}"
        findings.update({f"{base}.difference": o["difference"], f"{base}.ci_low": o["ci_low"],
                         f"{base}.ci_high": o["ci_high"], f"{base}.verdict": o["verdict"],
                         f"{base}.bits_per_weight": p.bits_per_weight, f"{base}.measured_kl": p.measured_kl})
    for i, p in enumerate(run.frontier):
        o = p.outcome[task]
        base = f"search.frontier.{i}"
        findings.update({f"{base}.budget": p.budget, f"{base}.bits_per_weight": p.bits_per_weight,
                         f"{base}.difference": o["difference"], f"{base}.ci_low": o["ci_low"],
                         f"{base}.ci_high": o["ci_high"], f"{base}.verdict": o["verdict"],
                         f"{base}.predicted_kl": p.predicted_kl, f"{base}.measured_kl": p.measured_kl})
    best = best_uniform(run)
    if best is not None:
        findings["search.best_uniform"] = best
    for key, value in run.rank_correlation.items():
        findings[f"search.proxy.spearman.{key}"] = value
    for key, value in run.timings.items():
        if key.endswith("_seconds"):
            findings[f"search.seconds.{key.removesuffix('_seconds')}"] = value
    sections = [_points_table(run, task), _units_table(run), _proxy_table(run)]
    title = f"Per-layer format search under a byte budget: {run.model['name']}"
    summary = _summary(run, task)
    return LabResult(name="search", title=title, sections=sections, figures=[_figure(run, task)], findings=findings,
                     params=params, summary=summary)


def _points(run: Any) -> list[tuple[str, Any]]:
    return [("recipe", run.chosen), *((f"frontier {i}", p) for i, p in enumerate(run.frontier)),
            *((f"uniform {fmt}", p) for fmt, p in run.uniform.items())]


def _points_table(run: Any, task: str) -> Table:
    unit = run.chosen.outcome[task]["unit"]
    columns = ["point", "budget", "bits/weight", "model MB", "formats (layers)", f"difference ({UNIT_LABELS[unit]})",
               "CI low", "CI high", "verdict", "predicted KL", "measured KL", "measured / predicted"]
    rows: list[list[Scalar]] = []
    for name, p in _points(run):
        o = p.outcome[task]
        counts = ", ".join(f"{fmt} {n}" for fmt, n in sorted(p.counts.items()))
        ratio = p.measured_kl / p.predicted_kl if p.predicted_kl > 0 else math.nan
        rows.append([name, p.budget, p.bits_per_weight, p.model_bytes / 1e6, counts, o["difference"], o["ci_low"],
                     o["ci_high"], o["verdict"], p.predicted_kl, p.measured_kl, ratio])
    note = (f"Each point evaluated on {task}, paired against the float model (interval at 95 %, verdict against "
            f"--max-drop {run.settings['max_drop']:g}). Predicted KL: the summed sensitivities the solver minimised; "
            "measured KL: the whole recipe at once on the same calibration tokens (nats per token). A ratio far "
            "from 1 is where the layers' damages do not add.")
    return Table("points", "The recipe, the frontier and the uniform formats", columns, rows, note,
                 formats={"bits/weight": ".4f", "model MB": ".3f", "predicted KL": ".3g", "measured KL": ".3g",
                          "measured / predicted": ".3f", "CI low": ".3g", "CI high": ".3g"})


def _units_table(run: Any) -> Table:
    columns = ["unit", "weights", "chosen", *(f"KL {f}" for f in run.formats), *(f"bytes {f}" for f in run.formats)]
    rows: list[list[Scalar]] = []
    for unit, row in zip(run.units, run.costs, strict=True):
        chosen = run.chosen.recipe[unit.layers[0]]
        kl = [run.sensitivity.get((unit.name, f)) for f in run.formats]
        rows.append([unit.name, unit.elements, chosen, *kl, *row])
    measure = "direct KL" if run.settings["sensitivity"] == "direct" else "the Fisher proxy"
    note = (f"What the solver saw: per unit ({measure}, nats per calibration token) and bytes per format (codes, "
            "scales, zero points and padding, from the quant library's accounting). The solver minimises the summed "
            "values under the byte capacity exactly.")
    return Table("units", "Sensitivity and bytes per unit and format", columns, rows, note,
                 formats={f"KL {f}": ".3g" for f in run.formats})


def _proxy_table(run: Any) -> Table:
    rows: list[list[Scalar]] = []
    for key, value in run.rank_correlation.items():
        rows.append([key, value])
    note = ("Spearman's rank correlation of the one-backward Fisher-weighted output error with the direct KL, per "
            "format over the units and over every (unit, format) pair. Timings: "
            + ", ".join(f"{k.removesuffix('_seconds')} {v:.3g} s" for k, v in run.timings.items()
                        if k.endswith("_seconds")) + ".")
    if not rows:
        note = "The direct measure was not run (--sensitivity proxy): no rank correlation. " + note
    return Table("proxy", "How well the proxy ranks the units", ["format", "spearman"], rows, note,
                 formats={"spearman": ".3f"})


def _figure(run: Any, task: str) -> Figure:
    series: list[Series] = []
    for name, p in _points(run):
        o = p.outcome[task]
        x = p.bits_per_weight
        series.append(Series(name, [x, x, x], [o["ci_low"], o["difference"], o["ci_high"]], kind="line",
                             style=INTERVAL_STYLE))
    unit = run.chosen.outcome[task]["unit"]
    threshold = run.settings["max_drop"] if unit == "%" else -run.settings["max_drop"]
    return Figure("frontier", f"{task}: difference against bits per weight", "bits per weight (searched layers)",
                  f"difference ({UNIT_LABELS[unit]})", series, hlines=[(threshold, "--max-drop"), (0.0, "")],
                  note="Each point with its paired 95 % interval; the uniform formats are the reference points.")


def _summary(run: Any, task: str) -> str:
    p = run.chosen
    o = p.outcome[task]
    text = (f"At {p.budget:g} {run.settings['budget_unit']}: {p.bits_per_weight:.3f} bits per weight, "
            f"{task} difference {o['difference']:+.3g} [{o['ci_low']:+.3g}, {o['ci_high']:+.3g}] "
            f"{str(o['verdict']).upper()}; predicted KL {p.predicted_kl:.3g}, measured {p.measured_kl:.3g}.")
    best = best_uniform(run)
    if best is not None:
        u = run.uniform[best]
        text += (f" The dearest uniform format within the budget, {best} ({u.bits_per_weight:.3f} bits): "
                 f"{u.outcome[task]['difference']:+.3g}.")
    return text


def best_uniform(run: Any) -> str | None:
    """The uniform format of most bytes that fits the recipe's capacity (the best uniform under the budget)."""
    cap = run.chosen.capacity
    fits = [(u.cost, fmt) for fmt, u in run.uniform.items() if cap is not None and u.cost <= cap]
    return max(fits)[1] if fits else None
