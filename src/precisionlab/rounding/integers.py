"""Integer rounding: a non-negative magnitude to an integer under every mode, and integer targets
(round to the grid, then saturate to [min_value, max_value]; a NaN is an error unless nan='zero')."""

from __future__ import annotations

import numpy as np

from precisionlab.formats import IntFormat
from precisionlab.rounding.modes import DIRECTED, NanPolicy, Rounding, nan_error


def magnitude_rounds_up(negative: np.ndarray, rounding: Rounding) -> np.ndarray | None:
    """For a directed mode, where it moves the magnitude away from zero: toward_positive for the
    positive elements, toward_negative for the negative ones. None for every other mode."""
    if rounding is Rounding.TOWARD_POSITIVE:
        return ~negative
    if rounding is Rounding.TOWARD_NEGATIVE:
        return negative
    return None


def round_nonnegative_to_integer(v: np.ndarray, rounding: Rounding, rng: np.random.Generator | None,
                                 up: np.ndarray | None = None) -> np.ndarray:
    """Round v >= 0 (a float array) to integers (as floats) with the given mode, exactly. For the
    directed modes `up` (from magnitude_rounds_up) says which elements take the ceiling."""
    if rounding is Rounding.NEAREST_EVEN:
        return np.rint(v)
    floor = np.floor(v)
    if rounding is Rounding.TOWARD_ZERO:
        return floor
    if rounding in DIRECTED:
        if up is None:
            raise ValueError(f"{rounding.value} needs the elements' signs")
        return np.where(up, np.ceil(v), floor)
    with np.errstate(invalid="ignore"):  # inf - inf: NaN, and a NaN fraction never rounds inf up
        frac = v - floor  # exact: the fractional part of a float is representable
    if rounding is Rounding.TO_ODD:
        with np.errstate(invalid="ignore"):  # fmod(inf, 2) is NaN: inf is never rounded up
            return floor + ((frac > 0) & (np.fmod(floor, 2.0) == 0))
    if rounding is Rounding.NEAREST_AWAY:
        return floor + (frac >= 0.5)
    assert rng is not None
    return floor + (rng.random(v.shape) < frac)



def round_int_chunk(x: np.ndarray, fmt: IntFormat, rounding: Rounding, nan: NanPolicy,
                    rng: np.random.Generator | None) -> np.ndarray:
    """Round to the integer grid with the mode, then saturate to [min_value, max_value]."""
    is_nan = np.isnan(x)
    if is_nan.any() and nan is NanPolicy.RAISE:
        raise nan_error(fmt.name)
    magnitude = round_nonnegative_to_integer(np.abs(x), rounding, rng, magnitude_rounds_up(np.signbit(x), rounding))
    out = np.copysign(magnitude, x)
    np.clip(out, fmt.min_value, fmt.max_value, out=out)
    out[is_nan] = 0
    out += 0.0  # -0 -> +0: integers have one zero
    return out

