"""precisionlab's LLM.int8() against bitsandbytes' own, on its CPU backend.

Expected values come from bitsandbytes: its `int8_vectorwise_quant` (outlier columns, int8 codes and
absmax statistics of weights and activations), its `Linear8bitLt` (has_fp16_weights=False, threshold
6.0, eval mode: the inference path `MatMul8bitLt`) for the layer output, and its `int8_scaled_mm` for the
fp16 int8 part the output tolerance is derived from. Inputs and weights are fp16 values (bitsandbytes
casts both to fp16 before quantizing), with planted outlier columns.

What bitsandbytes 0.50 does that precisionlab's default does not (found here, see ptq.llm_int8): it
zeroes only the entries with |x| >= threshold before a token's absmax, so an outlier column's entries
below the threshold still set the token scale; `token_absmax="entries"` reproduces that.
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import numpy as np
import pytest

from precisionlab.ptq.llm_int8 import int8_codes, llm_int8_matmul, quantize_weight
from precisionlab.quant import quantize

torch = pytest.importorskip("torch", reason="the bitsandbytes cross-check needs torch")
bnb = pytest.importorskip("bitsandbytes",
                          reason="the LLM.int8() cross-check needs bitsandbytes (pip install bitsandbytes)")

THRESHOLD = 6.0
TOKENS, FEATURES, OUT = 48, 192, 80
PLANTED = (3, 77, 150)
# float32 rounding: bitsandbytes computes round(x * fp32(127 / absmax)) (two float32 roundings, each at most
# 2^-24 relative), precisionlab rounds the exact quotient x / fp32(absmax / 127) (one, on the scale). The
# two codes can differ only where the exact quotient x * 127 / absmax (at most 127 in magnitude) lies within
# 127 * 3 * 2^-24 of a half-integer, and then by one.
TIE_WINDOW = 127 * 3 * 2.0**-24


def _bnb_runs_on_cpu() -> str | None:
    try:
        layer = _bnb_layer(np.ones((4, 8), np.float32))
        with torch.no_grad():
            layer(torch.ones((2, 8), dtype=torch.float16))
    except Exception as exc:  # any failure of the peer's CPU path is a skip, with its reason
        return f"bitsandbytes' LLM.int8() does not run on this CPU: {type(exc).__name__}: {exc}"
    return None


def _bnb_layer(w: np.ndarray) -> Any:
    layer = bnb.nn.Linear8bitLt(w.shape[1], w.shape[0], bias=False, has_fp16_weights=False, threshold=THRESHOLD)
    layer.weight = bnb.nn.Int8Params(torch.from_numpy(w.copy()), requires_grad=False, has_fp16_weights=False)
    return layer.to("cpu").eval()  # the move quantizes the weight; eval selects the inference path (MatMul8bitLt)


@pytest.fixture(scope="module", autouse=True)
def _peer() -> None:
    reason = _bnb_runs_on_cpu()
    if reason:
        pytest.skip(reason)


def _fp16_values(a: np.ndarray) -> np.ndarray:
    return a.astype(np.float16).astype(np.float32)


def _inputs(planted: bool) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(7)
    x = rng.standard_normal((TOKENS, FEATURES))
    if planted:
        x[:, list(PLANTED)] *= 9.0   # columns most of whose entries cross 6.0, some below it
        x[5, 20] = THRESHOLD         # exactly at the threshold: an outlier (|x| >= threshold)
        x[9, 21] = -THRESHOLD        # the sign does not matter
        x[11, 22] = np.nextafter(np.float16(THRESHOLD), np.float16(0))  # the fp16 value just below: not one
    else:
        x = x * (5.5 / np.abs(x).max())  # nothing reaches the threshold
    w = rng.standard_normal((OUT, FEATURES)) * 0.05
    return _fp16_values(x), _fp16_values(w)


def _bnb_quant(a: np.ndarray, threshold: float = 0.0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """bitsandbytes' codes (int64), absmax statistics (float32) and outlier columns of fp16(a)."""
    codes, stats, cols = bnb.functional.int8_vectorwise_quant(torch.from_numpy(a).half(), threshold=threshold)
    cols_np = np.empty(0, np.int64) if cols is None else cols.numpy().astype(np.int64)
    return codes.numpy().astype(np.int64), stats.numpy(), cols_np


def _bnb_output(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    with torch.no_grad():
        return _bnb_layer(w)(torch.from_numpy(x).half()).double().numpy()


def _near_ties(values: np.ndarray, absmax: np.ndarray, where: np.ndarray) -> list[float]:
    """Distance of the exact quotient values[i, j] * 127 / absmax[i] to the nearest half-integer, at `where`."""
    out = []
    for i, j in where:
        q = Fraction(float(values[i, j])) * 127 / Fraction(float(absmax[i]))
        out.append(abs(float(q - (q.numerator // q.denominator)) - 0.5))
    return out


def _assert_codes_agree(ours: np.ndarray, theirs: np.ndarray, values: np.ndarray, absmax: np.ndarray) -> int:
    differ = np.argwhere(ours != theirs)
    assert np.all(np.abs(ours - theirs)[ours != theirs] == 1)
    assert all(d <= TIE_WINDOW for d in _near_ties(values, absmax, differ)), "a code differs away from a tie"
    return len(differ)


# --------------------------------------------------------------------------- outlier columns
def test_outlier_columns_are_bitsandbytes_set() -> None:
    x, w = _inputs(planted=True)
    _, _, cols = _bnb_quant(x.copy(), THRESHOLD)
    assert set(cols) == set(PLANTED) | {20, 21}  # the planted columns and the two entries at exactly 6.0
    for token_absmax in ("columns", "entries"):
        ours = llm_int8_matmul(x, w, THRESHOLD, token_absmax=token_absmax).outlier_columns
        assert sorted(ours) == sorted(cols)


def test_no_outlier_columns_below_threshold() -> None:
    x, w = _inputs(planted=False)
    _, _, cols = _bnb_quant(x.copy(), THRESHOLD)
    assert cols.size == 0
    assert llm_int8_matmul(x, w, THRESHOLD).outlier_columns.size == 0


# --------------------------------------------------------------------------- int8 codes
def test_weight_codes_and_scales_agree_up_to_ties() -> None:
    _, w = _inputs(planted=True)
    codes, absmax, _ = _bnb_quant(w)
    wq = quantize_weight(w)
    assert np.array_equal(wq.scales.ravel(), absmax / np.float32(127))
    differ = _assert_codes_agree(int8_codes(wq), codes, w, absmax)
    # fp16 weights hit exact ties (w = absmax / 2 gives 63.5): precisionlab rounds them to even, bitsandbytes'
    # float32 product lands on either side; well under 1 in 1000 codes here
    assert differ <= w.size // 1000


@pytest.mark.parametrize("planted", [True, False])
def test_activation_codes_agree_with_entries_absmax(planted: bool) -> None:
    x, _ = _inputs(planted)
    codes, absmax, cols = _bnb_quant(x.copy(), THRESHOLD)
    regular = x.copy()
    regular[np.abs(x) >= THRESHOLD] = 0.0          # the rule of token_absmax="entries"
    q = quantize(regular, "int8:row:scale=fp32")
    assert np.array_equal(q.scales.ravel(), absmax / np.float32(127))
    ours = int8_codes(q).copy()
    ours[:, cols] = 0
    assert _assert_codes_agree(ours, codes, regular, absmax) <= x.size // 1000


def test_default_absmax_differs_from_bitsandbytes_where_an_outlier_column_sets_the_scale() -> None:
    """The paper's split (the default) takes each token's absmax over the non-outlier columns only:
    finer than bitsandbytes' exactly on the tokens whose largest entry below the threshold is in an
    outlier column, equal on the rest."""
    x, _ = _inputs(planted=True)
    _, absmax, cols = _bnb_quant(x.copy(), THRESHOLD)
    kept = np.delete(x, cols, axis=1)
    ours = quantize(np.where(np.isin(np.arange(x.shape[1]), cols), 0.0, x), "int8:row:scale=fp32").scales.ravel()
    set_by_outlier_column = np.abs(kept).max(axis=1) < absmax
    assert set_by_outlier_column.sum() >= TOKENS // 4   # the planted columns do this on many tokens
    assert np.all(ours[set_by_outlier_column] < absmax[set_by_outlier_column] / np.float32(127))
    assert np.array_equal(ours[~set_by_outlier_column], absmax[~set_by_outlier_column] / np.float32(127))


# --------------------------------------------------------------------------- outputs
def _output_tolerance(x: np.ndarray, w: np.ndarray, y_bnb: np.ndarray) -> np.ndarray:
    """Elementwise bound on |precisionlab - bitsandbytes| when both compute the same decomposition:

    - bitsandbytes rounds its int8 part to fp16 and then the sum with the outlier product to fp16:
      half an fp16 ulp of each (precisionlab keeps both in float64);
    - its int8 scale is fp32(row * col) * fp32(6.200124e-05) (that constant is 1/127^2 (1 + 1.8e-5)) against
      precisionlab's float64 s_x s_w: 1.81e-5 plus four float32 roundings (2^-24 each) of the int8 part;
    - the fp16 outlier weights fp16(code * absmax * fp32(1/127)) and fp16(code * fp32(absmax / 127)) may differ by
      one fp16 ulp (2^-10 relative) each, and its fp16 product accumulates in float32 (2^-24 per term):
      (2^-10 + |O| 2^-24) sum_O |x| |w~|;
    - a code that differs at a tie changes the integer sum by that tie's partner code, and a weight code of an
      outlier column the fp16 product by |x| times one weight step.
    """
    ca, sa, cols = _bnb_quant(x.copy(), THRESHOLD)
    cb, sb, _ = _bnb_quant(w)
    y_i8 = torch.ops.bitsandbytes.int8_scaled_mm.default(
        torch.from_numpy(ca.astype(np.int8)), torch.from_numpy(cb.astype(np.int8)),
        torch.from_numpy(sa), torch.from_numpy(sb), dtype=torch.float16).double().numpy()
    half_ulp = lambda a: np.spacing(np.abs(a).astype(np.float16)).astype(np.float64) / 2  # noqa: E731
    tol = half_ulp(y_i8) + half_ulp(y_bnb) + (1.81e-5 + 4 * 2.0**-24) * np.abs(y_i8)
    if cols.size:
        w_dq = cb[:, cols] * (sb[:, None].astype(np.float64) / 127)
        tol += (2.0**-10 + cols.size * 2.0**-24) * (np.abs(x[:, cols]).astype(np.float64) @ np.abs(w_dq).T)
    regular = x.copy()
    regular[np.abs(x) >= THRESHOLD] = 0.0
    ours_a = int8_codes(quantize(regular, "int8:row:scale=fp32")).copy()
    ours_a[:, cols] = 0
    d_a = (ours_a != ca).astype(np.float64)
    d_w = (int8_codes(quantize_weight(w)) != cb).astype(np.float64)
    ties = d_a @ np.abs(cb).T.astype(np.float64) + np.abs(ca).astype(np.float64) @ d_w.T
    tol += ties * (sa[:, None].astype(np.float64) / 127) * (sb[None, :].astype(np.float64) / 127)
    if cols.size:
        steps = d_w[:, cols] * (sb[:, None].astype(np.float64) / 127) * (1 + 2.0**-10)
        tol += np.abs(x[:, cols]).astype(np.float64) @ steps.T
    return tol


@pytest.mark.parametrize("planted", [True, False])
def test_output_matches_bitsandbytes_within_fp16_rounding(planted: bool) -> None:
    x, w = _inputs(planted)
    y_bnb = _bnb_output(x, w)
    ours = llm_int8_matmul(x, w, THRESHOLD, token_absmax="entries").output
    tol = _output_tolerance(x, w, y_bnb)
    assert np.all(np.abs(ours - y_bnb) <= tol)
    # the bound is tight enough to mean something: at most a few fp16 ulps of the output
    assert np.median(tol / np.maximum(np.spacing(np.abs(y_bnb).astype(np.float16)), 2.0**-24)) <= 4


def test_default_output_differs_from_bitsandbytes_with_planted_outliers() -> None:
    """The default (the paper's split) is not bitsandbytes' rule: the same bound fails on some outputs."""
    x, w = _inputs(planted=True)
    y_bnb = _bnb_output(x, w)
    ours = llm_int8_matmul(x, w, THRESHOLD).output
    assert np.mean(np.abs(ours - y_bnb) > _output_tolerance(x, w, y_bnb)) > 0.1


def test_unknown_token_absmax_is_refused() -> None:
    x, w = _inputs(planted=False)
    with pytest.raises(ValueError, match="token_absmax"):
        llm_int8_matmul(x, w, THRESHOLD, token_absmax="rows")
