"""The cost of "where the damage lands" against what it rides on, on the machine as it is now.

    python3 benchmarks/bench_damage.py [--tokens 24000] [--docs 40] [--rounds 5]

1. The per-bucket sums (eval.damage.bucket_sums: np.bincount) against a plain Python reference (one pass
   over the tokens, math.fsum per bucket), on heavy-tailed per-token KL / NLL arrays of a run's size. The two
   are checked equal first (every bucket's KL and NLL increase within 1e-12 relative), then timed in
   interleaved rounds; prints the medians and the ratio.
2. The whole analysis of one candidate (eval.damage.analyse: frequency and position buckets, concentration,
   the worst tokens, decoded by a stand-in decoder) against the bootstrap of the KL interval it sits beside
   (eval.stats.bootstrap_ratio, 10,000 resamples over documents), the cheapest part of the scoring that
   already runs for every candidate (the forward passes cost seconds to minutes more).

Times are printed, never asserted.
"""

from __future__ import annotations

import argparse
import math
import statistics
import time
from collections.abc import Callable
from typing import Any


def plain_sums(labels: list[int], count: int, ref: list[float], nll: list[float],
               kl: list[float]) -> list[tuple[int, float, float]]:
    """(tokens, KL per token, NLL increase per token) per bucket, one Python pass and math.fsum."""
    kls: list[list[float]] = [[] for _ in range(count)]
    inc: list[list[float]] = [[] for _ in range(count)]
    for b, r, n, k in zip(labels, ref, nll, kl, strict=True):
        kls[b].append(k)
        inc[b].append(n - r)
    return [(len(kls[b]), math.fsum(kls[b]) / len(kls[b]), math.fsum(inc[b]) / len(inc[b]))
            for b in range(count) if kls[b]]


def timed(fn: Callable[[], Any], rounds: int) -> float:
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=24_000, help="scored tokens (longppl at size 1: ~24k)")
    parser.add_argument("--docs", type=int, default=40)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()

    import numpy as np

    from precisionlab.eval import damage, stats

    rng = np.random.default_rng(0)
    n = args.tokens
    kl = rng.lognormal(-5, 2.5, n)
    ref = rng.gamma(2.0, 1.5, n)
    nll = ref + rng.normal(0.01, 0.1, n)
    vocab = 49152
    counts = np.bincount((rng.zipf(1.1, 55_000) - 1) % vocab, minlength=vocab)  # a calibration text's counts
    target = (rng.zipf(1.1, n) - 1) % vocab
    labels = damage.frequency_index(target, counts)
    names = damage.FREQUENCY_NAMES

    fast = damage.bucket_sums(labels, names, ref, nll, kl)
    slow = plain_sums(labels.tolist(), len(names), ref.tolist(), nll.tolist(), kl.tolist())
    assert [b.tokens for b in fast] == [s[0] for s in slow]
    for b, (_, k, i) in zip(fast, slow, strict=True):
        assert math.isclose(b.kl, k, rel_tol=1e-12) and math.isclose(b.nll_increase, i, rel_tol=1e-12, abs_tol=1e-15)
    print(f"bucket sums over {n} tokens, {len(fast)} buckets: outputs equal (1e-12 relative)")
    t_fast = timed(lambda: damage.bucket_sums(labels, names, ref, nll, kl), args.rounds)
    t_slow = timed(lambda: plain_sums(labels.tolist(), len(names), ref.tolist(), nll.tolist(), kl.tolist()),
                   args.rounds)
    print(f"  np.bincount {t_fast * 1e3:8.2f} ms   plain Python + fsum {t_slow * 1e3:8.2f} ms   "
          f"ratio {t_slow / t_fast:6.1f}x")

    per_doc = np.full(args.docs, n // args.docs)
    per_doc[: n - int(per_doc.sum())] += 1
    position = np.concatenate([np.arange(1, m + 1) for m in per_doc]).astype(np.int32)
    token = {"kl": kl, "nll": nll, "target": target, "position": position,
             "top_ids": rng.integers(0, vocab, (n, 3)), "top_logp": np.log(rng.random((n, 3))).astype(np.float32)}
    reference = {"token_nll": ref, "top_ids": rng.integers(0, vocab, (n, 3)),
                 "top_logp": np.log(rng.random((n, 3))).astype(np.float32)}
    ids = [f"doc{k}" for k in range(args.docs)]
    doc_kl = np.asarray([kl[int(a):int(b)].sum() for a, b in zip(np.r_[0, np.cumsum(per_doc)][:-1],
                                                                    np.cumsum(per_doc), strict=True)])
    t_analyse = timed(lambda: damage.analyse(per_doc, ids, token, reference, counts, lambda t: f"<{t}>"),
                      args.rounds)
    t_boot = timed(lambda: stats.bootstrap_ratio(doc_kl, per_doc.astype(float), n_resamples=10_000, seed=0),
                   args.rounds)
    print(f"analyse one candidate ({n} tokens, {args.docs} documents) {t_analyse * 1e3:8.2f} ms   "
          f"KL bootstrap (10,000 resamples) {t_boot * 1e3:8.2f} ms   ratio {t_analyse / t_boot:5.2f}x")


if __name__ == "__main__":
    main()
