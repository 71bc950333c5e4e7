"""Floored scales and clipped elements: counted on the result, warned above the documented thresholds, and
round-up scale rounding. Expected counts come from a per-block reference written here with ml_dtypes' e4m3."""

from __future__ import annotations

import json
import math
import warnings
from pathlib import Path

import numpy as np
import pytest

from precisionlab.quant import QuantizationWarning, error_metrics, parse_scheme, quantize
from precisionlab.quant.diagnostics import CLIPPED_WARN_FRACTION, FLOORED_WARN_FRACTION

ml_dtypes = pytest.importorskip("ml_dtypes")
E4M3 = ml_dtypes.float8_e4m3fn
E4M3_SMALLEST = 2.0**-9  # e4m3's smallest subnormal: 2^(1 - 7) * 2^-3


@pytest.fixture(scope="module")
def weights() -> np.ndarray:
    return (np.random.default_rng(0).standard_normal((256, 1024)) * 0.02).astype(np.float32)


def quiet(x: np.ndarray, scheme: str):  # type: ignore[no-untyped-def]
    """quantize with its QuantizationWarnings collected: (q, [messages])."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", QuantizationWarning)
        q = quantize(x, scheme)
    return q, [str(w.message) for w in caught if issubclass(w.category, QuantizationWarning)]


def test_int8_rows_with_e4m3_scales_are_all_floored(weights: np.ndarray) -> None:
    # N(0, 0.02^2) rows: amax ~ 0.08, so amax / 127 ~ 6e-4 is below e4m3's smallest value 2^-9 in every row
    ideal = np.abs(weights).max(axis=1).astype(np.float64) / 127
    assert (ideal < E4M3_SMALLEST).all()
    q, messages = quiet(weights, "int8:row:scale=e4m3")
    assert q.diagnostics is not None
    assert (q.diagnostics.blocks, q.diagnostics.floored_blocks) == (256, 256)
    assert (q.scales == E4M3_SMALLEST).all()
    # the floored scale is larger than needed: codes reach only rint(amax / 2^-9), about 51 of the 127
    codes = q.codes.view(np.int8).astype(np.int64)
    top = int(np.rint(np.abs(weights).max() / E4M3_SMALLEST))
    assert np.abs(codes).max() == top < 64
    assert len(messages) == 1 and "100% of the scales (256 of 256 blocks) are floored" in messages[0]
    fp16 = quantize(weights, "int8:row")  # fp16 scales: no floor, a third of the error
    assert fp16.diagnostics is not None and fp16.diagnostics.floored_blocks == 0
    assert error_metrics(weights, q).rel_err > 3 * error_metrics(weights, fp16).rel_err


def _clipped_by_hand(x: np.ndarray, group: int, up: bool) -> tuple[int, np.ndarray]:
    """Per g-group: s = e4m3(amax / 7) by ml_dtypes (nearest) or the smallest e4m3 >= amax / 7 (up); an element
    clips when |x| > 7.5 s (beyond the largest code by more than half a step)."""
    amax = np.abs(x.reshape(x.shape[0], -1, group)).max(axis=2).astype(np.float64)
    ideal = amax / 7
    s = ideal.astype(E4M3).astype(np.float64)
    if up:
        codes = ideal.astype(E4M3).view(np.uint8)
        s = np.where(s < ideal, (codes + 1).astype(np.uint8).view(E4M3).astype(np.float64), s)
    s = np.where(s == 0, E4M3_SMALLEST, s)
    limit = np.repeat(7.5 * s, group, axis=1)
    return int(np.count_nonzero(np.abs(x.astype(np.float64)) > limit)), s


def test_int4_g32_e4m3_clips_and_round_up_does_not(weights: np.ndarray) -> None:
    expected, s_nearest = _clipped_by_hand(weights, 32, up=False)
    q, messages = quiet(weights, "int4:g32:scale=e4m3")
    assert q.diagnostics is not None and q.diagnostics.clipped_elements == expected
    assert q.diagnostics.clipped_fraction == expected / weights.size > 0.01  # the 1.1%
    np.testing.assert_array_equal(q.scales, s_nearest)
    assert len(messages) == 1 and "of the elements" in messages[0] and "scaleround=up" in messages[0]
    assert error_metrics(weights, q).frac_clipped == q.diagnostics.clipped_fraction
    none, s_up = _clipped_by_hand(weights, 32, up=True)
    up, messages = quiet(weights, "int4:g32:scale=e4m3:scaleround=up")
    assert none == 0 and up.diagnostics is not None and up.diagnostics.clipped_elements == 0 and not messages
    np.testing.assert_array_equal(up.scales, s_up)
    ideal = np.abs(weights.reshape(256, -1, 32)).max(axis=2) / 7
    assert (up.scales >= ideal).all() and (up.scales > q.scales).any()


@pytest.mark.parametrize(("scale", "ideal", "nearest", "up"), [
    ("fp16", 1.0 + 2.0**-11 + 2.0**-20, 1.0 + 2.0**-10, 1.0 + 2.0**-10),  # just past the midpoint: both go up
    ("fp16", 1.0 + 2.0**-12, 1.0, 1.0 + 2.0**-10),                          # below the midpoint: nearest goes down
    ("bf16", 3.0 + 2.0**-9, 3.0, 3.015625),
    ("e4m3", 0.30, 0.3125, 0.3125),                                           # e4m3 0.28125, 0.3125 around 0.30
    ("e4m3", 0.29, 0.28125, 0.3125),
    ("e4m3", 500.0, 448.0, 448.0),                                             # past the max: saturates either way
    ("e4m3", 1e-4, E4M3_SMALLEST, E4M3_SMALLEST),                              # below the smallest: the floor
    ("fp32", 1.0 + 2.0**-30, 1.0, 1.0 + 2.0**-23),
])
def test_round_up_of_one_scale(scale: str, ideal: float, nearest: float, up: float) -> None:
    # one symmetric int8 block whose amax is 127 * ideal (exact in float64): the stored scale is the rounding
    x = np.array([[127 * ideal, -1e-3]])
    near, _ = quiet(x, f"int8:row:scale={scale}")
    upward, _ = quiet(x, f"int8:row:scale={scale}:scaleround=up")
    assert float(near.scales[0, 0]) == nearest and float(upward.scales[0, 0]) == up


def test_mx_floor_clipping_is_counted_not_warned(weights: np.ndarray) -> None:
    # FLOOR (the OCP rule) clips by its definition; RCEIL is the rule that never clips
    q, messages = quiet(weights, "mxfp4")
    assert q.diagnostics is not None and q.diagnostics.clipped_fraction > CLIPPED_WARN_FRACTION and not messages
    assert error_metrics(weights, q).frac_clipped == q.diagnostics.clipped_fraction
    rceil, _ = quiet(weights, "mxfp4:rceil")
    assert rceil.diagnostics is not None and rceil.diagnostics.clipped_elements == 0


def test_warning_thresholds() -> None:
    # 200 rows with fp16 scales: a row of amax 2^-30 needs a scale of 2^-30 / 127, below fp16's 2^-24
    assert FLOORED_WARN_FRACTION == 0.01 and CLIPPED_WARN_FRACTION == 0.001
    x = np.ones((200, 8), dtype=np.float32)
    x[:2] = 2.0**-30  # 2 of 200 blocks = 1%: not more than the threshold
    q, messages = quiet(x, "int8:row")
    assert q.diagnostics is not None and q.diagnostics.floored_blocks == 2 and not messages
    x[2] = 2.0**-30  # 3 of 200 = 1.5%
    q, messages = quiet(x, "int8:row")
    assert q.diagnostics is not None and q.diagnostics.floored_blocks == 3 and len(messages) == 1
    assert messages[0].startswith("int8:row: 1.5% of the scales (3 of 200 blocks) are floored")
    with pytest.warns(QuantizationWarning, match="floored"):  # the category a caller filters on
        quantize(x, "int8:row")


def test_nvfp4_minscale_normal_counts_its_floor() -> None:
    x = np.ones((4, 16), dtype=np.float32)
    x[1] = 1e-5  # amax / (6 g) = 1e-5 * 448: below 2^-6, the minscale=normal floor; above e4m3's 2^-9
    q, _ = quiet(x, "nvfp4:minscale=normal")
    assert q.diagnostics is not None and q.diagnostics.floored_blocks == 1 and q.scales[1, 0] == 2.0**-6
    sub, _ = quiet(x, "nvfp4")
    assert sub.diagnostics is not None and sub.diagnostics.floored_blocks == 0


def test_scaleround_grammar() -> None:
    s = parse_scheme("int4:g32:scale=e4m3:scaleround=up")
    assert s.scale_round == "up" and str(s) == "int4:g32:scale=e4m3:scaleround=up"
    assert parse_scheme(str(s)) == s
    assert str(parse_scheme("nvfp4:scaleround=up")) == "nvfp4:scaleround=up"
    assert str(parse_scheme("int8:scaleround=nearest")) == "int8"
    with pytest.raises(ValueError, match="ue8m0 scales follow the MX rule"):
        parse_scheme("mxfp4:scaleround=up")
    with pytest.raises(ValueError, match="scaleround must be 'nearest' or 'up', got 'down'"):
        parse_scheme("int8:scaleround=down")


def test_a_file_read_back_has_no_diagnostics(tmp_path: Path, weights: np.ndarray) -> None:
    from precisionlab.quant.safetensors_io import load_quantized, save_quantized

    save_quantized(tmp_path / "q.safetensors", {"w": quantize(weights, "int8:row")})
    assert load_quantized(tmp_path / "q.safetensors")["w"].diagnostics is None  # the source is needed


def test_compare_reports_and_warns_in_one_line(run_cli, tmp_path: Path, weights: np.ndarray) -> None:  # type: ignore[no-untyped-def]
    np.save(tmp_path / "w.npy", weights)
    result = run_cli("quant", "compare", str(tmp_path / "w.npy"), "-s", "int8:row:scale=e4m3,int4:g32:scale=e4m3",
                     "-s", "int8:row", "--json")
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    warned = [line for line in lines if line.startswith("warning: ")]
    assert len(warned) == 2 and not any("warnings.warn" in line or "QuantizationWarning" in line for line in lines)
    assert warned[0].startswith("warning: tensor 'w': int8:row:scale=e4m3: 100% of the scales (256 of 256 blocks)")
    payload = json.loads("\n".join(line for line in lines if not line.startswith("warning: ")))
    f = payload["findings"]
    assert f["compare.w.int8:row:scale=e4m3.frac_floored"] == 1.0
    assert f["compare.w.int4:g32:scale=e4m3.frac_clipped"] == pytest.approx(
        _clipped_by_hand(weights, 32, up=False)[0] / weights.size, rel=1e-12)
    assert f["compare.w.int8:row.frac_floored"] == 0.0 and f["compare.w.int8:row.frac_clipped"] == 0.0
    assert "floored" in payload["sections"][0]["columns"]
    assert math.isclose(f["compare.w.int8:row:scale=e4m3.bits_per_element"], 8 + 8 / 1024)


def test_save_warns_in_one_line(run_cli, tmp_path: Path, weights: np.ndarray) -> None:  # type: ignore[no-untyped-def]
    np.save(tmp_path / "w.npy", weights)
    result = run_cli("quant", "save", str(tmp_path / "w.npy"), "-s", "int8:row:scale=e4m3", "-o",
                     str(tmp_path / "q.safetensors"), "--json")
    assert result.exit_code == 0, result.output
    warned = [line for line in result.output.splitlines() if line.startswith("warning: ")]
    assert warned == [line for line in result.output.splitlines() if "floored" in line]
    assert len(warned) == 1 and warned[0].startswith("warning: tensor 'w': int8:row:scale=e4m3: 100% of the scales")


def test_full_range_negative_end_is_not_counted_as_clipped() -> None:
    """range=full uses the code -2^(b-1): a value just past -(2^(b-1) - 1/2)·s (the fp16 scale rounded down)
    lands on -8, not clipped; the clip bound is -8.5·s. By hand: fp16(1.1 / 7.5) = 1201·2^-13 < 1.1 / 7.5."""
    scale = 1201 * 2.0**-13
    assert np.float16(1.1 / 7.5) == np.float16(scale)
    x = np.zeros(32, dtype=np.float32)
    x[0] = -1.1
    q = quantize(x, "int4:g32:range=full")
    assert float(q.scales.reshape(-1)[0]) == scale
    assert q.codes.reshape(-1)[0] == 8  # -8 in 4-bit two's complement
    assert q.diagnostics is not None and q.diagnostics.clipped_elements == 0
