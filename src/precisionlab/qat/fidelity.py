"""Is the trained model closer to the float model than its start? The held-out KL, paired.

    rows = kl_differences(evaluation)        # per perplexity task: qat against each other candidate (rtn, gptq ...)
    rows[0].difference, rows[0].ci_low, rows[0].ci_high   # nats per token, qat minus the other; below 0: qat closer

The paired evaluation (`eval.runner.evaluate`) scores every candidate on the same held-out documents and gives each
its KL(float || candidate) per token with a one-sample interval. Two overlapping intervals say little about the
difference, which is paired: the same documents, the same tokens. Here, per document, the KL sums of the two
candidates are subtracted and `eval.stats.bootstrap_ratio` (the interval of a per-token mean, resampling the
documents, or the topics the evaluation resamples, with its resamples, seed and confidence) gives the interval of
the difference in mean KL per token. The upper end below 0: the trained model is closer to the float model on
held-out text than the other candidate, at that confidence.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass(frozen=True)
class KLDifference:
    task: str
    candidate: str
    other: str
    kl: float
    other_kl: float
    difference: float
    ci_low: float
    ci_high: float
    confidence: float

    @property
    def closer(self) -> bool:
        """The interval lies below 0: the candidate's KL is lower, at the evaluation's confidence."""
        return self.ci_high < 0

    def findings(self, prefix: str = "qat.kl_vs") -> dict[str, float]:
        key = f"{prefix}.{self.other}"
        return {f"{key}.difference": self.difference, f"{key}.ci_low": self.ci_low, f"{key}.ci_high": self.ci_high,
                f"{key}.kl": self.kl, f"{key}.other_kl": self.other_kl}

    def line(self) -> str:
        verdict = "lower" if self.closer else ("higher" if self.ci_low > 0 else "not separated")
        return (f"held-out KL to the float model ({self.task}): {self.candidate} {self.kl:.4g} against {self.other} "
                f"{self.other_kl:.4g} nats/token, difference {self.difference:+.4g} "
                f"[{self.ci_low:+.4g}, {self.ci_high:+.4g}] ({self.confidence:.0%} paired bootstrap): {verdict}")


def kl_differences(evaluation: Any, candidate: str | None = None) -> list[KLDifference]:
    """For every perplexity task of `evaluation` (an eval.runner.EvalRun): `candidate` (default: the first candidate,
    the trained model) against each other candidate, paired by document (module docstring)."""
    from precisionlab.eval import stats

    settings = evaluation.settings
    n_resamples = int(settings.get("n_resamples", stats.DEFAULT_RESAMPLES))
    seed = int(settings.get("seed", 0))
    confidence = float(settings.get("confidence", stats.DEFAULT_CONFIDENCE))
    out = []
    for task in evaluation.tasks:
        if task.spec.kind != "ppl" or not task.outcomes:
            continue
        outcomes = {o.candidate: o for o in task.outcomes}
        name = candidate or task.outcomes[0].candidate
        mine = outcomes[name]
        tokens = np.asarray(mine.per_example["tokens"], dtype=np.float64)
        kl = np.asarray(mine.per_example["kl_sum"], dtype=np.float64)
        for other_name, other in outcomes.items():
            if other_name == name:
                continue
            if not np.array_equal(np.asarray(other.per_example["tokens"], dtype=np.float64), tokens):
                raise ValueError(f"{name} and {other_name} were scored on different tokens; no paired comparison")
            other_kl = np.asarray(other.per_example["kl_sum"], dtype=np.float64)
            interval = stats.bootstrap_ratio(kl - other_kl, tokens, n_resamples, seed, confidence,
                                             groups=task.spec.groups)
            total = float(tokens.sum())
            out.append(KLDifference(task.name, name, other_name, float(kl.sum() / total),
                                    float(other_kl.sum() / total), float(interval.estimate), float(interval.low),
                                    float(interval.high), confidence))
    return out
