"""The exact rounding engine on numpy float32 / float64 arrays: bit rounding of one chunk.

The other jobs of rounding sit beside it: the 2^17-entry table (`rounding.table`), integer
targets (`rounding.integers`), and the chunked driver on the shared pool (`rounding.general`,
`rounding.chunks`).

Every value is rounded once, directly from its input precision to the target, in
the integer bit pattern of a *compute domain* (float32 or float64; float64 whenever
the input is float64 or the format's range does not sit inside float32's):

* Target-normal range (|x| >= 2^emin): the target keeps the top M of the domain's
  Mi mantissa bits, so rounding is an integer add on the magnitude's bits followed
  by clearing the low s = Mi - M bits. A carry runs into the exponent field, which is
  exactly the step to the next binade.

      nearest_even : add (2^(s-1) - 1) + (bit s of the input), so a tie goes to the
                     even code. With M = 0 bit s is the exponent's last bit, inverted when
                     the target's bias and the domain's differ in parity (P3109, gfloat);
                     ue8m0 alone ties up instead, as ml_dtypes does.
      nearest_away : add 2^(s-1)
      toward_zero  : add 0
      toward_positive / toward_negative : add 2^s - 1 (the ceiling of the magnitude) where
                     the mode moves the magnitude up (positive x for toward_positive, negative
                     x for toward_negative), else 0
      to_odd       : clear the low bits; if any was set and the kept code is even, add 2^s
                     (the odd neighbour; with M = 0 the next binade when the exponent is even)
      stochastic   : add s uniformly random bits, so P(round up) = remainder / 2^s
                     exactly and E[round(x)] = x for |x| <= max_finite. The add runs on the
                     grid with the exponent unbounded above (the domain's binades go on past
                     the target's top), so just past max_finite x rounds up to the next grid
                     point with probability (x - max_finite) / (that grid point - max_finite)
                     and down to max_finite otherwise; then the overflow policy decides a
                     result past max_finite, as in every mode (the two steps of
                     `modes.Rounding`: binary8p4se 230 is 224 with p 0.625, +inf with 0.375).

* Target-subnormal range (|x| < 2^emin): the grid is uniform with quantum
  q = 2^(emin - M). v = |x| / q is an exact power-of-two scaling (by ldexp: 1/q overflows
  float64 when the bias is near 1023, as in e5m10b1020), v is rounded to an integer
  (rint, floor, floor + [frac >= 1/2], or floor + [u < frac] for stochastic with u a
  float64 uniform on [0, 1), i.e. a 2^-53 resolution of the probability), and the
  result is v * q.

Then specials: NaN stays NaN where the format has one (sign kept, as ml_dtypes);
rounded magnitudes above max_finite and ±inf follow the overflow policy; toward_zero never
turns a finite value into inf (IEEE 754) and so clamps to ±max_finite; FNUZ formats
have no -0; unsigned formats give NaN for negatives, and a format without a zero code
(ue8m0) gives NaN for 0 and its smallest value for anything smaller. An unsigned format
without NaN (ue2m1finite) has nothing to give NaN with, so it saturates there too:
negatives (and 0, when it has no zero code) become its smallest value.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from precisionlab.formats import FloatFormat, IntFormat, Overflow, get_float_format
from precisionlab.rounding.integers import magnitude_rounds_up, round_nonnegative_to_integer
from precisionlab.rounding.modes import NanPolicy, Rounding, nan_error


@dataclass(frozen=True)
class Domain:
    """A float dtype whose bit pattern the engine works in."""

    float_dtype: type[np.floating]
    uint_dtype: type[np.unsignedinteger]
    exp_bits: int
    man_bits: int

    @property
    def emax(self) -> int:
        """Also the exponent bias."""
        return (1 << (self.exp_bits - 1)) - 1

    @property
    def emin(self) -> int:
        return 1 - self.emax

    @property
    def sign_bit(self) -> int:
        return 1 << (self.exp_bits + self.man_bits)

    @property
    def inf_bits(self) -> int:
        """Bit pattern of +inf: all-ones exponent, zero mantissa."""
        return ((1 << self.exp_bits) - 1) << self.man_bits


F32 = Domain(np.float32, np.uint32, 8, 23)
F64 = Domain(np.float64, np.uint64, 11, 52)


def _fits(fmt: FloatFormat, dom: Domain) -> bool:
    """True when the domain can hold every value of fmt and scale its subnormal range."""
    if fmt.man_bits > dom.man_bits or fmt.emax > dom.emax or fmt.emin < dom.emin:
        return False
    return fmt.emin == dom.emin or fmt.man_bits - fmt.emin <= dom.emax


def compute_domain(fmt: FloatFormat, dtype: np.dtype) -> Domain:
    if dtype == np.float64 or not _fits(fmt, F32):
        return F64
    return F32


@lru_cache(maxsize=256)
def holds_all_values(fmt: FloatFormat | IntFormat, container: FloatFormat) -> bool:
    """Whether every finite value of fmt is exactly representable in the container format."""
    if isinstance(fmt, IntFormat):
        return max(abs(fmt.min_value), fmt.max_value) <= 2 ** (container.man_bits + 1)
    return (
        fmt.man_bits <= container.man_bits
        and fmt.emax <= container.emax
        and fmt.min_subnormal_exact >= container.min_subnormal_exact
    )



# --------------------------------------------------------------------------- float targets
@dataclass(frozen=True)
class FloatPlan:
    fmt: FloatFormat
    dom: Domain
    rounding: Rounding
    overflow: Overflow
    nan: NanPolicy


def check_policies(fmt: FloatFormat, overflow: Overflow) -> None:
    if overflow is Overflow.INF and not fmt.has_inf:
        raise ValueError(f"{fmt.name} has no infinity; use overflow='nan' or 'saturate'")
    if overflow is Overflow.NAN and not fmt.has_nan:
        raise ValueError(f"{fmt.name} has no NaN; use overflow='saturate'")


_UE8M0_FIELDS = get_float_format("ue8m0").defining_fields


def _effective_rounding(fmt: FloatFormat, rounding: Rounding) -> Rounding:
    # nearest_even sends a tie to the neighbour with the even code; with no mantissa bits that is
    # the even biased exponent (and 0 against the smallest value), as the P3109 drafts and gfloat
    # define it. ue8m0 (float8_e8m0fnu) alone keeps ml_dtypes' rule: ties go up (3 -> 4, 0.75 -> 1).
    if rounding is Rounding.NEAREST_EVEN and fmt.defining_fields == _UE8M0_FIELDS:
        return Rounding.NEAREST_AWAY
    return rounding


def _kept_bit_is_odd_code(fmt: FloatFormat, dom: Domain) -> bool:
    """Whether the domain's lowest kept bit being 1 marks an odd target code. With a mantissa it
    is the mantissa's last bit; with none it is the exponent's, and the domain's biased exponent
    has the target's parity only when the two biases do (e7m0fnuz's 64 against float32's 127)."""
    return fmt.man_bits > 0 or (fmt.bias - dom.emax) % 2 == 0


def round_float_chunk(x: np.ndarray, plan: FloatPlan, rng: np.random.Generator | None) -> np.ndarray:
    """Round a 1-D array in the plan's domain dtype; returns a new array of that dtype."""
    fmt, dom = plan.fmt, plan.dom
    rounding = _effective_rounding(fmt, plan.rounding)
    udt = dom.uint_dtype
    u = x.view(udt)
    mag = u & udt(dom.sign_bit - 1)
    sign = u ^ mag
    up = magnitude_rounds_up(sign != 0, rounding)
    shift = dom.man_bits - fmt.man_bits
    if shift > 0:
        low_mask = udt((1 << shift) - 1)
        if rounding is Rounding.NEAREST_EVEN:
            r = (mag >> udt(shift)) & udt(1)
            if not _kept_bit_is_odd_code(fmt, dom):
                r ^= udt(1)
            r += udt((1 << (shift - 1)) - 1)
            r += mag
        elif rounding is Rounding.NEAREST_AWAY:
            r = mag + udt(1 << (shift - 1))
        elif rounding is Rounding.TOWARD_ZERO:
            r = mag.copy()
        elif up is not None:
            r = up.astype(udt)
            r *= low_mask
            r += mag
        elif rounding is Rounding.TO_ODD:
            r = mag & ~low_mask
            even_code = (r >> udt(shift)) & udt(1)
            if _kept_bit_is_odd_code(fmt, dom):
                even_code ^= udt(1)
            even_code &= ((mag & low_mask) != 0).astype(udt)  # inexact and even: step to the odd neighbour
            r += even_code << udt(shift)
        else:
            assert rng is not None
            r = rng.integers(0, 1 << shift, size=mag.shape, dtype=udt)
            r += mag
        r &= ~low_mask
    else:
        r = mag.copy()
    out = r.view(dom.float_dtype)
    absx = mag.view(dom.float_dtype)

    if fmt.subnormals and fmt.emin > dom.emin:
        sub = absx < math.ldexp(1.0, fmt.emin)
        if sub.any():
            scaled = np.ldexp(absx[sub], fmt.man_bits - fmt.emin)
            rounded = round_nonnegative_to_integer(scaled, rounding, rng, None if up is None else up[sub])
            out[sub] = np.ldexp(rounded, fmt.emin - fmt.man_bits)

    _apply_specials(out, mag, sign, absx, plan, up)
    out.view(udt)[...] |= sign
    return out


_SATURATING = (Overflow.SATURATE, Overflow.SATURATE_PROPAGATE)


def _apply_specials(out: np.ndarray, mag: np.ndarray, sign: np.ndarray, absx: np.ndarray, plan: FloatPlan,
                    up: np.ndarray | None) -> None:
    fmt, dom = plan.fmt, plan.dom
    udt = dom.uint_dtype
    max_finite = dom.float_dtype(fmt.max_finite)
    is_nan = mag > udt(dom.inf_bits)
    # Where the mode moves the magnitude toward zero it never leaves the range (None: nowhere).
    inward: np.ndarray | bool | None = True if plan.rounding is Rounding.TOWARD_ZERO else None if up is None else ~up
    # Unsigned: a negative x whose rounding is not zero lies below the range (handled after the top).
    below = None
    if not fmt.signed:
        below = (sign != 0) & (absx != 0) & ~is_nan
        if fmt.has_zero:
            below &= out != 0

    over = out > max_finite  # x rounded on the unbounded grid, in every mode (stochastic too), then the policy
    if below is not None:
        over &= ~below
    if over.any():
        finite = mag < udt(dom.inf_bits)
        np.copyto(out, _overflow_value(fmt, plan.overflow, dom), where=over)
        if inward is not None:
            np.copyto(out, max_finite, where=over & finite & inward)
        if plan.overflow is Overflow.SATURATE_PROPAGATE and fmt.has_inf:
            np.copyto(out, dom.float_dtype(np.inf), where=over & ~finite)

    smallest = dom.float_dtype(fmt.min_subnormal if not fmt.has_zero else 0.0)
    no_code = dom.float_dtype(np.nan) if fmt.has_nan else smallest  # without NaN: saturate
    if not fmt.has_zero:
        # No zero code: anything smaller than the smallest value becomes it; 0 has no code.
        np.copyto(out, smallest, where=(out < smallest) & (absx > 0))
        np.copyto(out, no_code, where=absx == 0)
    if below is not None:
        if plan.overflow in _SATURATING:
            np.copyto(out, smallest, where=below)
        else:
            np.copyto(out, no_code, where=below)
            if inward is not None:
                np.copyto(out, smallest, where=below & (mag < udt(dom.inf_bits)) & inward)
        sign[...] = 0
    elif not fmt.has_negative_zero:
        # A NaN whose payload carried into the sign bit reads as -0 here; it keeps its sign.
        sign[(out == 0) & ~is_nan] = 0

    if is_nan.any():
        if fmt.has_nan:
            np.copyto(out, dom.float_dtype(np.nan), where=is_nan)
        elif plan.nan is NanPolicy.ZERO:
            np.copyto(out, dom.float_dtype(0.0), where=is_nan)
            sign[is_nan] = 0
        else:
            raise nan_error(fmt.name)


def _overflow_value(fmt: FloatFormat, overflow: Overflow, dom: Domain) -> np.floating:
    if overflow is Overflow.INF:
        return dom.float_dtype(np.inf)
    if overflow is Overflow.NAN:
        return dom.float_dtype(np.nan)
    return dom.float_dtype(fmt.max_finite)  # saturate; saturate_propagate for finite values

