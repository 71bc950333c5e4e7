"""The search's exact solver against brute force and scipy's MILP on the same instances: outputs first, then time.

    python3 benchmarks/bench_search.py [--seed 0]

Instances: (a) 2000 small random instances (up to 6 units of up to 4 options, ties included) against brute
force over every choice; (b) SmolLM2-135M's shape (150 units: q/k/v fused, o, gate, up, down of 30 blocks) with
the quant library's bytes for int4:g128 / int8:row / bf16 and log-normal sensitivities, at budgets 4.75, 5, 6
and 8 bits per weight, against scipy.optimize.milp (HiGHS, mip_rel_gap 0). The objective values are checked
equal first (brute force: the same float; MILP: within 1e-9 relative); only then are the times compared. The
printed ratios are of this machine and its load; nothing is asserted on them (tests/test_search_solver.py holds
the tests).
"""

from __future__ import annotations

import argparse
import os
import platform
import random
import time

import numpy as np

from precisionlab.search.costs import format_bytes
from precisionlab.search.run import BITS, capacity_bytes
from precisionlab.search.solver import InfeasibleBudget, brute_force, solve


def small(seed: int, count: int) -> None:
    rng = random.Random(seed)
    t_dp = t_bf = 0.0
    checked = infeasible = 0
    for _ in range(count):
        units, options = rng.randint(1, 6), rng.randint(1, 4)
        values = [[float(rng.randint(0, 3)) / 4 if rng.random() < 0.3 else rng.random() for _ in range(options)]
                  for _ in range(units)]
        costs = [[rng.randint(0, 60) for _ in range(options)] for _ in range(units)]
        low, high = sum(min(c) for c in costs), sum(max(c) for c in costs)
        capacity = rng.randint(max(0, low - 5), high)
        began = time.perf_counter()
        try:
            expected = brute_force(values, costs, capacity)
        except InfeasibleBudget:
            expected = None
        t_bf += time.perf_counter() - began
        began = time.perf_counter()
        try:
            got = solve(values, costs, capacity)
        except InfeasibleBudget:
            got = None
        t_dp += time.perf_counter() - began
        if (expected is None) != (got is None) or (got is not None and expected is not None
                                                    and (got.value, got.cost) != (expected.value, expected.cost)):
            raise SystemExit(f"MISMATCH on instance {checked}: {got} vs {expected}")
        checked += 1
        infeasible += expected is None
    print(f"small instances: {checked} equal to brute force ({infeasible} infeasible, refused by both); "
          f"dp {t_dp * 1e3:.1f} ms, brute force {t_bf * 1e3:.1f} ms in all: brute force / dp = {t_bf / t_dp:.2f}")


def model_sized(seed: int) -> None:
    from scipy import optimize

    shapes = [(1152, 576), (576, 576), (1536, 576), (1536, 576), (576, 1536)] * 30
    fmts = ["int4:g128", "int8:row", "bf16"]
    costs = [[format_bytes(f, s) for f in fmts] for s in shapes]
    rng = np.random.default_rng(seed)
    values = [[float(v) for v in sorted(rng.lognormal(-8, 2, 3), reverse=True)] for _ in shapes]
    elements = sum(a * b for a, b in shapes)
    n, k = len(shapes), len(fmts)
    c = np.array([v for row in values for v in row])
    a_cost = np.array([[cost for row in costs for cost in row]], dtype=np.float64)
    a_one = np.zeros((n, n * k))
    for u in range(n):
        a_one[u, u * k:(u + 1) * k] = 1
    print(f"SmolLM2-shaped: {n} units x {k} formats, {elements} weights")
    for budget in (4.75, 5.0, 6.0, 8.0):
        capacity = capacity_bytes(budget, BITS, elements, 0)
        began = time.perf_counter()
        got = solve(values, costs, capacity)
        t_dp = time.perf_counter() - began
        constraints = [optimize.LinearConstraint(a_cost, -np.inf, capacity), optimize.LinearConstraint(a_one, 1, 1)]
        began = time.perf_counter()
        milp = optimize.milp(c, constraints=constraints, integrality=np.ones(n * k), bounds=optimize.Bounds(0, 1),
                             options={"mip_rel_gap": 0})
        t_milp = time.perf_counter() - began
        if not milp.success or abs(got.value - milp.fun) > 1e-9 * abs(milp.fun) + 1e-18:
            raise SystemExit(f"MISMATCH at {budget} bits: dp {got.value!r}, milp {milp.fun!r} ({milp.message})")
        print(f"  {budget:5.2f} bits: objective {got.value:.6e} (equal), {got.states} states; dp {t_dp * 1e3:.1f} ms, "
              f"milp {t_milp * 1e3:.1f} ms: milp / dp = {t_milp / t_dp:.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--small", type=int, default=2000)
    args = parser.parse_args()
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, load average {load:.1f}")
    small(args.seed, args.small)
    model_sized(args.seed)


if __name__ == "__main__":
    main()
