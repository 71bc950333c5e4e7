"""The escalation ladder's wrong-stop rate at the boundary, before and after its error budget.

    python3 benchmarks/bench_ladder_error.py [--runs 600 --ladder-runs 200 --normal-runs 200000 \\
        --resamples 10000 --documents 40]

Every step's true perplexity increase is exactly --max-drop (1 %), so every stop is a wrong stop: the
rate printed is the chance that `ladder.stopped_at` names a step that is not within the threshold.

Scenarios: one look (one step, --documents documents); --grow (one step, looks at n, 2n, 4n nested
documents); nine steps (no grow); nine steps with --grow. Rules: "95 % each" (every interval at 95 %,
the ladder before the budget) and "budget" (alpha = 0.025 split over steps x looks, Bonferroni).

Three estimates per cell, from independent computations:
  exact      scipy's multivariate normal: independent steps, nested looks (corr sqrt(n_j / n_k)), the FAIL
             exits ignored (an upper bound; they remove only paths that first cross the other side)
  normal     the same normal model simulated (--normal-runs ladders, vectorised numpy, no precisionlab code)
  bootstrap  `run_ladder` over the real statistics: eval.stats.compare_perplexity's bootstrap interval on
             synthetic documents (per-document log-perplexity damage N(log 1.01, 0.02^2), 100-300 tokens
             each), at the confidence the ladder asks for; --runs ladders for the one-step scenarios, the
             first --ladder-runs of them also for the nine-step ones

Then the cost of the budget in examples: the size that gives 80 % power against a true difference d
below the threshold grows with (z_t + z_0.8)^2, z_t the per-test quantile; printed relative to one
95 % interval, with the exact group-sequential (Pocock) constant for the looks for comparison. Nothing
is asserted (tests/test_ptq_ladder_error.py holds the tests).
"""

from __future__ import annotations

import argparse
import math
import os
import platform
import time
from statistics import NormalDist

import numpy as np

from precisionlab.eval import stats
from precisionlab.ptq.ladder import ErrorBudget, Step, StepOutcome, run_ladder

MAX_DROP = 1.0
ALPHA = 0.025
SCENARIOS = [("one look", 1, False), ("--grow", 1, True), ("nine steps", 9, False), ("nine steps, --grow", 9, True)]


# --------------------------------------------------------------------------- exact and normal model
def crossing_bound(z: float, looks: int) -> float:
    from scipy import stats as scipy_stats

    if looks == 1:
        return float(scipy_stats.norm.sf(z))
    sizes = 2.0 ** np.arange(looks)
    corr = np.sqrt(np.minimum.outer(sizes, sizes) / np.maximum.outer(sizes, sizes))
    return float(1 - scipy_stats.multivariate_normal(np.zeros(looks), corr).cdf(np.full(looks, z)))


def exact_rate(steps: int, looks: int, z: float) -> float:
    return 1 - (1 - crossing_bound(z, looks)) ** steps


def normal_rate(rng: np.random.Generator, runs: int, steps: int, looks: int, z: float) -> float:
    """Ladders of `steps` independent boundary steps, each with nested looks at n, 2n, 4n ...: the standardised
    estimate Z_k of look k from independent increments; PASS when Z_k < -z, FAIL when Z_k > z, first exit wins."""
    sizes = 2.0 ** np.arange(looks)
    increments = np.diff(np.concatenate([[0.0], sizes]))
    w = rng.standard_normal((runs, steps, looks)) * np.sqrt(increments)
    z_k = np.cumsum(w, axis=2) / np.sqrt(sizes)
    passed = z_k < -z
    failed = z_k > z
    exit_pass = np.argmax(passed | failed, axis=2)
    decided = (passed | failed).any(axis=2)
    step_pass = decided & np.take_along_axis(passed, exit_pass[..., None], axis=2)[..., 0]
    return float(step_pass.any(axis=1).mean())


# --------------------------------------------------------------------------- the real statistics
class BootstrapSteps:
    """Synthetic documents for nine steps, each at the boundary; evaluations cached by (step, n, confidence)."""

    def __init__(self, rng: np.random.Generator, documents: int, resamples: int, steps: int = 9) -> None:
        cap = 4 * documents
        self.tokens = rng.integers(100, 301, (steps, cap)).astype(float)
        ref = self.tokens * rng.normal(2.5, 0.3, (steps, cap))
        damage = rng.normal(math.log1p(MAX_DROP / 100), 0.02, (steps, cap))
        self.ref, self.cand = ref, ref + self.tokens * damage
        self.resamples = resamples
        self.cache: dict[tuple[str, int, float], StepOutcome] = {}
        self.evaluations = 0

    def __call__(self, step: Step, n: int, confidence: float) -> StepOutcome:
        key = (step.name, n, confidence)
        if key not in self.cache:
            k = int(step.name[1:])
            c = stats.compare_perplexity(self.ref[k, :n], self.cand[k, :n], self.tokens[k, :n], MAX_DROP,
                                         n_resamples=self.resamples, seed=0, confidence=confidence)
            self.evaluations += 1
            self.cache[key] = StepOutcome(c.verdict, c.interval.estimate, c.interval.low, c.interval.high, 0, n,
                                          confidence=confidence)
        return self.cache[key]


class At95:
    """The ladder before its budget: whatever confidence is asked, 95 %."""

    def __init__(self, inner: BootstrapSteps) -> None:
        self.inner = inner

    def __call__(self, step: Step, n: int, confidence: float) -> StepOutcome:
        return self.inner(step, n, 0.95)


def bootstrap_rates(runs: int, ladder_runs: int, documents: int, resamples: int,
                    seed: int) -> tuple[dict[tuple[str, str], tuple[int, int]], int]:
    """(stops, ladders) per (scenario, rule), and the bootstrap evaluations made."""
    rng = np.random.default_rng(seed)
    counts = {(name, rule): (0, 0) for name, _, _ in SCENARIOS for rule in ("95 % each", "budget")}
    evaluations = 0
    for run in range(runs):
        data = BootstrapSteps(rng, documents, resamples)
        for name, steps, grow in SCENARIOS:
            if steps > 1 and run >= ladder_runs:
                continue
            ladder = [Step(f"s{i}", "int4") for i in range(steps)]
            for rule, evaluate in (("95 % each", At95(data)), ("budget", data)):
                result = run_ladder(ladder, evaluate, examples=documents, max_drop=MAX_DROP, grow=grow,
                                    max_examples=4 * documents)
                stops, total = counts[(name, rule)]
                counts[(name, rule)] = (stops + (result.stopped_at is not None), total + 1)
        evaluations += data.evaluations
    return counts, evaluations


# --------------------------------------------------------------------------- report
def pocock_constant(alpha_step: float, looks: int) -> float:
    from scipy.optimize import brentq

    return float(brentq(lambda z: crossing_bound(z, looks) - alpha_step, 1.0, 8.0))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=600)
    parser.add_argument("--ladder-runs", type=int, default=200)
    parser.add_argument("--normal-runs", type=int, default=200_000)
    parser.add_argument("--resamples", type=int, default=10_000)
    parser.add_argument("--documents", type=int, default=40)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    print(f"# {platform.platform()}, {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f}")
    print(f"# boundary: every step's true increase = --max-drop {MAX_DROP:g} %; alpha {ALPHA}; "
          f"{args.documents} documents (looks at {args.documents}, {2 * args.documents}, {4 * args.documents}); "
          f"{args.resamples} bootstrap resamples")
    began = time.perf_counter()
    counts, evaluations = bootstrap_rates(args.runs, args.ladder_runs, args.documents, args.resamples, args.seed)
    boot_seconds = time.perf_counter() - began
    rng = np.random.default_rng(args.seed + 1)
    z95 = NormalDist().inv_cdf(0.975)
    header = f"{'scenario':<20} {'rule':<10} {'tests':>5} {'per test':>9} {'exact':>8} {'normal':>8} {'bootstrap':>17}"
    print(header)
    print("-" * len(header))
    for name, steps, grow in SCENARIOS:
        looks = 3 if grow else 1
        for rule in ("95 % each", "budget"):
            budget = ErrorBudget(ALPHA, steps, looks)
            z = z95 if rule == "95 % each" else budget.z
            per_test = ALPHA if rule == "95 % each" else budget.per_test
            stops, total = counts[(name, rule)]
            rate = stops / total
            se = math.sqrt(max(rate * (1 - rate), 1e-12) / total)
            print(f"{name:<20} {rule:<10} {steps * looks:>5} {per_test:>9.3g} {exact_rate(steps, looks, z):>8.4f} "
                  f"{normal_rate(rng, args.normal_runs, steps, looks, z):>8.4f} "
                  f"{rate:>7.4f} ± {se:.4f} ({total})")
    print(f"# bootstrap: {evaluations} evaluations in {boot_seconds:.0f} s")
    print()
    print("Cost of the budget: examples for 80 % power, relative to one 95 % interval")
    print(f"{'steps':>5} {'looks':>5} {'per test':>9} {'z':>6} {'x examples':>10} {'Pocock z':>9} {'x (Pocock)':>10}")
    for steps in (1, 8, 9):
        for looks in (1, 3):
            budget = ErrorBudget(ALPHA, steps, looks)
            pocock = pocock_constant(ALPHA / steps, looks) if looks > 1 else budget.z
            z_power = NormalDist().inv_cdf(0.8)
            ratio = ((pocock + z_power) / (z95 + z_power)) ** 2
            print(f"{steps:>5} {looks:>5} {budget.per_test:>9.3g} {budget.z:>6.3f} {budget.examples_factor():>10.3f} "
                  f"{pocock:>9.3f} {ratio:>10.3f}")


if __name__ == "__main__":
    main()
