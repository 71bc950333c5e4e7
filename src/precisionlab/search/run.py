"""The search, end to end: sensitivities, costs, the exact solver at the budget and along the frontier, and the
paired evaluation of every point beside the uniform formats.

    run = search(loaded, ["int4:g128", "int8:row", "bf16"], budget=6.0, tasks=["ppl"], max_drop=1.0,
                 frontier=[4.5, 5, 8], calibration=batches)
    run.chosen.recipe            # layer -> format
    run.chosen.bits_per_weight, run.chosen.outcome["ppl"]["difference"], run.chosen.measured_kl
    run.uniform["int4:g128"].outcome["ppl"]

Budgets are in bits per weight over the searched layers (8 x their bytes / their weights, the evaluation's
bits per weight) or, with unit "MB", in the model's bytes (every other parameter at its stored width, 1 MB =
10^6 bytes, the evaluation's model bytes); either becomes an integer byte capacity for the searched layers,
exactly (a rational budget, floored). The solver sees one value per (unit, format): the direct KL by default
(`sensitivity="direct"`), the proxy with "proxy". Each solved point is evaluated with eval.runner.evaluate (the
same reference, the same examples, paired), and its predicted KL (the summed sensitivities) is set beside its
measured KL (the whole recipe at once, on the calibration tokens).
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import Any

from precisionlab.search.solver import InfeasibleBudget, solve
from precisionlab.search.units import Unit, search_units, unit_costs

BITS, MB = "bits", "MB"
MAX_BITS = 32.0
"""No weight format is wider: a larger bits budget is a unit mix-up (refused, with the MB hint)."""
SENSITIVITIES = ("direct", "proxy")


@dataclass
class Point:
    """One solved budget (or one uniform format) and its evidence."""

    label: str
    budget: float | None
    recipe: dict[str, str]
    """Layer -> format."""
    cost: int
    """Bytes of the searched layers."""
    bits_per_weight: float
    model_bytes: int
    predicted_kl: float
    measured_kl: float = math.nan
    capacity: int | None = None
    """The byte capacity it was solved under (None: a uniform format)."""
    outcome: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Task -> difference, ci_low, ci_high, verdict, unit, metric, value (eval's primary comparison)."""
    seconds: float = 0.0

    @property
    def counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for fmt in self.recipe.values():
            out[fmt] = out.get(fmt, 0) + 1
        return out


@dataclass
class SearchRun:
    model: dict[str, Any]
    formats: list[str]
    units: list[Unit]
    costs: list[list[int | None]]
    sensitivity: dict[tuple[str, str], float]
    """What the solver saw, (unit, format) -> value."""
    direct: dict[tuple[str, str], float]
    proxy: dict[tuple[str, str], float]
    rank_correlation: dict[str, float]
    """Spearman of proxy against direct: per format over the units, and "all" over every (unit, format)."""
    chosen: Point
    frontier: list[Point]
    uniform: dict[str, Point]
    settings: dict[str, Any]
    timings: dict[str, float]
    evaluation: Any = None

    @property
    def elements(self) -> int:
        return sum(u.elements for u in self.units)


def capacity_bytes(budget: float, unit: str, elements: int, other_bytes: int) -> int:
    """The searched layers' byte capacity under `budget` (module docstring); ValueError for a bad budget."""
    value = float(budget)
    if not math.isfinite(value) or value <= 0:
        raise ValueError(f"--budget must be a positive number, got {budget!r}")
    if unit == BITS:
        if value > MAX_BITS:
            raise ValueError(f"--budget {value:g} bits per weight is more than any format stores ({MAX_BITS:g}); "
                             "for a size in megabytes give --budget-unit MB")
        return math.floor(Fraction(value) * elements / 8)
    if unit == MB:
        return math.floor(Fraction(value) * 1_000_000) - other_bytes
    raise ValueError(f"--budget-unit must be bits or MB, got {unit!r}")


def search(loaded: Any, formats: Sequence[str], budget: float, tasks: Sequence[str], max_drop: float, *,
           calibration: Sequence[Any], budget_unit: str = BITS, frontier: Sequence[float] = (),
           blocks: Sequence[int] | None = None, fuse: Sequence[str] = ("qkv",), embeddings: bool = False,
           sensitivity: str = "direct", uniform: Sequence[str] | None = None, workers: int = 1,
           scheduler: str | None = None, client: Any = None, model_spec: str | None = None, size: float = 1.0,
           seed: int = 0, n_resamples: int = 10_000, cache: bool = True, progress: Any = None,
           log_path: Path | None = None) -> SearchRun:
    """The whole search (module docstring). `model_spec` (the name or path the model loads from) is what
    workers load; `uniform` (default: every format) are evaluated uniformly beside the recipe; with `log_path`
    each direct sensitivity is saved as it finishes and an earlier run's are taken from it (search.log)."""
    from precisionlab import peers
    from precisionlab.eval.runner import check_max_drop, evaluate
    from precisionlab.eval.tasks import resolve_tasks
    from precisionlab.models.loading import unique_parameters
    from precisionlab.search.costs import parse_formats
    from precisionlab.search.recipes import recipe_candidate
    from precisionlab.search.sensitivity import SensitivityContext
    from precisionlab.search.workers import direct_sensitivities, worker_spec

    began = time.perf_counter()
    formats = parse_formats(formats)
    check_max_drop(max_drop)
    if sensitivity not in SENSITIVITIES:
        raise ValueError(f"--sensitivity must be one of {', '.join(SENSITIVITIES)}, got {sensitivity!r}")
    uniform_formats = formats if uniform is None else parse_formats(uniform) if uniform else []
    units = search_units(loaded.model, blocks, fuse, embeddings)
    costs = unit_costs(units, formats)
    elements = sum(u.elements for u in units)
    modules = dict(loaded.model.named_modules())
    searched = {id(modules[layer].weight) for u in units for layer in u.layers}
    params = unique_parameters(loaded.model)
    other = sum(p.numel() * p.element_size() for p in params if id(p) not in searched)
    budgets = [float(budget), *[float(b) for b in frontier]]
    capacities = [capacity_bytes(b, budget_unit, elements, other) for b in budgets]  # bad budgets fail first
    for unit, row in zip(units, costs, strict=True):
        if all(c is None for c in row):
            raise ValueError(f"{unit.name}: no format of --formats can hold its shape {unit.shapes[0]} (add one that "
                             "can, such as int8:row or bf16)")
    values_min = sum(min(c for c in row if c is not None) for row in costs)
    for b, cap in zip(budgets, capacities, strict=True):
        if cap < values_min:
            smallest = (8 * values_min / elements if budget_unit == BITS else (values_min + other) / 1e6)
            hint = " (a budget in bits per weight? give --budget-unit bits)" if budget_unit == MB and b <= MAX_BITS \
                else ""
            raise InfeasibleBudget(f"--budget {b:g} {budget_unit} is below the smallest possible, {smallest:.4g} "
                                   f"{budget_unit} (every unit in its cheapest format){hint}", values_min)
    note = getattr(progress, "note", None)
    timings: dict[str, float] = {}
    log = _open_log(log_path, loaded, formats, units, calibration) if sensitivity == "direct" else None
    done = log.open() if log is not None else {}  # another search's file is refused before any work

    # sensitivities
    t0 = time.perf_counter()
    if progress is not None:
        progress.start("the float reference and each block's input on the calibration tokens", 0)
    try:
        context = SensitivityContext(loaded.model, calibration)
        timings["setup_seconds"] = time.perf_counter() - t0
        if progress is not None:
            progress.done(f"reference recorded: {context.tokens} calibration tokens, {len(units)} units "
                          f"({timings['setup_seconds']:.1f} s)")
            progress.start("sensitivity proxy (one backward pass, every unit and format)", 0)
        t0 = time.perf_counter()
        proxy_raw = context.proxy(units, formats)
    except BaseException:
        if log is not None:
            log.close()
        raise
    proxy = {k: v / context.tokens for k, v in proxy_raw.items() if _allowed(units, formats, costs, k)}
    timings["proxy_seconds"] = time.perf_counter() - t0
    if progress is not None:
        progress.done(f"sensitivity proxy ({timings['proxy_seconds']:.1f} s)")
    direct: dict[tuple[str, str], float] = {}
    if sensitivity == "direct":
        n_jobs = sum(c is not None for row in costs for c in row)
        if progress is not None:
            progress.start("sensitivity (direct KL per unit and format)", n_jobs)
        torch = peers.torch()
        spec = worker_spec(model_spec, loaded.dtype, calibration, torch.get_num_threads()) if model_spec else None
        if done and progress is not None:
            progress.advance(len(done))
            if note is not None:
                note(f"resuming: {len(done)} sensitivities measured earlier, in {log_path}")
        t0 = time.perf_counter()
        try:
            measured = direct_sensitivities(context, spec, units, formats, costs, workers, scheduler, client,
                                            tick=(lambda _text: progress.advance(1)) if progress is not None else None,
                                            done=done, record=log.append if log is not None else None)
        finally:
            if log is not None:
                log.close()
        timings["direct_seconds"] = time.perf_counter() - t0
        direct = {k: v[0] for k, v in measured.items()}
        task_seconds = [v[1] for v in measured.values()]
        timings["direct_task_seconds"] = sum(task_seconds) / len(task_seconds) if task_seconds else math.nan
        timings["direct_tasks_seconds"] = sum(task_seconds)
        if progress is not None:
            progress.done(f"sensitivity: {len(direct)} (unit, format) pairs, {timings['direct_seconds']:.1f} s "
                          f"({timings['direct_task_seconds']:.2f} s each)")
    chosen_values = direct if sensitivity == "direct" else proxy
    correlation = _correlations(units, formats, direct, proxy) if direct else {}

    # solve
    def point(label: str, b: float | None, cap: int) -> Point:
        values = [[chosen_values.get((u.name, f)) if c is not None else None for f, c in zip(formats, row, strict=True)]
                  for u, row in zip(units, costs, strict=True)]
        solution = solve(values, costs, cap)
        recipe = {layer: formats[j] for u, j in zip(units, solution.choice, strict=True) for layer in u.layers}
        return Point(label, b, recipe, solution.cost, 8 * solution.cost / elements, solution.cost + other,
                     solution.value, capacity=cap)

    t0 = time.perf_counter()
    chosen = point("recipe", budgets[0], capacities[0])
    points = [point(f"frontier{i}", b, c) for i, (b, c) in enumerate(zip(budgets[1:], capacities[1:], strict=True))]
    timings["solve_seconds"] = time.perf_counter() - t0
    uniforms: dict[str, Point] = {}
    for fmt in uniform_formats:
        j = formats.index(fmt) if fmt in formats else None
        row_costs = [row[j] if j is not None else None for row in costs]
        if j is None or any(c is None for c in row_costs):
            continue  # a format outside --formats, or one some unit cannot take: no uniform point
        cost = sum(int(c) for c in row_costs if c is not None)
        predicted = 0.0
        for u in units:
            predicted += chosen_values[(u.name, fmt)]
        uniforms[fmt] = Point(f"uniform:{fmt}", None, {layer: fmt for u in units for layer in u.layers}, cost,
                              8 * cost / elements, cost + other, predicted)

    # evidence: measured KL and the paired evaluation
    t0 = time.perf_counter()
    everything = [chosen, *points, *uniforms.values()]
    if progress is not None:
        progress.start("measured KL of each point (the whole recipe at once)", len(everything))
    for p in everything:
        p.measured_kl = context.kl_of(p.recipe)
        if progress is not None:
            progress.advance(1)
    timings["measured_kl_seconds"] = time.perf_counter() - t0
    if progress is not None:
        progress.done(f"measured KL of {len(everything)} points ({timings['measured_kl_seconds']:.1f} s)")
    candidates, label_of = [], {}
    for p in everything:
        key = tuple(sorted(p.recipe.items()))
        if key not in label_of:
            label_of[key] = p.label
            candidates.append(recipe_candidate(p.recipe, p.label))
    specs = resolve_tasks(list(tasks), loaded.kind, size=size, seed=seed)
    t0 = time.perf_counter()
    evaluation = evaluate(loaded, candidates, specs, max_drop, cache=cache, progress=progress, seed=seed,
                          n_resamples=n_resamples)
    timings["evaluation_seconds"] = time.perf_counter() - t0
    for p in everything:
        label = label_of[tuple(sorted(p.recipe.items()))]
        for task in evaluation.tasks:
            outcome = task.outcome(label)
            c = outcome.comparisons[task.primary]
            p.outcome[task.name] = {"difference": c.interval.estimate, "ci_low": c.interval.low,
                                    "ci_high": c.interval.high, "verdict": c.verdict, "unit": task.unit,
                                    "metric": task.primary, "value": outcome.metrics[task.primary],
                                    "reference": task.reference[task.primary], "n": c.interval.n}
        run_bits = next(c.bits_per_weight for c in evaluation.candidates if c.label == label)
        if not math.isclose(run_bits, p.bits_per_weight, rel_tol=1e-12):
            raise RuntimeError(f"{p.label}: the evaluation counted {run_bits} bits per weight, the search "
                               f"{p.bits_per_weight}")
    if note is not None:
        note(f"search done in {time.perf_counter() - began:.0f} s")
    timings["total_seconds"] = time.perf_counter() - began
    timings["calibration_tokens"] = float(context.tokens)
    timings["block_path"] = float(context.fast)
    model_info = {"name": loaded.name, "fingerprint": loaded.fingerprint, "bytes": loaded.nbytes,
                  "grid_note": loaded.grid_note, "dtype": loaded.dtype}
    settings = {"budget": float(budget), "budget_unit": budget_unit, "frontier": [float(b) for b in frontier],
                "sensitivity": sensitivity, "fuse": list(fuse), "embeddings": embeddings,
                "blocks": list(blocks) if blocks is not None else None, "max_drop": float(max_drop),
                "tasks": [s.name for s in specs], "size": size, "seed": seed, "n_resamples": n_resamples,
                "workers": workers, "scheduler": scheduler, "other_bytes": other, "elements": elements}
    return SearchRun(model_info, formats, units, costs, chosen_values, direct, proxy, correlation, chosen, points,
                     uniforms, settings, timings, evaluation)


def _open_log(path: Path | None, loaded: Any, formats: Sequence[str], units: Sequence[Unit],
              calibration: Sequence[Any]) -> Any:
    if path is None:
        return None
    import hashlib

    from precisionlab.search.log import SensitivityLog

    digest = hashlib.sha256()
    for batch in calibration:
        digest.update(str(batch.reshape(-1).tolist()).encode())
    identity = {"model": loaded.fingerprint, "dtype": loaded.dtype, "formats": list(formats),
                "units": [[u.name, list(u.layers)] for u in units], "calibration": digest.hexdigest()[:32],
                "measure": "kl(reference || quantized), mean per calibration token"}
    return SensitivityLog(path, identity)


def _allowed(units: Sequence[Unit], formats: Sequence[str], costs: Sequence[Sequence[int | None]],
             key: tuple[str, str]) -> bool:
    index = next(i for i, u in enumerate(units) if u.name == key[0])
    return costs[index][formats.index(key[1])] is not None


def _correlations(units: Sequence[Unit], formats: Sequence[str], direct: dict[tuple[str, str], float],
                  proxy: dict[tuple[str, str], float]) -> dict[str, float]:
    from precisionlab.search.sensitivity import spearman

    out: dict[str, float] = {}
    for fmt in formats:
        keys = [(u.name, fmt) for u in units if (u.name, fmt) in direct]
        out[fmt] = spearman([direct[k] for k in keys], [proxy[k] for k in keys])
    keys = list(direct)
    out["all"] = spearman([direct[k] for k in keys], [proxy[k] for k in keys])
    return out
