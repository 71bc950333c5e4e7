"""The fast paths of round_to (rounding.dispatch and its kernels) against the general engine and
against independent references.

Expected values: the general path (`rounding.general`, the bit-arithmetic engine that the exact
and peer tests check against rational arithmetic and ml_dtypes), compared bit for bit with NaN
sign and payload; exact rational rounding (tests.reference) where float64 input meets a
breakpoint; ml_dtypes and numpy's own float16 cast for bf16 and fp16.
"""

from __future__ import annotations

import dataclasses
import sys
from fractions import Fraction

import numpy as np
import pytest

import precisionlab as pl
from precisionlab import parallel, peers
from precisionlab.formats import FloatFormat, Overflow, list_formats, p3109_formats
from precisionlab.rounding import cast_kernels, chunks, dispatch, general, table_kernels
from precisionlab.rounding.breakpoints import candidates
from precisionlab.rounding.modes import NanPolicy, Rounding

from .reference import ref_format

NAMES = [f.name for f in list_formats()] + ["e6m9", "e4m3ieee", "e4m3b126", "e3m4", "ue4m3", "e5m10b20", "e8m10",
                                            "binary8p3se", "binary8p4sf", "binary8p3uf", "binary8p1ue", "binary8p8ue",
                                            "binary8p1uf", "binary8p8uf", "binary8p7se", "binary6p3se", "binary4p2uf"]
MODES = ["nearest_even", "nearest_away", "toward_zero", "toward_positive", "toward_negative", "to_odd"]
SIZES = [7, 300, 5000, chunks.CHUNK + 123]  # the search, the search or one chunk, one chunk, two chunks


def bits(a: np.ndarray) -> np.ndarray:
    return a.view(np.uint64 if a.dtype.itemsize == 8 else np.uint32)


def sample(dtype: type[np.floating], n: int, seed: int) -> np.ndarray:
    """Random bit patterns (every binade, subnormals, inf, NaN payloads of both signs) and
    normal-ish values over a wide range."""
    rng = np.random.default_rng(seed)
    width = np.uint64 if dtype == np.float64 else np.uint32
    patterns = rng.integers(0, np.iinfo(width).max, n - n // 2, dtype=np.uint64, endpoint=True).astype(width)
    spread = rng.standard_normal(n // 2) * np.exp2(rng.integers(-40, 40, n // 2))
    with np.errstate(over="ignore"):
        return np.concatenate([patterns.view(dtype), spread.astype(dtype)])


def general_path(x: np.ndarray, name: str, mode: str, overflow: str | None, nan: str) -> np.ndarray:
    fmt = pl.get_format(name)
    with np.errstate(all="ignore"):
        return general.round_values(x, fmt, Rounding(mode), overflow, NanPolicy(nan))


def policies(name: str) -> list[tuple[str | None, str]]:
    fmt = pl.get_format(name)
    found: list[tuple[str | None, str]] = []
    for overflow in (None, "inf", "nan", "saturate", "saturate_propagate"):
        if isinstance(fmt, FloatFormat):
            if (overflow == "inf" and not fmt.has_inf) or (overflow == "nan" and not fmt.has_nan):
                continue
        elif overflow not in (None, "saturate", "saturate_propagate"):
            continue
        found += [(overflow, "raise"), (overflow, "zero")]
    return found


@pytest.mark.parametrize("name", NAMES)
def test_the_fast_path_gives_the_general_paths_bits(name: str) -> None:
    fmt = pl.get_format(name)
    every_policy = policies(name) if fmt.bits <= 8 else [*policies(name)[:1], ("saturate", "raise")]
    for dtype in (np.float32, np.float64):
        for mode in MODES:
            for overflow, nan in every_policy:
                for n in SIZES if (overflow, nan, mode) == (None, "raise", "nearest_even") else SIZES[:3]:
                    x = sample(dtype, n, seed=n + len(name))
                    if not fmt.has_nan and nan == "raise":
                        x = x[~np.isnan(x)]
                    expected = general_path(x, name, mode, overflow, nan)
                    with np.errstate(all="ignore"):
                        pl.round_to(x[:3], name, mode, overflow, nan=nan)  # the first call builds the kernel
                        got = pl.round_to(x, name, mode, overflow, nan=nan)
                    assert got.dtype == expected.dtype
                    assert np.array_equal(bits(got), bits(expected)), (dtype.__name__, mode, overflow, nan, n)


@pytest.mark.parametrize("name", ["e4m3", "e5m2", "e4m3fnuz", "e2m1", "e3m2", "ue8m0", "int4", "bf16", "fp16",
                                  "binary8p1ue", "binary8p8ue", "binary8p8uf"])
def test_float64_input_at_every_breakpoint_rounds_once(name: str) -> None:
    # A float64 one ulp (or 2^-30 relative) beside a midpoint must not be rounded through float32:
    # the expected values come from exact rational arithmetic.
    fmt = pl.get_format(name)
    found = candidates(fmt)
    assert found is not None
    cuts = found[np.isfinite(found) & (found != 0)]
    if cuts.size > 2000:  # 16-bit formats: every 61st candidate, and the largest ones
        cuts = np.concatenate([cuts[::61], cuts[-8:]])
    x = np.concatenate([cuts, np.nextafter(cuts, np.inf), np.nextafter(cuts, -np.inf), cuts * (1 + 2.0**-30),
                        cuts * (1 - 2.0**-30)])
    if isinstance(fmt, FloatFormat):
        ref = dataclasses.replace(ref_format(fmt), ties_up=name == "ue8m0")  # ml_dtypes' rule for ue8m0
        expected = np.array([ref.round(Fraction(float(v)), "nearest_even") for v in x])
    else:
        expected = np.clip(np.rint(x), fmt.min_value, fmt.max_value) + 0.0
    for part in (x[:200], x):  # below and above the search's size
        got = pl.round_to(part, name)
        got = pl.round_to(part, name)
        want = expected[: part.size]
        assert np.array_equal(np.isnan(got), np.isnan(want))
        finite = ~np.isnan(want)
        assert np.array_equal(got[finite], want[finite])
        assert np.array_equal(np.signbit(got[finite]), np.signbit(want[finite]))


@pytest.mark.parametrize("name, small, chunk", [
    ("e4m3", "SearchTable", "Table"), ("e2m1", "SearchTable", "Table"), ("ue8m0", "SearchTable", "Table"),
    ("int4", "SearchTable", "Table"), ("bf16", "SearchTable", "IeeeFrom"), ("fp16", "SearchTable", "IeeeFrom"),
    ("tf32", None, "IeeeFrom"), ("fp32", None, "CastThrough"),
    ("int8", "SearchTable", "Table"), ("uint8", "SearchTable", "Table"),  # midpoints such as 254.5: the finer grid
    ("binary8p1ue", "SearchTable", "Table"), ("binary8p8ue", "SearchTable", "Table")])
def test_the_fast_kernels_are_built(name: str, small: str | None, chunk: str | None) -> None:
    # The build checks each kernel against the general path and drops one that differs; the fast
    # paths the benchmarks time must survive that check.
    for dtype in (np.float32, np.float64):
        pl.round_to(np.ones(2, dtype=dtype), name)
        kernel = dispatch.find(name, np.dtype(dtype), "nearest_even", None, "raise")
        assert kernel is not None
        assert type(kernel.small).__name__ == small if small else kernel.small is None
        assert type(kernel.chunk).__name__.startswith(chunk) if chunk else kernel.chunk is None


P3109_8BIT = [f.name for f in p3109_formats(8)]


@pytest.mark.parametrize("name", P3109_8BIT)
def test_every_8bit_p3109_format_takes_the_table_in_every_deterministic_mode(name: str) -> None:
    # binary8p8 (7 trailing significand bits: midpoints with 9 significant bits) needs the finer
    # grid; binary8p1u's smallest value 2^-127 is a float32 subnormal, which the table holds.
    fmt = pl.get_format(name)
    for dtype in (np.float32, np.float64):
        for mode in MODES:
            for overflow in (None, "saturate"):
                pl.round_to(np.ones(2, dtype=dtype), name, mode, overflow)
                kernel = dispatch.find(name, np.dtype(dtype), mode, overflow, "raise")
                assert kernel is not None and type(kernel.small).__name__ == "SearchTable"
                assert type(kernel.chunk).__name__ == ("Table32" if dtype == np.float32 else "Table64")
                assert kernel.chunk.index.width == (15 if fmt.man_bits == 7 else 16), (mode, overflow)


@pytest.mark.parametrize("name", ["binary8p8ue", "binary8p8uf", "binary8p1ue", "binary8p1uf"])
@pytest.mark.parametrize("mode", MODES)
def test_p3109_extremes_against_exact_rationals_beside_every_breakpoint(name: str, mode: str) -> None:
    # Every breakpoint candidate, its float32 / float64 neighbours and points 2^-30 (relative)
    # either side, through the search (<= 256 elements) and the table (a chunk): expected values
    # from exact rational rounding (tests.reference), NaN and the sign of zero included.
    fmt = pl.get_format(name)
    found = candidates(fmt)
    assert found is not None
    cuts = found[np.isfinite(found)]
    ref = ref_format(fmt)
    for dtype in (np.float32, np.float64):
        near = cuts.astype(dtype)
        x = np.concatenate([near, np.nextafter(near, dtype(np.inf)), np.nextafter(near, dtype(-np.inf)),
                            (cuts * (1 + 2.0**-30)).astype(dtype), (cuts * (1 - 2.0**-30)).astype(dtype),
                            np.array([np.inf, -np.inf, np.nan], dtype=dtype)])
        expected = np.array([ref.round(float(v), mode) for v in x])
        for part in (x[:200], np.tile(x, 1 + chunks.CHUNK // x.size)):
            pl.round_to(part[:3], name, mode)
            got = pl.round_to(part, name, mode)
            want = np.tile(expected, 1 + chunks.CHUNK // x.size)[: part.size]
            assert np.array_equal(np.isnan(got), np.isnan(want)), (dtype, part.size)
            finite = ~np.isnan(want)
            assert np.array_equal(got[finite], want[finite]), (dtype, part.size)
            assert np.array_equal(np.signbit(got[finite]), np.signbit(want[finite])), (dtype, part.size)


def test_table_grids_and_their_representatives() -> None:
    # bf16 numbers (low 16 bits zero) pick the 2^17-entry table, one bit more the 2^18-entry one;
    # entry i stands for the float32 patterns whose top bits are i >> 1, itself (i even) or above
    # it (i odd): checked against values written out by hand.
    assert table_kernels.grid_width(np.array([1.0, 1.5, 2.0**-133, -3.0])) == 16
    assert table_kernels.grid_width(np.array([1.0, 1.0 + 2.0**-8])) == 15
    assert table_kernels.grid_width(np.array([1.0 + 2.0**-9])) is None
    assert table_kernels.grid_width(np.array([0.1])) is None
    for width in table_kernels.GRID_WIDTHS:
        rep = table_kernels.representatives(width)
        assert rep.size == 1 << (33 - width) and rep.dtype == np.float32
        one = 0x3F800000 >> (width - 1)  # the entry of 1.0
        assert rep[one] == 1.0 and rep[one + 1] == np.nextafter(np.float32(1), np.float32(2))
        assert rep[one + 2] == 1.0 + 2.0 ** (width - 23)
        index = table_kernels.TableIndex(width)
        probe = np.array([1.0, np.nextafter(np.float32(1), np.float32(2)), 1.0 + 2.0 ** (width - 23), -0.0],
                         dtype=np.float32)
        got = index(probe.view(np.uint32), np.empty(4, np.uint32), np.empty(4, np.uint32))
        assert got.tolist() == [one, one + 1, one + 2, 0x80000000 >> (width - 1)]


@pytest.mark.parametrize("name", ["e4m3", "e2m1", "bf16", "fp16", "e6m9"])
def test_chunk_kernels_on_breakpoint_neighbours(name: str) -> None:
    # The kernels themselves, as dispatch builds them but without its check, on float64 values one
    # ulp beside every (sampled) breakpoint and on random bit patterns.
    fmt = pl.get_format(name)
    found = candidates(fmt)
    assert found is not None
    cuts = found[np.isfinite(found)][::7]
    for dtype in (np.float32, np.float64):
        with np.errstate(over="ignore"):  # bf16's max + ulp is 2^128: inf in float32
            near = cuts.astype(dtype)
        x = np.concatenate([near, np.nextafter(near, dtype(np.inf)), np.nextafter(near, dtype(-np.inf)),
                            sample(dtype, 4000, seed=5)])
        if not fmt.has_nan:
            x = x[~np.isnan(x)]
        with np.errstate(all="ignore"):
            kernel = dispatch._chunk_kernel(fmt, np.dtype(dtype), Rounding.NEAREST_EVEN, None, NanPolicy.RAISE,
                                            found, general.output_dtype(fmt, np.dtype(dtype)), "no NaN")
            assert kernel is not None
            got = np.empty(x.size, dtype=general.output_dtype(fmt, np.dtype(dtype)))
            kernel.run(x, got, kernel.scratch(x.size))
        assert np.array_equal(bits(got), bits(general_path(x, name, "nearest_even", None, "raise"))), dtype


def test_bf16_and_fp16_kernels_match_ml_dtypes_and_numpy() -> None:
    ml_dtypes = pytest.importorskip("ml_dtypes")
    halves = np.arange(1 << 16, dtype=np.uint32) << np.uint32(16)
    grid = np.concatenate([halves, halves | 0x8000, halves | 0x7FFF, halves | 0x8001, halves + 0x10000 - 1])
    x = np.concatenate([grid.view(np.float32), sample(np.float32, 1 << 17, seed=1)])
    x = x[~np.isnan(x)]  # NaN payloads: ml_dtypes and numpy keep them, the engine canonicalises
    for size in (100, x.size):
        part = x[:size]
        for name, peer in (("bf16", ml_dtypes.bfloat16), ("fp16", np.float16)):
            pl.round_to(part[:3], name)
            with np.errstate(over="ignore"):
                expected = part.astype(peer).astype(np.float32)
            assert np.array_equal(bits(pl.round_to(part, name)), bits(expected)), (name, size)


def test_bf16_and_fp16_small_arrays_take_the_direct_kernels() -> None:
    # Above the search and up to DIRECT_MAX, a 1-D float32 array goes straight to the integer
    # kernel (bf16) or numpy's float16 casts (fp16); expected: the general path's bits (NaN
    # payloads of both signs become the canonical NaN with their sign) and, NaN aside, ml_dtypes.
    for name, dtype, direct in (("bf16", np.float32, True), ("bf16", np.float64, peers.available("ml_dtypes")),
                                ("fp16", np.float32, True), ("fp16", np.float64, True), ("e4m3", np.float32, False)):
        pl.round_to(np.ones(2, dtype=dtype), name)
        kernel = dispatch.find(name, np.dtype(dtype), "nearest_even", None, "raise")
        assert kernel is not None and (kernel.direct is not None) == direct, (name, dtype)
    kernel = dispatch.find("bf16", np.dtype(np.float32), "nearest_even", None, "raise")
    form = "bf16 by ml_dtypes" if peers.available("ml_dtypes") else "bf16"
    assert kernel is not None and kernel.small_max == dispatch.DIRECT_SEARCH_MAX[form]
    x = sample(np.float32, 3 * chunks.CHUNK, seed=9)
    for name in ("bf16", "fp16"):
        for part in (x[:129], x[:1000], x[:2048], x[:2049], x[:5000], x[::3], x[: chunks.CHUNK],
                     x[: chunks.CHUNK + 1]):
            got = pl.round_to(part, name)
            expected = general_path(np.ascontiguousarray(part), name, "nearest_even", None, "raise")
            assert np.array_equal(bits(got), bits(expected)), (name, part.size)
    ml_dtypes = pytest.importorskip("ml_dtypes")
    finite = x[~np.isnan(x)][:1000]
    with np.errstate(over="ignore"):
        expected = finite.astype(ml_dtypes.bfloat16).astype(np.float32)
    assert np.array_equal(bits(pl.round_to(finite, "bf16")), bits(expected))


SIGNALLING = np.array([0x7F800001, 0xFF800001, 0x7FA00000], dtype=np.uint32).view(np.float32)
"""Signalling NaNs of both signs: a float cast that meets one raises the invalid flag."""


def code_neighbourhoods(name: str, dtype: type[np.floating]) -> np.ndarray:
    """Every value of a 16-bit format (its 2^16 codes, NaN and inf included), every midpoint between
    neighbours, the overflow edge max_finite + ulp/2, each with one ulp of dtype either side, and
    quiet and signalling NaNs of both signs; ordered by code, so a slice of it is a neighbourhood."""
    values = pl.decode(np.arange(1 << 16, dtype=np.uint32), name).astype(np.float64)
    order = np.argsort(values, kind="stable")
    finite = values[order][np.isfinite(values[order])]
    mids = (finite[:-1] + finite[1:]) / 2
    top = float(pl.get_format(name).max_finite)
    edge = top + (top - finite[-2]) / 2
    base = np.concatenate([np.ravel(np.column_stack([finite[:-1], mids])), [finite[-1], edge, np.inf, -np.inf]])
    with np.errstate(over="ignore"):
        base = base.astype(dtype)
    near = np.ravel(np.column_stack([np.nextafter(base, dtype(-np.inf)), base, np.nextafter(base, dtype(np.inf))]))
    with np.errstate(invalid="ignore"):  # widening a signalling NaN
        nans = np.concatenate([SIGNALLING, -SIGNALLING, [np.nan, -np.nan]]).astype(dtype)
    return np.concatenate([near, nans, near[:5000]])


@pytest.mark.parametrize("overflow", ["saturate", None])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("name", ["bf16", "fp16"])
def test_16_bit_fast_paths_on_every_code_neighbourhood(name: str, dtype: type[np.floating],
                                                       overflow: str | None) -> None:
    """The saturating and inf-overflowing kernels of bf16 and fp16 (search, direct casts, bit kernels,
    chunks), float32 and float64 input, bit for bit against the general engine (NaN sign and payload
    included) on every code neighbourhood, NaN and inf, in slices of every size the kernels switch
    at; and against ml_dtypes' / numpy's own casts, clamped to ±max_finite for saturate (NaN aside)."""
    x = code_neighbourhoods(name, dtype)
    expected = general_path(x, name, "nearest_even", overflow, "raise")
    pl.round_to(x[:3], name, overflow=overflow)
    kernel = dispatch.find(name, np.dtype(dtype), "nearest_even", overflow, "raise")
    assert kernel is not None and kernel.chunk is not None and kernel.direct is not None
    for size in (7, 33, 100, 256, 1000, 2048, 5000, chunks.CHUNK + 3, x.size):
        for start in range(0, x.size, size if size < 5000 else max(size, x.size // 7)):
            part = x[start:start + size]
            # no kernel may raise the overflow or invalid flag (the bare casts raise numpy's underflow
            # flag on an inexact subnormal result, as numpy's own casts do; numpy ignores it by default)
            with np.errstate(over="raise", invalid="raise", divide="raise"):
                got = pl.round_to(part, name, overflow=overflow) if part.size else expected[:0]
            assert np.array_equal(bits(got), bits(expected[start:start + size])), (size, start)
    two_d = x[: 4000 * 3].reshape(4000, 3)
    want = bits(expected[: two_d.size]).reshape(4000, 3)
    assert np.array_equal(bits(pl.round_to(two_d, name, overflow=overflow)), want)
    peer = np.float16 if name == "fp16" else pytest.importorskip("ml_dtypes").bfloat16
    with np.errstate(over="ignore", invalid="ignore"):
        cast = x.astype(peer).astype(expected.dtype)
    if overflow == "saturate":
        top = pl.get_format(name).max_finite
        cast = np.where(np.isinf(cast), np.copysign(top, cast), cast)
    same = (bits(cast) == bits(expected)) | (np.isnan(cast) & np.isnan(expected))
    assert same.all(), x[~same][:4]


@pytest.mark.parametrize("name", ["bf16", "fp16"])
def test_direct_forms_raise_no_floating_point_flag_and_canonicalise_nan(name: str) -> None:
    # The direct forms run numpy's or ml_dtypes' casts bare when a test says no flag can rise, and
    # fall back otherwise: values at fp16's overflow edge (65504 + 16 = 65520 rounds to inf),
    # infinities, quiet and signalling NaN, in arrays the direct form takes (100 and 1000 elements)
    # must give the general path's bits with every floating-point flag an error.
    edge = np.array([65519.996, 65520.0, -65520.0, 65504.0, 70000.0, 3e38, np.inf, -np.inf, np.nan, -np.nan],
                    dtype=np.float32)
    quiet = np.linspace(-60000, 60000, 1000, dtype=np.float32)
    pl.round_to(quiet, name)
    kernel = dispatch.find(name, np.dtype(np.float32), "nearest_even", None, "raise")
    assert kernel is not None and kernel.direct is not None
    for n in (100, 1000):
        for extra in (edge, SIGNALLING, edge[:4], np.array([], dtype=np.float32)):
            x = quiet[:n].copy()
            x[7:7 + extra.size] = extra
            expected = general_path(x, name, "nearest_even", None, "raise")
            with np.errstate(all="raise"):
                got = pl.round_to(x, name)
            assert np.array_equal(bits(got), bits(expected)), (name, n, extra)


def test_bf16_without_ml_dtypes_takes_the_integer_kernel(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(dispatch, "_kernels", {})
    monkeypatch.setitem(sys.modules, "ml_dtypes", None)  # `import ml_dtypes` now fails
    x = sample(np.float32, 1000, seed=11)
    got = pl.round_to(x, "bf16")
    kernel = dispatch.find("bf16", np.dtype(np.float32), "nearest_even", None, "raise")
    assert kernel is not None and kernel.direct is cast_kernels.bf16_array
    assert kernel.small_max == dispatch.DIRECT_SEARCH_MAX["bf16"]
    assert np.array_equal(bits(pl.round_to(x, "bf16")), bits(got))
    assert np.array_equal(bits(got), bits(general_path(x, "bf16", "nearest_even", None, "raise")))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("name", ["e2m1", "e3m2", "int8"])
def test_nan_into_a_format_without_nan_raises_on_every_path(name: str, dtype: type[np.floating]) -> None:
    pl.round_to(np.ones(3, dtype=dtype), name)
    for n in (1, 300, 5000, chunks.CHUNK + 5):
        x = np.ones(n, dtype=dtype)
        x[n // 2] = np.nan
        with pytest.raises(ValueError, match=f"{name} has no NaN"):
            pl.round_to(x, name)
        assert (pl.round_to(x, name, nan="zero")[n // 2]) == 0


def test_shapes_layouts_and_scalars_on_the_fast_path() -> None:
    rng = np.random.default_rng(3)
    for name in ("e4m3", "bf16", "fp32", "int4", "tf32"):
        for dtype in (np.float32, np.float64):
            base = rng.standard_normal((64, 300)).astype(dtype)
            cases = [base, base[:, ::3], base.T, base[::-1, 5], base[:0], np.asarray(base[3, 4]), base[:2, :3]]
            for x in cases:
                pl.round_to(x, name)
                got = pl.round_to(x, name)
                expected = general_path(np.ascontiguousarray(x).reshape(-1), name, "nearest_even", None, "raise")
                assert type(got) is np.ndarray and got.shape == x.shape
                assert np.array_equal(bits(got.reshape(-1)), bits(expected))
        for _ in range(2):
            value = pl.round_to(0.1, name)
            assert isinstance(value, float)
            assert value == float(general_path(np.array([0.1]), name, "nearest_even", None, "raise")[0])


def test_the_cache_keys_on_identity_and_keeps_objects_alive() -> None:
    x = np.linspace(-3, 3, 50, dtype=np.float32)
    fmt = dataclasses.replace(pl.get_format("e4m3"), name="my_e4m3")
    first = pl.round_to(x, fmt, pl.Rounding.NEAREST_EVEN, Overflow.SATURATE)
    kernel = dispatch.find(fmt, x.dtype, pl.Rounding.NEAREST_EVEN, Overflow.SATURATE, "raise")
    assert kernel is not None and kernel.holds[0] is fmt
    assert np.array_equal(pl.round_to(x, fmt, pl.Rounding.NEAREST_EVEN, Overflow.SATURATE), first)
    assert np.array_equal(first, pl.round_to(x, "e4m3", overflow="saturate"))
    other = dataclasses.replace(fmt, man_bits=2, name="other")  # a different object: its own entry
    assert not np.array_equal(pl.round_to(x, other), first)


def test_the_cache_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(dispatch, "_kernels", {})
    monkeypatch.setattr(dispatch, "CACHE_LIMIT", 4)
    x = np.ones(3, dtype=np.float32)
    for bias in range(5, 12):
        pl.round_to(x, pl.get_format("e4m3", bias=bias))
    assert len(dispatch._kernels) <= 4


def test_bad_arguments_still_raise_after_the_kernel_is_cached() -> None:
    x = np.ones(4, dtype=np.float32)
    pl.round_to(x, "e4m3")
    with pytest.raises(ValueError, match="no infinity"):
        pl.round_to(x, "e4m3", overflow="inf")
    with pytest.raises(TypeError, match="straight_through"):
        pl.round_to(x, "e4m3", straight_through=True)
    with pytest.raises(TypeError):
        pl.round_to(x.astype(">f4"), "e4m3")


def test_stochastic_rounding_keeps_its_draws() -> None:
    x = np.full(1000, 1.0 + 2.0**-5, dtype=np.float32)
    a = pl.round_to(x, "e4m3", "stochastic", rng=7)
    b = pl.round_to(x, "e4m3", "stochastic", rng=7)
    assert np.array_equal(a, b) and 0 < np.mean(a > 1) < 1


@pytest.mark.parametrize("name", ["e4m3", "bf16", "fp16", "e2m1"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_threaded_chunks_equal_one_thread(name: str, dtype: type[np.floating], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(parallel.THREADS_ENV, "3")
    parallel.reset()
    try:
        x = sample(dtype, 5 * chunks.CHUNK + 17, seed=11)
        if name == "e2m1":
            x = x[~np.isnan(x)]
        pl.round_to(x[:3], name)
        kernel = dispatch.find(name, x.dtype, "nearest_even", None, "raise")
        assert kernel is not None and kernel.chunk is not None
        one = np.empty(x.size, dtype=kernel.out_dtype)
        many = np.empty_like(one)
        chunks.run_chunked(kernel.chunk, x, one, parallel_min=1 << 60)
        chunks.run_chunked(kernel.chunk, x, many, parallel_min=0)
        assert np.array_equal(bits(one), bits(many))
        if name == "e2m1":
            x[-3] = np.nan
            with pytest.raises(ValueError, match="no NaN"):
                chunks.run_chunked(kernel.chunk, x, many, parallel_min=0)
    finally:
        parallel.reset()


def test_spread_runs_on_the_caller_and_the_workers(monkeypatch: pytest.MonkeyPatch) -> None:
    import itertools
    import threading

    monkeypatch.setenv(parallel.THREADS_ENV, "3")
    parallel.reset()
    try:
        claim, seen, names = itertools.count(), [], set()

        def pull() -> None:
            names.add(threading.current_thread().name)
            while (i := next(claim)) < 200:
                seen.append(i)

        parallel.spread(pull)
        assert sorted(seen) == list(range(200))
        assert threading.current_thread().name in names

        def fail() -> None:
            raise RuntimeError("boom")

        with pytest.raises(RuntimeError, match="boom"):
            parallel.spread(fail)
    finally:
        parallel.reset()
