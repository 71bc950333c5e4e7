"""The exact solver: minimise the summed sensitivity of the chosen formats under a byte budget.

    solution = solve([[0.9, 0.1, 0.0], [0.5, 0.2, 0.0]],          # values[unit][option] (sensitivities)
                     [[10, 20, 40], [10, 20, 40]], capacity=50)   # costs[unit][option] (bytes, integers)
    solution.choice                                              # (1, 1): one option per unit
    solution.cost, solution.value                                # 40 and 0.1 + 0.2

A multiple-choice knapsack: every unit (a layer, or a group that must share a format) takes exactly one of
its options (None marks an option a unit cannot take); the summed cost must not exceed `capacity`; the summed
value is minimised. `InfeasibleBudget` (a ValueError) when even the cheapest option of every unit costs more.

Method: dynamic programming over the byte grid, kept sparse. Each unit's costs are taken above its cheapest
option (the sum of the cheapest options is paid whatever is chosen), so the grid runs over the spare bytes
C = capacity - sum of minima only. After unit k the state set holds, for every reachable spare cost c <= C, the
least value of any choice for units 1..k costing c, and only the states no other state dominates (one with
less or equal cost and less value). Exactness: an optimal choice restricted to units 1..k is a state of that
set, or is dominated by one, and replacing it by that state keeps the whole choice feasible and no worse; so
the least value in the final set is the optimum. The set never holds more states than C / g + 1, g the
greatest common divisor of the spare costs (for SmolLM2's layers a few thousand). Values are added in unit
order, so a choice's value is the float sum any checker adding in that order gets (and, rounding being monotonic,
a dominated prefix stays dominated after the same additions). Ties: of the choices of least value, one of least
cost is returned.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

MAX_STATES = 20_000_000
"""A state set larger than this is refused (memory), with what to change."""


class InfeasibleBudget(ValueError):
    """The budget is below the cheapest possible choice."""

    def __init__(self, message: str, minimum: int) -> None:
        super().__init__(message)
        self.minimum = minimum


@dataclass(frozen=True)
class Solution:
    choice: tuple[int, ...]
    """The chosen option index of each unit."""
    cost: int
    value: float
    states: int = 0
    """The largest state set the search held (a measure of its work)."""


def _check(values: Sequence[Sequence[float | None]], costs: Sequence[Sequence[int | None]], capacity: int) -> None:
    if len(values) != len(costs):
        raise ValueError(f"{len(values)} units of values for {len(costs)} units of costs")
    if isinstance(capacity, bool) or not isinstance(capacity, (int, np.integer)):
        raise ValueError(f"the capacity must be an integer number of bytes, got {capacity!r}")
    for u, (vs, cs) in enumerate(zip(values, costs, strict=True)):
        if len(vs) != len(cs):
            raise ValueError(f"unit {u}: {len(vs)} values for {len(cs)} costs")
        for v, c in zip(vs, cs, strict=True):
            if (v is None) != (c is None):
                raise ValueError(f"unit {u}: an option has a value or a cost but not both")
            if c is None:
                continue
            if isinstance(c, bool) or not isinstance(c, (int, np.integer)) or c < 0:
                raise ValueError(f"unit {u}: costs must be non-negative integers, got {c!r}")
            if v is None or not math.isfinite(float(v)):
                raise ValueError(f"unit {u}: values must be finite numbers, got {v!r}")
        if all(c is None for c in cs):
            raise ValueError(f"unit {u} has no option")


def solve(values: Sequence[Sequence[float | None]], costs: Sequence[Sequence[int | None]],
          capacity: int) -> Solution:
    """The exact optimum (module docstring)."""
    _check(values, costs, capacity)
    if not values:
        return Solution((), 0, 0.0, 1)
    minima = [min(c for c in cs if c is not None) for cs in costs]
    base = sum(int(m) for m in minima)
    if base > capacity:
        raise InfeasibleBudget(f"the budget of {capacity} bytes is below the smallest possible, {base} bytes (every "
                               "unit in its cheapest format)", base)
    spare = int(capacity) - base
    state_cost = np.zeros(1, dtype=np.int64)
    state_value = np.zeros(1, dtype=np.float64)
    parents: list[np.ndarray] = []
    options: list[np.ndarray] = []
    largest = 1
    for vs, cs, m in zip(values, costs, minima, strict=True):
        cand_cost, cand_value, cand_parent, cand_option = [], [], [], []
        index = np.arange(state_cost.size, dtype=np.int64)
        for j, (v, c) in enumerate(zip(vs, cs, strict=True)):
            if c is None:
                continue
            extra = int(c) - int(m)
            keep = state_cost + extra <= spare
            if not keep.any():
                continue
            cand_cost.append(state_cost[keep] + extra)
            cand_value.append(state_value[keep] + float(v))  # type: ignore[arg-type]
            cand_parent.append(index[keep])
            cand_option.append(np.full(int(keep.sum()), j, dtype=np.int64))
        cost = np.concatenate(cand_cost)
        value = np.concatenate(cand_value)
        parent = np.concatenate(cand_parent)
        option = np.concatenate(cand_option)
        # order: cost, then value, then the earlier option and parent (the tie rule); keep each state whose value
        # is below every cheaper-or-equal state's (the Pareto set, cost ascending, value strictly descending)
        order = np.lexsort((parent, option, value, cost))
        cost, value, parent, option = cost[order], value[order], parent[order], option[order]
        best_before = np.minimum.accumulate(value)
        keep = np.ones(value.size, dtype=bool)
        keep[1:] = value[1:] < best_before[:-1]
        state_cost, state_value = cost[keep], value[keep]
        parents.append(parent[keep])
        options.append(option[keep])
        largest = max(largest, int(state_cost.size))
        if state_cost.size > MAX_STATES:
            raise ValueError(f"the search holds {state_cost.size} states (over {MAX_STATES}); give fewer formats or "
                             "a budget closer to the smallest")
    at = int(state_cost.size - 1)  # the least value (values descend), at its least cost
    cost_total, value_total = int(state_cost[at]) + base, float(state_value[at])
    choice = []
    for parent, option in zip(reversed(parents), reversed(options), strict=True):
        choice.append(int(option[at]))
        at = int(parent[at])
    return Solution(tuple(reversed(choice)), cost_total, value_total, largest)


def brute_force(values: Sequence[Sequence[float | None]], costs: Sequence[Sequence[int | None]],
                capacity: int) -> Solution:
    """Every choice tried (small instances only: tests and the benchmark); the same tie rule as `solve`."""
    import itertools

    _check(values, costs, capacity)
    best: tuple[float, int, tuple[int, ...]] | None = None
    ranges = [[j for j, c in enumerate(cs) if c is not None] for cs in costs]
    for choice in itertools.product(*ranges):
        cost = 0
        for u, j in enumerate(choice):
            cost += int(costs[u][j])  # type: ignore[arg-type]
        if cost > capacity:
            continue
        value = 0.0
        for u, j in enumerate(choice):
            value += float(values[u][j])  # type: ignore[arg-type]
        key = (value, cost, choice)
        if best is None or key < best:
            best = key
    if best is None:
        minimum = sum(min(c for c in cs if c is not None) for cs in costs)
        raise InfeasibleBudget(f"the budget of {capacity} bytes is below the smallest possible, {minimum} bytes",
                               minimum)
    return Solution(best[2], best[1], best[0])
