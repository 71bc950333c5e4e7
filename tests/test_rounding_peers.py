"""Bit-exactness against ml_dtypes on every code, midpoint and neighbour, and where the peers differ."""

from __future__ import annotations

import numpy as np
import pytest

import precisionlab as pl

from .reference import same_bits

ml_dtypes = pytest.importorskip("ml_dtypes")

PEERS = {
    "e4m3": "float8_e4m3fn", "e5m2": "float8_e5m2", "e4m3fnuz": "float8_e4m3fnuz", "e5m2fnuz": "float8_e5m2fnuz",
    "e3m2": "float6_e3m2fn", "e2m3": "float6_e2m3fn", "e2m1": "float4_e2m1fn", "ue8m0": "float8_e8m0fnu",
    "bf16": "bfloat16", "fp16": "float16",
}


def peer_dtype(name: str) -> np.dtype:
    return np.dtype(np.float16) if name == "fp16" else np.dtype(getattr(ml_dtypes, PEERS[name]))


def all_codes(name: str) -> np.ndarray:
    fmt = pl.get_format(name)
    return np.arange(fmt.code_count, dtype=np.uint16 if fmt.bits > 8 else np.uint8)


def peer_decode(name: str, codes: np.ndarray) -> np.ndarray:
    return codes.view(peer_dtype(name)).astype(np.float64)


def probe_values(name: str) -> np.ndarray:
    """Every finite value, every midpoint between neighbours, 1.5x each, specials, and one
    float32 ulp either side of each of those."""
    with np.errstate(invalid="ignore"):
        values = np.unique(peer_decode(name, all_codes(name)))
    values = values[np.isfinite(values)]
    mids = (values[:-1] + values[1:]) / 2
    base = np.concatenate([values, mids, values * 1.5, -mids,
                           [np.inf, -np.inf, np.nan, 1e30, -1e30, 0.0, -0.0, 2.0**-140]])
    with np.errstate(over="ignore"):
        base32 = base.astype(np.float32)
    up = np.nextafter(base32, np.float32(np.inf))
    down = np.nextafter(base32, np.float32(-np.inf))
    return np.concatenate([base32, up, down])


@pytest.mark.parametrize("name", list(PEERS))
def test_decode_every_code_matches_ml_dtypes(name: str) -> None:
    codes = all_codes(name)
    with np.errstate(invalid="ignore"):
        expected = peer_decode(name, codes)
    assert same_bits(pl.decode(codes, name), expected).all()


def ue8m0_quirk(x: np.ndarray) -> np.ndarray:
    """ml_dtypes rounds every value strictly inside (2^-127, 2^-126) up to 2^-126, even 1.01 * 2^-127
    (a bug in its lowest binade); precisionlab rounds to the nearest power of two there."""
    a = np.abs(x.astype(np.float64))
    return (a > 2.0**-127) & (a < 2.0**-126)


def comparable_probes(name: str) -> np.ndarray:
    """probe_values without the documented differences: NaN where the format has none, and
    ue8m0's lowest binade (see ue8m0_quirk)."""
    x = probe_values(name)
    if not pl.get_format(name).has_nan:
        x = x[~np.isnan(x)]
    if name == "ue8m0":
        x = x[~ue8m0_quirk(x)]
    return x


@pytest.mark.parametrize("name", list(PEERS))
def test_round_matches_ml_dtypes_on_midpoints_and_neighbours(name: str) -> None:
    x = comparable_probes(name)
    with np.errstate(over="ignore", invalid="ignore"):
        expected = x.astype(peer_dtype(name)).astype(np.float32)
    ours = pl.round_to(x, name)
    assert ours.dtype == np.float32  # float32 input holds every format of 32 bits or fewer
    mismatch = ~same_bits(ours, expected)
    assert not mismatch.any(), (x[mismatch][:5], ours[mismatch][:5], expected[mismatch][:5])


@pytest.mark.parametrize("name", list(PEERS))
def test_encode_matches_ml_dtypes_codes(name: str) -> None:
    fmt = pl.get_format(name)
    x = comparable_probes(name)
    with np.errstate(over="ignore", invalid="ignore"):
        expected = x.astype(peer_dtype(name)).view(np.uint16 if fmt.bits > 8 else np.uint8)
    ours = pl.encode(x, name)
    assert ours.dtype == (np.uint16 if fmt.bits > 8 else np.uint8)
    np.testing.assert_array_equal(ours, expected)


def test_ue8m0_ties_go_up_and_zero_and_negatives_have_no_code() -> None:
    x = np.array([3.0, 0.75, 1.5, 6.0, 0.0, -1.0, 2.0**-129], dtype=np.float32)
    expected = x.astype(ml_dtypes.float8_e8m0fnu).astype(np.float64)
    ours = pl.round_to(x, "ue8m0").astype(np.float64)
    assert same_bits(ours, expected).all()
    assert list(ours[:4]) == [4.0, 1.0, 2.0, 8.0]
    assert np.isnan(ours[4]) and np.isnan(ours[5])
    assert ours[6] == 2.0**-127  # nothing is smaller, and there is no zero


def ml_dtypes_before(major: int, minor: int) -> bool:
    """True when the installed ml_dtypes is older than major.minor (0.7 fixed two casts)."""
    return tuple(int(part) for part in ml_dtypes.__version__.split(".")[:2]) < (major, minor)


def test_ue8m0_lowest_binade_rounds_to_the_nearest_power_of_two() -> None:
    x = np.array([1.01 * 2.0**-127, 1.4 * 2.0**-127, 1.6 * 2.0**-127])
    ours = pl.round_to(x, "ue8m0")
    assert list(ours) == [2.0**-127, 2.0**-127, 2.0**-126]  # nearest power of two
    theirs = x.astype(ml_dtypes.float8_e8m0fnu).astype(np.float64)
    if ml_dtypes_before(0, 7):
        assert list(theirs) == [2.0**-126] * 3  # ml_dtypes 0.6 rounds the whole binade up
    else:
        assert list(theirs) == [2.0**-127, 2.0**-127, 2.0**-126]  # 0.7 rounds to nearest, as we do


def test_nan_and_inf_into_formats_without_nan() -> None:
    # ml_dtypes maps inf to ±max and NaN to a zero (sign flipped); precisionlab saturates inf by
    # default too, but raises on NaN unless told nan='zero' (which stores +0).
    x = np.array([np.inf, -np.inf], dtype=np.float32)
    for name in ("e2m1", "e2m3", "e3m2"):
        assert same_bits(pl.round_to(x, name), x.astype(peer_dtype(name)).astype(np.float32)).all()
        with pytest.raises(ValueError, match=name):
            pl.round_to(np.array([1.0, np.nan]), name)
        stored = pl.round_to(np.array([np.nan], dtype=np.float32), name, nan="zero")
        assert stored[0] == 0 and not np.signbit(stored[0])
        with np.errstate(invalid="ignore"):
            assert np.float32(np.nan).astype(peer_dtype(name)).astype(np.float32) == 0


def test_float64_input_rounds_once_where_ml_dtypes_0_6_double_rounds() -> None:
    # 1 + 2^-8 + 2^-40 lies just above the bf16 midpoint 1 + 2^-8: the exact answer rounds up.
    x = np.array([1 + 2.0**-8 + 2.0**-40])
    y = np.array([1 + 2.0**-4 + 2.0**-40])
    assert pl.round_to(x, "bf16")[0] == 1.0078125
    assert pl.round_to(y, "e4m3")[0] == 1.125
    theirs_bf16 = x.astype(ml_dtypes.bfloat16).astype(np.float64)[0]
    theirs_e4m3 = y.astype(ml_dtypes.float8_e4m3fn).astype(np.float64)[0]
    if ml_dtypes_before(0, 7):  # via float32: the sum becomes the tie, which goes to even
        assert (theirs_bf16, theirs_e4m3) == (1.0, 1.0)
    else:  # 0.7 rounds float64 directly
        assert (theirs_bf16, theirs_e4m3) == (1.0078125, 1.125)


def test_torch_float64_casts_also_round_twice() -> None:
    torch = pytest.importorskip("torch")
    x = torch.tensor([1 + 2.0**-8 + 2.0**-40], dtype=torch.float64)
    y = torch.tensor([1 + 2.0**-4 + 2.0**-40], dtype=torch.float64)
    assert x.to(torch.bfloat16).item() == 1.0 and y.to(torch.float8_e4m3fn).item() == 1.0
    assert pl.round_to(x, "bf16").item() == 1.0078125 and pl.round_to(y, "e4m3").item() == 1.125


def test_torch_cast_peer_policies() -> None:
    torch = pytest.importorskip("torch")
    x = torch.tensor([500.0, 1e6, -1e6, float("inf")], dtype=torch.float32)
    native = x.to(torch.float8_e4m3fn).to(torch.float32)
    # torch 2.13's CPU cast saturates finite overflow to ±448, as PTX .satfinite and Triton do;
    # ml_dtypes and precisionlab's default give NaN; overflow='saturate' matches torch.
    ours = pl.round_to(x, "e4m3", overflow="saturate")
    assert torch.equal(ours[:3], native[:3])
    assert torch.isnan(pl.round_to(x, "e4m3")[:3]).all()
    assert ours[3].item() == 448.0  # under saturate, inf goes to max_finite too
