"""The built-in example gradient histogram, and how it is built.

Gradient magnitudes of a trained network are roughly log-normal: log10|g| is close to a
normal distribution that spans many decades. The example is such a distribution,
discretised on a log grid, with its centre and spread *solved* from two target fractions
in fp16 instead of typed in:

    P(|g| <= t0)           = zero_target                t0 = fp16 min_subnormal / 2
    P(|g| <  min_normal)   = zero_target + subnormal_target

With z = NormalDist().inv_cdf(.) these are two linear equations in (mu, sigma):

    log10 t0         = mu + sigma * z(zero_target)
    log10 min_normal = mu + sigma * z(zero_target + subnormal_target)

The defaults (3% zero, 64% subnormal) are the landmarks of the gradient census in
the “Precision & Quantization” course notes (module B04). The grid
runs down from `top` = 0.75 (the largest gradient, of order one as after clipping to norm 1;
it puts the largest safe fp16 loss scale at 2^16, because 0.75 * 2^16 = 49152 < 65504 and
0.75 * 2^17 overflows) in steps of 10^(1/bins_per_decade), over `decades` decades; each bin's
count is round(total * pdf(log10 m) / bins_per_decade). Mass above `top` and below the grid
is dropped. Because the counts sit on a grid, the census of the example lands near the
targets, not on them; its exact census is whatever `census()` counts.
"""

from __future__ import annotations

import math
from statistics import NormalDist

import numpy as np

from precisionlab.formats import FloatFormat, get_format
from precisionlab.training.census import GradientSample, from_histogram


def lognormal_parameters(zero_target: float = 0.03, subnormal_target: float = 0.64,
                         fmt: str = "fp16") -> tuple[float, float]:
    """(mu, sigma) of log10|g| that put zero_target below t0 and the subnormal_target next."""
    if not (zero_target > 0 and subnormal_target > 0 and zero_target + subnormal_target < 1):
        raise ValueError("targets must be positive fractions with a sum below 1")
    target = get_format(fmt)
    if not isinstance(target, FloatFormat):
        raise ValueError(f"{target.name} is not a float format")
    unit = NormalDist()
    z_zero = unit.inv_cdf(zero_target)
    z_normal = unit.inv_cdf(zero_target + subnormal_target)
    log_t0 = math.log10(target.min_subnormal / 2)
    log_normal = math.log10(target.min_normal)
    sigma = (log_normal - log_t0) / (z_normal - z_zero)
    mu = log_t0 - sigma * z_zero
    return mu, sigma


def example_histogram(total: int = 1_000_000, top: float = 0.75, decades: float = 14.0,
                      bins_per_decade: int = 16, zero_target: float = 0.03,
                      subnormal_target: float = 0.64) -> GradientSample:
    """The built-in example: a discretised log-normal magnitude histogram (see module doc)."""
    mu, sigma = lognormal_parameters(zero_target, subnormal_target)
    density = NormalDist(mu, sigma)
    steps = np.arange(int(decades * bins_per_decade) + 1)
    log_m = math.log10(top) - steps / bins_per_decade
    counts = np.array([round(total * density.pdf(float(v)) / bins_per_decade) for v in log_m], dtype=np.float64)
    keep = counts > 0
    return from_histogram(10.0 ** log_m[keep], counts[keep], "built-in example histogram")
