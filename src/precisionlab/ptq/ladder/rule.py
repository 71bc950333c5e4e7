"""What `ladder.stopped_at` claims, and the per-test error that makes the claim true.

The claim. With `alpha` (default 2.5 %): the chance that the ladder stops at a step whose true
difference is on the wrong side of --max-drop (or exactly on it) is at most `alpha`, whatever the
true differences of the steps and however their evaluations depend on each other.

The rule (Bonferroni over every planned test). The ladder plans K steps (the plan's rungs) and,
with --grow, L looks at each (n, 2n, 4n, ... up to --max-examples: L = 1 + floor(log2(cap / n))).
Every look's PASS test is run at one-sided level alpha / (K L): the step's interval is the two-sided
interval of confidence 1 - 2 alpha / (K L), and PASS needs its whole extent on the good side of the
threshold. The event "the ladder stops at a bad step" lies inside the union of the events "a bad
step's test rejects at one of its looks", so its chance is at most K L alpha / (K L) = alpha: for
any dependence between the tests and whatever the ladder does after a look (stop, FAIL, grow, move
on). A step passes only when every task passes; that intersection needs no further split.

Why Bonferroni and not another procedure (docs/ptq.md gives the measured costs):
- Holm's step-down rejects first the smallest p-value at alpha / K, the Bonferroni level; its gain
  comes only after a first rejection. The ladder rejects once and stops, so Holm gives nothing
  here (and it would need every step evaluated before deciding, the cost the ladder avoids).
- Fixed-sequence (hierarchical) testing spends the whole alpha on each step, but it goes on only
  after a step is *rejected*; the ladder goes on after a step is *not* rejected, where the whole
  alpha at each of nine steps gives a wrong stop up to 1 - (1 - alpha)^9 = 20 %. The fallback
  procedure passes on the alpha of rejected steps only, of which the ladder has none before it
  stops: it reduces to the same weighted Bonferroni split.
- A group-sequential boundary across the looks of one step (Pocock; O'Brien-Fleming; Lan-DeMets
  spending) uses the correlation sqrt(n_j / n_k) of nested looks; at the ladder's sizes it saves
  about 2 % of the examples (3.08 against 3.04 standard errors for 8 steps and 3 looks), for an
  assumption (Gaussian increments of nested data) that user task files and bootstrap intervals do
  not guarantee.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from statistics import NormalDist

ALPHA = 0.025
"""The default chance of a wrong stop: the one-sided error of one 95 % interval, as before any split."""
RULE = "bonferroni"

_NORMAL = NormalDist()


def check_alpha(alpha: float) -> float:
    value = float(alpha)
    if not (math.isfinite(value) and 0.0 < value < 0.5):
        raise ValueError(f"--alpha must lie strictly between 0 and 0.5, got {alpha!r}")
    return value


def planned_looks(examples: int, grow: bool, cap: int | None) -> int:
    """Looks per step: 1 without `grow`; with it n, 2n, 4n, ... while they stay within `cap` (default 4n)."""
    if not grow:
        return 1
    limit = 4 * examples if cap is None else cap
    looks, n = 1, examples
    while 2 * n <= limit:
        looks, n = looks + 1, 2 * n
    return looks


@dataclass(frozen=True)
class ErrorBudget:
    """The split of `alpha` over `steps` x `looks` planned tests (module docstring)."""

    alpha: float
    steps: int
    looks: int

    def __post_init__(self) -> None:
        check_alpha(self.alpha)
        if self.steps < 1 or self.looks < 1:
            raise ValueError(f"an error budget needs at least one step and one look, got {self.steps} x {self.looks}")

    @property
    def tests(self) -> int:
        return self.steps * self.looks

    @property
    def per_test(self) -> float:
        """One-sided level of each PASS test: alpha / (steps x looks)."""
        return self.alpha / self.tests

    @property
    def confidence(self) -> float:
        """Two-sided confidence of each step's interval, 1 - 2 alpha / (steps x looks) (0.95 for one test)."""
        return 1.0 - 2.0 * self.per_test

    @property
    def z(self) -> float:
        """Standard errors between a passing interval's end and its estimate (normal approximation)."""
        return _NORMAL.inv_cdf(1.0 - self.per_test)

    def claim(self) -> str:
        return (f"P(stopping at a step whose true difference is not within --max-drop) <= {self.alpha:g} "
                f"({self.tests} planned test(s), each at one-sided {self.per_test:.3g}: Bonferroni)")

    def examples_factor(self, power: float = 0.8) -> float:
        """Examples needed for the same power relative to one test at `alpha`: ((z_t + z_p) / (z_a + z_p))^2."""
        z_power = _NORMAL.inv_cdf(power)
        return ((self.z + z_power) / (_NORMAL.inv_cdf(1.0 - self.alpha) + z_power)) ** 2
