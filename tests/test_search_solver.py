"""The search's exact solver against brute force and scipy's MILP, its budget arithmetic, its byte counts against
the quant library's quantized tensors, and the rank correlation against scipy."""

from __future__ import annotations

import math
import random
from fractions import Fraction

import numpy as np
import pytest

from precisionlab.search.costs import format_bytes, parse_formats
from precisionlab.search.run import BITS, MB, capacity_bytes
from precisionlab.search.sensitivity import spearman
from precisionlab.search.solver import InfeasibleBudget, brute_force, solve


def _instance(rng: random.Random, units: int, options: int, ties: bool) -> tuple[list, list, int]:
    values: list[list[float | None]] = []
    costs: list[list[int | None]] = []
    for _ in range(units):
        vs: list[float | None] = []
        cs: list[int | None] = []
        for _ in range(options):
            if rng.random() < 0.15:
                vs.append(None)
                cs.append(None)
            else:  # ties: values and costs from small sets, so equal sums are common
                vs.append(float(rng.randint(0, 3)) / 4 if ties else rng.random())
                cs.append(rng.randint(1, 4) * 8 if ties else rng.randint(0, 60))
        if all(c is None for c in cs):
            vs[0], cs[0] = 0.5, 10
        values.append(vs)
        costs.append(cs)
    low = sum(min(c for c in cs if c is not None) for cs in costs)
    high = sum(max(c for c in cs if c is not None) for cs in costs)
    return values, costs, rng.randint(max(0, low - 10), high + 5)


@pytest.mark.parametrize("seed", range(300))
def test_the_solver_finds_the_brute_force_optimum(seed: int) -> None:
    rng = random.Random(seed)
    values, costs, capacity = _instance(rng, rng.randint(1, 6), rng.randint(1, 4), ties=seed % 3 == 0)
    try:
        expected = brute_force(values, costs, capacity)
    except InfeasibleBudget:
        with pytest.raises(InfeasibleBudget, match="below the smallest possible"):
            solve(values, costs, capacity)
        return
    got = solve(values, costs, capacity)
    chosen_cost = sum(costs[u][j] for u, j in enumerate(got.choice))
    chosen_value = 0.0
    for u, j in enumerate(got.choice):
        chosen_value += values[u][j]
    assert chosen_cost == got.cost <= capacity
    assert chosen_value == got.value == expected.value  # the same float sum, in unit order
    assert got.cost == expected.cost  # of the choices of least value, the cheapest


def test_an_infeasible_budget_names_the_smallest_possible() -> None:
    with pytest.raises(InfeasibleBudget, match="below the smallest possible, 30 bytes") as info:
        solve([[0.1, 0.0], [0.2, 0.0]], [[10, 20], [20, 40]], 29)
    assert info.value.minimum == 30
    assert solve([[0.1, 0.0], [0.2, 0.0]], [[10, 20], [20, 40]], 30).choice == (0, 0)


@pytest.mark.parametrize("bad", [[[0.1]], [[math.nan]], [[None]]])
def test_malformed_instances_are_refused(bad: list) -> None:
    with pytest.raises(ValueError):
        solve(bad, [[1, 2]] if len(bad[0]) == 1 and bad[0][0] == 0.1 else [[1]], 10)


def test_the_solver_matches_scipy_milp_on_a_model_sized_instance() -> None:
    """150 units of 3 options with SmolLM2-like byte counts: too many for brute force, solved by scipy's MILP."""
    optimize = pytest.importorskip("scipy.optimize")
    rng = np.random.default_rng(0)
    shapes = [(1152, 576), (576, 576), (1536, 576), (1536, 576), (576, 1536)] * 30
    fmts = ["int4:g128", "int8:row", "bf16"]
    costs = [[format_bytes(f, s) for f in fmts] for s in shapes]
    values = [[float(v) for v in sorted(rng.lognormal(-8, 2, 3), reverse=True)] for _ in shapes]
    elements = sum(a * b for a, b in shapes)
    capacity = capacity_bytes(6.0, BITS, elements, 0)
    got = solve(values, costs, capacity)
    n, k = len(shapes), len(fmts)
    c = np.array([v for row in values for v in row])
    a_cost = np.array([[cost for row in costs for cost in row]], dtype=np.float64)
    a_one = np.zeros((n, n * k))
    for u in range(n):
        a_one[u, u * k:(u + 1) * k] = 1
    constraints = [optimize.LinearConstraint(a_cost, -np.inf, capacity), optimize.LinearConstraint(a_one, 1, 1)]
    milp = optimize.milp(c, constraints=constraints, integrality=np.ones(n * k), bounds=optimize.Bounds(0, 1),
                         options={"mip_rel_gap": 0})
    assert milp.success
    assert got.cost <= capacity
    assert got.value <= milp.fun * (1 + 1e-9) + 1e-15  # never worse than the MILP's optimum
    assert got.value == pytest.approx(milp.fun, rel=1e-7)


def test_the_state_set_stays_small_on_a_model_sized_instance() -> None:
    shapes = [(1152, 576), (576, 576), (1536, 576), (1536, 576), (576, 1536)] * 30
    costs = [[format_bytes(f, s) for f in ("int4:g128", "int8:row", "bf16")] for s in shapes]
    values = [[1.0 / (1 + i), 0.5 / (1 + i), 0.0] for i in range(len(shapes))]
    elements = sum(a * b for a, b in shapes)
    got = solve(values, costs, capacity_bytes(6.0, BITS, elements, 0))
    assert got.states < 100_000


def test_the_budget_becomes_an_exact_byte_capacity() -> None:
    # 8 * cost / elements <= budget  <=>  cost <= floor(budget * elements / 8), in exact rational arithmetic
    assert capacity_bytes(6.0, BITS, 1000, 0) == 750
    assert capacity_bytes(4.25, BITS, 3, 0) == math.floor(Fraction(4.25) * 3 / 8) == 1
    assert capacity_bytes(4.3, BITS, 10, 0) == 5  # 5.375 bytes, floored
    assert capacity_bytes(8.0, BITS, 3, 0) == 3  # exactly at the budget is within it
    assert capacity_bytes(2.5, MB, 1, 400_000) == 2_100_000
    with pytest.raises(ValueError, match="--budget-unit MB"):
        capacity_bytes(60, BITS, 1000, 0)
    with pytest.raises(ValueError, match="positive"):
        capacity_bytes(-1, BITS, 1000, 0)


def test_bytes_are_the_quant_librarys() -> None:
    from precisionlab.quant import quantize

    rng = np.random.default_rng(1)
    for shape in [(576, 576), (192, 576), (64, 100), (3, 1536)]:
        w = rng.standard_normal(shape).astype(np.float32)
        for fmt in ["int4:g128", "nvfp4", "mxfp4", "e4m3:row", "int8:row"]:
            assert format_bytes(fmt, shape) == quantize(w, fmt).nbytes, (fmt, shape)
        assert format_bytes("bf16", shape) == 2 * shape[0] * shape[1]
    # 576 inputs pad to 640 at g128: 576 rows of 320 packed bytes and 5 fp16 scales each
    assert format_bytes("int4:g128", (576, 576)) == 576 * 640 // 2 + 576 * 5 * 2


def test_formats_are_canonical_and_bad_ones_name_themselves() -> None:
    assert parse_formats(["int4:g128,INT8:ROW", "bfloat16", "bf16"]) == ["int4:g128", "int8:row", "bf16"]
    with pytest.raises(ValueError, match="unknown format 'int3:g7'"):
        parse_formats(["int4:g128,int3:g7"])
    with pytest.raises(ValueError, match="at least one format"):
        parse_formats([","])


def test_spearman_agrees_with_scipy() -> None:
    stats = pytest.importorskip("scipy.stats")
    rng = np.random.default_rng(2)
    for _ in range(20):
        a = rng.integers(0, 5, 12).astype(float)  # ties
        b = a + rng.standard_normal(12)
        assert spearman(a, b) == pytest.approx(stats.spearmanr(a, b).statistic, abs=1e-12)
    assert math.isnan(spearman([1.0, 1.0], [1.0, 2.0]))
