"""Exact emulation of a K-step accumulation, each addition rounded once to the accumulator.

The rule emulated is the one a hardware dot product follows, step by step:

    acc_0 = 0,   acc_k = fl_acc(acc_{k-1} + a_k·b_k)

where fl_acc rounds once to the accumulator format. Products of two stored values
(each at most 26 significant bits) are exact in float64. The sum acc + a·b may not
be, so it is first rounded to float64 *to odd* (TwoSum gives the exact error; when it
is non-zero and the float64 sum is even, step one float64 ulp towards the exact value).
Round-to-odd with at least two extra bits makes the second rounding, to any format of
at most 51 significant bits, equal to a single correct rounding of the exact sum
(Boldo and Melquiond, "Emulation of FMA and correctly rounded sums: proved algorithms
using rounding to odd", IEEE TC 2008). All M×N output lanes advance together, one K
step per vector operation.
"""

from __future__ import annotations

import numpy as np

from precisionlab.formats import FloatFormat, get_format
from precisionlab.rounding import round_to
from precisionlab.rounding.exact_sum import odd_sum

_FP32 = get_format("fp32")


def round_acc(x: np.ndarray, fmt: FloatFormat, rounding: str = "nearest_even") -> np.ndarray:
    """Round float64 values once to the accumulator format; float64 out.

    fp32 with round-to-nearest-even uses the hardware float64 -> float32 conversion
    (correctly rounded); every other case goes through precisionlab.round_to.
    """
    if fmt == _FP32 and rounding == "nearest_even":
        return x.astype(np.float32).astype(np.float64)
    return np.asarray(round_to(x, fmt, rounding=rounding), dtype=np.float64)


def add_rounded(acc: np.ndarray, term: np.ndarray, fmt: FloatFormat, rounding: str = "nearest_even") -> np.ndarray:
    """fl_fmt(acc + term): the exact sum of two float64 arrays rounded once to fmt."""
    return round_acc(odd_sum(acc, term), fmt, rounding)
