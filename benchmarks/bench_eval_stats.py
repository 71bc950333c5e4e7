"""What the evaluation statistics cost, against scipy measured in the same run, and how well
their intervals are calibrated.

    python3 benchmarks/bench_eval_stats.py [--repeat 3 --units 1000]
    python3 benchmarks/bench_eval_stats.py --coverage [--datasets 2000 --resamples 1000]
    python3 benchmarks/bench_eval_stats.py --binary [--datasets 1000 --resamples 1000]
    python3 benchmarks/bench_eval_stats.py --skew [--datasets 2000 --resamples 1000 --docs 40,100,400]

  mean difference   paired_bootstrap_mean of --units 0/1 pairs, 10,000 resamples, percentile
                      peer: scipy.stats.bootstrap(paired=True, vectorized, percentile)
  perplexity ratio  paired_bootstrap_ratio of --units documents (4 per-document sums)
                      peer: scipy.stats.bootstrap(paired=True) on the same statistic
  BCa               paired_bootstrap_mean(method="bca")   peer: scipy's method="BCa"
  McNemar           binomial_two_sided_p over every k for 2,000 discordant pairs
                      peer: scipy.stats.binomtest(k, 2000).pvalue

The intervals come from different random resamples, so "agree" means: both endpoints within 5 %
of the interval's width. --coverage simulates datasets with a known true difference and prints
how often each interval method covers it (the table in docs/eval_statistics.md). --binary does
the same for 0/1 scores: the bootstrap alone, Tango's score interval alone and their union (the
default), exactly (every (b, c) enumerated with its multinomial probability: the intervals depend
on b, c and n only) for independent examples, by simulation for examples in topics. --skew simulates
the perplexity verdict at the threshold when a few documents carry the damage (see skew_datasets):
wrong PASS, coverage and power of the expanded interval (the default before) and of compare_perplexity.
Nothing is asserted.
"""

from __future__ import annotations

import argparse
import math
import os
import platform

import numpy as np

from _timing import timed
from precisionlab.eval import stats


def paired_binary(rng: np.random.Generator, n: int, p_ref: float, p_b: float, p_c: float) -> tuple[np.ndarray, ...]:
    both_right = p_ref - p_b
    category = np.digitize(rng.random(n), [both_right, both_right + p_b, both_right + p_b + p_c])
    return ((category == 0) | (category == 1)).astype(float), ((category == 0) | (category == 2)).astype(float)


def document_nlls(rng: np.random.Generator, n: int, log_increase: float, shape: float) -> tuple[np.ndarray, ...]:
    tokens = rng.integers(80, 300, n).astype(float)
    ref = tokens * rng.normal(2.5, 0.4, n) + rng.normal(0, 1, n) * np.sqrt(tokens) * 1.5
    damage = rng.gamma(shape, 1.0 / shape, n)
    cand = ref + tokens * log_increase * damage + rng.normal(0, 1, n) * np.sqrt(tokens) * 0.3
    return ref, cand, tokens


def agree(ours: stats.Interval, low: float, high: float) -> str:
    width = high - low
    close = abs(ours.low - low) <= 0.05 * width and abs(ours.high - high) <= 0.05 * width
    return "agree" if close else f"DIFFER ({ours.low:.4g}, {ours.high:.4g}) vs ({low:.4g}, {high:.4g})"


def speed(repeat: int, units: int) -> None:
    try:
        from scipy import stats as scipy_stats
    except ImportError:
        print("scipy is not installed: only our timings are shown (pip install scipy)")
        scipy_stats = None
    rng = np.random.default_rng(0)
    ref, cand = paired_binary(rng, units, 0.7, 0.1, 0.06)
    nll_ref, nll_cand, tokens = document_nlls(rng, units, 0.02, 1.0)

    def mean_difference(r: np.ndarray, c: np.ndarray, axis: int = -1) -> np.ndarray:
        return 100 * np.mean(c - r, axis=axis)

    def ppl_ratio(r: np.ndarray, nr: np.ndarray, c: np.ndarray, nc: np.ndarray, axis: int = -1) -> np.ndarray:
        return 100 * np.expm1(c.sum(axis) / nc.sum(axis) - r.sum(axis) / nr.sum(axis))

    cases = [
        ("mean difference", lambda: stats.paired_bootstrap_mean(ref, cand, method="percentile"),
         (ref, cand), mean_difference, "percentile"),
        ("perplexity ratio", lambda: stats.paired_bootstrap_ratio(nll_ref, tokens, nll_cand, tokens,
                                                                  method="percentile"),
         (nll_ref, tokens, nll_cand, tokens), ppl_ratio, "percentile"),
        ("BCa", lambda: stats.paired_bootstrap_mean(ref, cand, method="bca"), (ref, cand), mean_difference, "BCa"),
    ]
    print(f"{'case':18s} {'ours (s)':>10s} {'scipy (s)':>10s} {'ratio':>7s}  result")
    for name, ours_fn, arrays, statistic, method in cases:
        ours_time, ours = timed(ours_fn, repeat)
        if scipy_stats is None:
            print(f"{name:18s} {ours_time:10.3f}")
            continue
        def peer(arrays: tuple[np.ndarray, ...] = arrays, statistic=statistic, method: str = method):  # type: ignore[no-untyped-def]
            return scipy_stats.bootstrap(arrays, statistic, paired=True, vectorized=True, n_resamples=10_000,
                                         method=method, random_state=np.random.default_rng(1)).confidence_interval
        peer_time, interval = timed(peer, repeat)
        print(f"{name:18s} {ours_time:10.3f} {peer_time:10.3f} {peer_time / ours_time:6.1f}x  "
              f"{agree(ours, interval.low, interval.high)}")
    n = 2000
    ours_time, ours_p = timed(lambda: [stats.binomial_two_sided_p(k, n) for k in range(n + 1)], repeat)
    if scipy_stats is None:
        print(f"{'McNemar':18s} {ours_time:10.3f}")
        return
    peer_time, peer_p = timed(lambda: [scipy_stats.binomtest(k, n).pvalue for k in range(n + 1)], repeat)
    differing = sum(not math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-300) for a, b in zip(ours_p, peer_p, strict=True))
    print(f"{'McNemar':18s} {ours_time:10.3f} {peer_time:10.3f} {peer_time / ours_time:6.1f}x  "
          f"{differing} of {n + 1} p-values differ (rel 1e-9)")


def coverage(datasets: int, resamples: int) -> None:
    scenarios: list[tuple[str, object]] = []
    for n, p_b, p_c in [(100, 0.10, 0.05), (100, 0.04, 0.02), (200, 0.05, 0.02), (400, 0.03, 0.03)]:
        scenarios.append((f"0/1, n={n}, lost {p_b:.0%} gained {p_c:.0%}", ("binary", n, p_b, p_c)))
    for n, delta, shape in [(24, 0.05, 1.0), (40, 0.02, 1.0), (40, 0.02, 4.0), (100, 0.01, 1.0)]:
        scenarios.append((f"ppl, {n} docs, +{delta} nats, gamma {shape:g}", ("ppl", n, delta, shape)))
    methods = ("expanded", "percentile", "bca")
    print(f"coverage of the 95 % interval, {datasets} datasets, {resamples} resamples each "
          f"(binomial sd {100 * math.sqrt(0.95 * 0.05 / datasets):.2f} %)")
    print(f"{'scenario':44s} " + " ".join(f"{m:>10s}" for m in methods))
    for label, spec in scenarios:
        kind, n, a, b = spec  # type: ignore[misc]
        hits = dict.fromkeys(methods, 0)
        rng = np.random.default_rng(2024)
        for i in range(datasets):
            if kind == "binary":
                ref, cand = paired_binary(rng, n, 0.7, a, b)
                truth = 100 * (b - a)
                intervals = {m: stats.paired_bootstrap_mean(ref, cand, resamples, seed=i, method=m) for m in methods}
            else:
                ref, cand, tokens = document_nlls(rng, n, a, b)
                truth = 100 * math.expm1(a)
                intervals = {m: stats.paired_bootstrap_ratio(ref, tokens, cand, tokens, resamples, seed=i, method=m)
                             for m in methods}
            for m, interval in intervals.items():
                hits[m] += interval.contains(truth)
        print(f"{label:44s} " + " ".join(f"{100 * hits[m] / datasets:9.1f}%" for m in methods), flush=True)


def _counts_to_scores(b: int, c: int, n: int) -> tuple[np.ndarray, np.ndarray]:
    ref = np.zeros(n)
    cand = np.zeros(n)
    ref[:b] = 1.0
    cand[b : b + c] = 1.0
    return ref, cand


def _binary_intervals(ref: np.ndarray, cand: np.ndarray, resamples: int, seed: int,
                      groups: np.ndarray | None = None) -> dict[str, tuple[float, float]]:
    boot = stats.paired_bootstrap_mean(ref, cand, resamples, seed=seed, groups=groups, score_interval=False)
    union = stats.paired_bootstrap_mean(ref, cand, resamples, seed=seed, groups=groups)
    lost = int(np.sum((ref == 1) & (cand == 0)))
    gained = int(np.sum((ref == 0) & (cand == 1)))
    low, high = stats.tango_interval(lost, gained, len(ref))
    return {"bootstrap": (boot.low, boot.high), "tango": (100 * low, 100 * high), "union": (union.low, union.high)}


def binary_coverage(datasets: int, resamples: int) -> None:
    methods = ("bootstrap", "tango", "union")
    print("0/1 scores, independent examples: exact coverage of the 95 % interval (every (b, c) weighted by its "
          f"multinomial probability; bootstrap with {resamples} resamples)")
    print(f"{'scenario':44s} " + " ".join(f"{m:>10s}" for m in methods))
    for n, p_b, p_c in [(100, 0.10, 0.05), (100, 0.04, 0.02), (100, 0.02, 0.01), (100, 0.01, 0.005),
                        (64, 0.03, 0.0), (200, 0.02, 0.01), (400, 0.01, 0.005), (100, 0.15, 0.15)]:
        truth = 100 * (p_c - p_b)
        covered = dict.fromkeys(methods, 0.0)
        for b in range(n + 1):
            for c in range(n + 1 - b if p_c > 0 else 1):
                log_p = (math.lgamma(n + 1) - math.lgamma(b + 1) - math.lgamma(c + 1) - math.lgamma(n - b - c + 1)
                         + (b * math.log(p_b) if b else 0.0) + (c * math.log(p_c) if c else 0.0)
                         + (n - b - c) * math.log1p(-p_b - p_c))
                if log_p < -25:
                    continue
                for m, (low, high) in _binary_intervals(*_counts_to_scores(b, c, n), resamples, b * 1000 + c).items():
                    covered[m] += math.exp(log_p) * (low <= truth <= high)
        label = f"n={n}, lost {100 * p_b:g} % gained {100 * p_c:g} %"
        print(f"{label:44s} " + " ".join(f"{100 * covered[m]:9.1f}%" for m in methods), flush=True)
    sizes = [1] * 4 + [2] * 4 + [3] * 8 + [4] * 16
    print(f"0/1 scores in 32 topics (100 examples, as the built-in choice set), topic-level Beta(concentration) "
          f"discordance: simulated coverage, {datasets} datasets (binomial sd "
          f"{100 * math.sqrt(0.95 * 0.05 / datasets):.2f} %)")
    print(f"{'scenario':44s} " + " ".join(f"{m:>10s}" for m in methods))
    for p_b, p_c, concentration in [(0.10, 0.05, math.inf), (0.10, 0.05, 10.0), (0.10, 0.05, 3.0),
                                    (0.04, 0.02, 3.0), (0.02, 0.01, math.inf), (0.02, 0.01, 3.0), (0.15, 0.15, 3.0)]:
        rng = np.random.default_rng(2025)
        hits = dict.fromkeys(methods, 0)
        truth = 100 * (p_c - p_b)
        for i in range(datasets):
            ref_list: list[bool] = []
            cand_list: list[bool] = []
            group_list: list[int] = []
            for g, size in enumerate(sizes):
                if math.isinf(concentration):
                    q_b, q_c = p_b, p_c
                else:
                    q_b = rng.beta(p_b * concentration, (1 - p_b) * concentration)
                    q_c = rng.beta(p_c * concentration, (1 - p_c) * concentration)
                category = np.digitize(rng.random(size), [q_b, q_b + q_c])
                ref_list += list(category == 0)
                cand_list += list(category == 1)
                group_list += [g] * size
            intervals = _binary_intervals(np.array(ref_list, float), np.array(cand_list, float), resamples, i,
                                          np.array(group_list))
            for m, (low, high) in intervals.items():
                hits[m] += low <= truth <= high
        label = f"lost {100 * p_b:g} % gained {100 * p_c:g} %, concentration {concentration:g}"
        print(f"{label:44s} " + " ".join(f"{100 * hits[m] / datasets:9.1f}%" for m in methods), flush=True)


DAMAGE = ("constant", "normal", "gamma4", "gamma1", "pareto2.5", "lognormal1.5")
DAMAGE_LABELS = {"constant": "none (every document alike)", "normal": "symmetric: Normal(1, 0.5)",
                 "gamma4": "mild: Gamma(4)", "gamma1": "Gamma(1)", "pareto2.5": "Pareto 2.5 (Lomax)",
                 "lognormal1.5": "lognormal sigma 1.5"}


def damage_draws(rng: np.random.Generator, kind: str, size: tuple[int, ...]) -> np.ndarray:
    """Per-document damage multipliers with mean exactly 1 (so the population damage is the stated one)."""
    if kind == "constant":
        return np.ones(size)
    if kind == "normal":
        return 1.0 + 0.5 * rng.standard_normal(size)
    if kind == "gamma4":
        return rng.gamma(4.0, 0.25, size)
    if kind == "gamma1":
        return rng.exponential(1.0, size)
    if kind == "pareto2.5":
        return 1.5 * rng.pareto(2.5, size)             # Lomax(2.5) has mean 1 / 1.5
    if kind == "lognormal1.5":
        return np.exp(1.5 * rng.standard_normal(size) - 1.125)
    raise ValueError(kind)


def skew_datasets(rng: np.random.Generator, kind: str, n: int, count: int, increase: float,
                  noise: float) -> tuple[np.ndarray, ...]:
    """``count`` datasets of ``n`` documents whose population perplexity increase is exactly ``increase`` percent.

    Document i has ``t_i`` tokens (uniform 80..299, as the built-in documents), a difficulty ``h_i ~ N(2.5, 0.4)``
    nats per token; the reference's summed NLL is ``r_i = t_i h_i + 1.5 sqrt(t_i) e_i``, the candidate's
    ``c_i = r_i + t_i delta D_i + noise sqrt(t_i) f_i`` (``e, f`` standard normal; ``D_i`` the damage multiplier,
    independent of everything else, mean 1). The population's corpus log ratio is ``E[c - r] / E[t] = delta``, so
    ``delta = log(1 + increase / 100)`` puts the true increase of the ratio of sums exactly at ``increase``.
    ``noise`` is the per-token spread of the difference that is not damage (0: the damage alone).
    """
    delta = math.log1p(increase / 100.0)
    tokens = rng.integers(80, 300, (count, n)).astype(float)
    ref = tokens * rng.normal(2.5, 0.4, (count, n)) + 1.5 * np.sqrt(tokens) * rng.standard_normal((count, n))
    cand = ref + tokens * delta * damage_draws(rng, kind, (count, n)) \
        + noise * np.sqrt(tokens) * rng.standard_normal((count, n))
    return ref, cand, tokens


def skew(datasets: int, resamples: int, docs: list[int], max_drop: float = 1.0) -> None:
    """At the threshold (true increase = max_drop): P(PASS) and coverage; at half of it: P(PASS) (power)."""
    print(f"perplexity verdict at --max-drop {max_drop:g}: true increase = max-drop (wrong PASS, coverage) and "
          f"= max-drop / 2 (power); {datasets} datasets (half that at 400 documents), {resamples} resamples")
    print(f"{'damage':28s} {'noise':>5s} {'docs':>5s} | {'wrong PASS':>17s} | {'coverage':>17s} | "
          f"{'power (half)':>17s} | guard")
    print(f"{'':28s} {'':5s} {'':5s} | {'before':>8s} {'after':>8s} | {'before':>8s} {'after':>8s} | "
          f"{'before':>8s} {'after':>8s} |")
    settings = [(kind, 0.0) for kind in DAMAGE if kind != "constant"] + [(kind, 0.3) for kind in DAMAGE]
    for n in docs:
        count = datasets if n < 400 else max(1, datasets // 2)
        for kind, noise in settings:
            row = {}
            for label, increase in (("threshold", max_drop), ("half", max_drop / 2)):
                rng = np.random.default_rng([n, DAMAGE.index(kind), int(10 * noise), int(increase * 1000)])
                ref, cand, tokens = skew_datasets(rng, kind, n, count, increase, noise)
                passes = {"before": 0, "after": 0}
                covered = {"before": 0, "after": 0}
                guarded = 0
                for i in range(count):
                    before = stats.paired_bootstrap_ratio(ref[i], tokens[i], cand[i], tokens[i], resamples, seed=i)
                    after = stats.compare_perplexity(ref[i], cand[i], tokens[i], max_drop, n_resamples=resamples,
                                                     seed=i)
                    passes["before"] += before.high < max_drop       # the verdict rule, written out
                    passes["after"] += after.verdict == "pass"
                    covered["before"] += before.low <= increase <= before.high
                    covered["after"] += after.interval.contains(increase)
                    guarded += after.interval.method.endswith("cantelli")
                row[label] = ({k: v / count for k, v in passes.items()}, {k: v / count for k, v in covered.items()},
                              guarded / count)
            (wrong, cover, guard), (power, _, _) = row["threshold"], row["half"]
            print(f"{DAMAGE_LABELS[kind]:28s} {noise:5.1f} {n:5d} | {100 * wrong['before']:7.1f}% "
                  f"{100 * wrong['after']:7.1f}% | {100 * cover['before']:7.1f}% {100 * cover['after']:7.1f}% | "
                  f"{100 * power['before']:7.1f}% {100 * power['after']:7.1f}% | {100 * guard:4.0f}%", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--units", type=int, default=1000)
    parser.add_argument("--coverage", action="store_true", help="print the simulated coverage table instead")
    parser.add_argument("--binary", action="store_true", help="print the coverage of the 0/1-score intervals instead")
    parser.add_argument("--skew", action="store_true",
                        help="print the perplexity verdict at the threshold under skewed per-document damage instead")
    parser.add_argument("--docs", default="40,100,400", help="document counts of --skew")
    parser.add_argument("--datasets", type=int, default=2000)
    parser.add_argument("--resamples", type=int, default=1000)
    args = parser.parse_args()
    print(f"{platform.python_version()} numpy {np.__version__}, {os.cpu_count()} cpus")
    if args.skew:
        skew(args.datasets, args.resamples, [int(n) for n in args.docs.split(",")])
    elif args.binary:
        binary_coverage(args.datasets, args.resamples)
    elif args.coverage:
        coverage(args.datasets, args.resamples)
    else:
        speed(args.repeat, args.units)


if __name__ == "__main__":
    main()
