"""PTQ numerics without a model: input statistics, layer-output error, AWQ's search and clipping,
SmoothQuant's scales and W8A8 product, LLM.int8()'s decomposition, KIVI's quantizer and bytes.

Expected values come from direct computations written here (the activations kept whole, integer
codes formed by hand from the documented rules, hand-counted bytes), never from the code under test.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from precisionlab.ptq.activations import InputStatistics, output_error, relative_error
from precisionlab.ptq.awq import (
    candidate_scales,
    clip_applies,
    layer_guard,
    linear_objective,
    search_clip,
    search_scales,
    weight_magnitude,
)
from precisionlab.ptq.llm_int8 import fp16_output, llm_int8_matmul
from precisionlab.ptq.smoothquant import check_w8a8, search_alpha, smoothing_scales, w8a8_output
from precisionlab.quant import parse_scheme, quantize


def outlier_inputs(tokens: int = 256, n: int = 96, seed: int = 0, outliers: tuple[int, ...] = (3, 40, 77),
                   size: float = 20.0) -> np.ndarray:
    """Activations with a few channels that are large in every token (the pattern of LLM activations)."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((tokens, n)).astype(np.float32)
    x[:, list(outliers)] *= size
    return x


def weight(m: int = 64, n: int = 96, seed: int = 1) -> np.ndarray:
    return (np.random.default_rng(seed).standard_normal((m, n)) * 0.05).astype(np.float32)


# --------------------------------------------------------------------------- statistics
def test_running_statistics_equal_the_whole_batch_computation() -> None:
    x = outlier_inputs(300, 24, outliers=(2, 9))
    stats = InputStatistics(24, keep=50)
    for part in np.array_split(x, 7):
        stats.add(part.reshape(1, -1, 24))  # (batch, tokens, features) like a model's hidden states
    x64 = x.astype(np.float64)
    assert stats.n == 300
    h = 2 * x64.T @ x64 / 300
    assert np.allclose(stats.hessian(), h, rtol=1e-6, atol=1e-6 * np.abs(h).max())  # float32 batch products
    assert np.allclose(stats.mean_abs(), np.abs(x64).mean(axis=0))
    assert np.array_equal(stats.abs_max, np.abs(x64).max(axis=0))
    kept = stats.samples
    assert kept.shape == (50, 24)
    assert all(any(np.array_equal(row, r) for r in x) for row in kept)  # a subset of the real tokens
    assert len({row.tobytes() for row in kept}) == 50


def test_the_sample_covers_the_whole_stream_and_repeats_itself() -> None:
    x = np.arange(4000, dtype=np.float32).reshape(-1, 1)
    a, b = InputStatistics(1, keep=200), InputStatistics(1, keep=200)
    for part in np.array_split(x, 20):
        a.add(part)
        b.add(part)
    assert np.array_equal(a.samples, b.samples)  # seeded
    picked = np.sort(a.samples[:, 0])
    assert picked[-1] > 3000 and picked[0] < 1000  # not just the first tokens
    assert 1500 < picked.mean() < 2500


def test_output_error_from_statistics_equals_the_error_on_the_activations() -> None:
    x = outlier_inputs(200, 96)
    w = weight()
    b = np.random.default_rng(2).standard_normal(64).astype(np.float32)
    w_hat = quantize(w, "int4:g32").dequantize()
    stats = InputStatistics(96)
    stats.add(x)
    y = x.astype(np.float64) @ w.T.astype(np.float64) + b
    y_hat = x.astype(np.float64) @ w_hat.T.astype(np.float64) + b
    direct = np.linalg.norm(y_hat - y) / np.linalg.norm(y)
    assert output_error(w, w_hat, stats, b) == pytest.approx(direct, rel=1e-5)  # float32 quadratic forms
    assert relative_error(y, y_hat) == pytest.approx(direct, rel=1e-12)


def test_statistics_refuse_bad_input() -> None:
    stats = InputStatistics(4)
    with pytest.raises(ValueError, match="4 features"):
        stats.add(np.zeros((3, 5)))
    with pytest.raises(ValueError, match="NaN"):
        stats.add(np.array([[1.0, np.nan, 0, 0]]))
    with pytest.raises(ValueError, match="no calibration tokens"):
        stats.hessian()


# --------------------------------------------------------------------------- AWQ
def test_awq_candidates_follow_the_formula() -> None:
    rng = np.random.default_rng(0)
    x_mean = rng.uniform(0.1, 5.0, 32)
    w_mean = rng.uniform(0.05, 0.9, 32)
    cands = candidate_scales(x_mean, w_mean)
    assert [a for a, _ in cands] == [i / 20 for i in range(20)]
    alpha, s = cands[7]
    raw = np.maximum(x_mean**alpha / (w_mean ** (1 - alpha) + 1e-4), 1e-4)
    assert np.allclose(s, raw / math.sqrt(raw.max() * raw.min()))
    plain = candidate_scales(x_mean, w_mean, duo_scaling=False)
    assert np.allclose(plain[0][1], 1.0)  # alpha = 0 without duo scaling is no scaling at all


def test_weight_magnitude_is_normalised_per_quant_group() -> None:
    w = np.array([[1.0, -2.0, 4.0, 0.5], [2.0, 2.0, -1.0, 1.0]])
    got = weight_magnitude([w], parse_scheme("int4:g2"))
    amax = np.array([[2, 2, 4, 4], [2, 2, 1, 1]])  # per row and group of two
    groups = np.array([[0.5, 1.0, 1.0, 0.125], [1.0, 1.0, 1.0, 1.0]]) / (1 + 1e-6 / amax)
    assert np.allclose(got, groups.mean(axis=0), rtol=1e-5)


def test_awq_search_protects_salient_channels_and_never_loses_to_rtn() -> None:
    x = outlier_inputs(512, 96, size=8.0)
    w = weight()
    stats = InputStatistics(96)
    stats.add(x)
    scheme = parse_scheme("int4:g32")
    loss = linear_objective([w], stats, scheme)
    found = search_scales(stats.mean_abs(), [w], scheme, loss)
    assert found.loss <= found.identity_loss
    assert found.alpha is not None and found.loss < 0.9 * found.identity_loss
    assert found.scales[[3, 40, 77]].min() > np.median(found.scales)  # the large channels get scaled up
    # a loss that s = 1 wins is kept as plain RTN
    flat = search_scales(stats.mean_abs(), [w], scheme, lambda s: 0.0 if s is None else 1.0)
    assert flat.alpha is None and np.all(flat.scales == 1.0)


def test_the_guard_refuses_a_scale_that_hurts_one_layer() -> None:
    x = outlier_inputs(512, 96, size=8.0)
    stats = InputStatistics(96)
    stats.add(x)
    scheme = parse_scheme("int4:g32")
    w = weight()
    guard = layer_guard([w], stats, scheme)
    assert guard(np.ones(96))
    bad = np.ones(96)
    bad[[3, 40, 77]] = 1e-3  # shrinking the salient channels' weights makes their rounding worse
    assert not guard(bad)


def test_clipping_lowers_each_groups_error_and_needs_single_row_groups() -> None:
    rng = np.random.default_rng(4)
    w = (rng.standard_t(3, (32, 128)) * 0.02).astype(np.float32)  # heavy tails: clipping pays
    x = rng.standard_normal((400, 128))
    xtx = x.T @ x
    clipped, ratios = search_clip(w, xtx, "int4:g64")
    assert ratios.shape == (32, 2) and (ratios < 1).any() and (ratios >= 0.55).all()

    def group_errors(q_weight: np.ndarray, k: int) -> np.ndarray:
        sl = slice(64 * k, 64 * (k + 1))
        d = quantize(q_weight, "int4:g64").dequantize().astype(np.float64)[:, sl] - w[:, sl]
        return np.einsum("ij,jk,ik->i", d, xtx[sl, sl], d)

    for k in range(2):  # every (row, group) is no worse than unclipped RTN, some are better
        assert (group_errors(clipped, k) <= group_errors(w, k) * (1 + 1e-9)).all()
    assert sum(group_errors(clipped, k).sum() for k in range(2)) < sum(group_errors(w, k).sum() for k in range(2))
    assert clip_applies(parse_scheme("mxfp4"), (32, 128))
    assert not clip_applies(parse_scheme("int4"), (32, 128))
    with pytest.raises(ValueError, match="single-row"):
        search_clip(w, xtx, "int4:block16x64")


# --------------------------------------------------------------------------- SmoothQuant
def test_smoothing_scales_follow_the_formula() -> None:
    act = np.array([10.0, 0.5, 0.0, 2.0])
    w1 = np.array([[0.1, -0.4, 1.0, 0.2]])
    w2 = np.array([[-0.3, 0.2, 0.5, 0.0]])
    s = smoothing_scales(act, [w1, w2], alpha=0.5)
    wmax = np.array([0.3, 0.4, 1.0, 0.2])
    expected = np.sqrt(act) / np.sqrt(wmax)
    expected[2] = 1.0  # a channel that never fires keeps s = 1
    assert np.allclose(s, expected)
    with pytest.raises(ValueError, match="alpha"):
        smoothing_scales(act, [w1], alpha=1.5)


def test_w8a8_product_equals_an_integer_gemm_written_by_hand() -> None:
    """Per-token int8 activations x per-tensor int8 weights, codes and fp16 scales from the documented rule."""
    x = outlier_inputs(64, 96).astype(np.float64)
    w = weight().astype(np.float64)
    s_x = np.float16(np.abs(x).max(axis=1) / 127).astype(np.float64)
    q_x = np.clip(np.rint(x / s_x[:, None]), -127, 127)
    s_w = float(np.float16(np.abs(w).max() / 127))
    q_w = np.clip(np.rint(w / s_w), -127, 127)
    by_hand = (q_x @ q_w.T) * s_x[:, None] * s_w
    got = w8a8_output(x.astype(np.float32), w.astype(np.float32), parse_scheme("int8"), parse_scheme("int8:row"))
    # x / s is taken in float32 by the library (float32 input); allow the rare code that a tie flips
    assert relative_error(by_hand, got) < 1e-4


def test_smoothing_reduces_per_tensor_w8a8_error_on_outlier_channels() -> None:
    x = outlier_inputs(512, 96, size=30.0)
    w = weight()
    y = x.astype(np.float64) @ w.T.astype(np.float64)
    ws, acts = parse_scheme("int8"), parse_scheme("int8")
    s = smoothing_scales(np.abs(x).max(axis=0), [w], 0.5)
    plain = relative_error(y, w8a8_output(x, w, ws, acts))
    smooth = relative_error(y, w8a8_output(x, w, ws, acts, col_scales=s))
    assert smooth < 0.5 * plain
    # folding alone is exact: X diag(1/s) (W diag(s))^T = X W^T
    assert np.allclose((x / s) @ (w * s).T, y, rtol=1e-4, atol=1e-5)
    alpha, scales = search_alpha([x], [w], np.abs(x).max(axis=0), ws, acts)
    assert alpha is not None
    assert relative_error(y, w8a8_output(x, w, ws, acts, col_scales=scales)) <= smooth * (1 + 1e-12)


@pytest.mark.parametrize(("weight_scheme", "act_scheme", "message"), [
    ("int4:g128", None, "W8A8"),
    ("int8", "int4:row", "activation scheme"),
    ("int8", "int8:col", "per-channel"),
])
def test_smoothquant_refuses_schemes_that_are_not_w8a8(weight_scheme: str, act_scheme: str | None,
                                                       message: str) -> None:
    with pytest.raises(ValueError, match=message):
        check_w8a8(weight_scheme, act_scheme)


def test_w8a8_defaults_to_per_token_activations_of_the_weight_element() -> None:
    assert str(check_w8a8("int8")[1]) == "int8:row"
    assert str(check_w8a8("e4m3")[1]) == "e4m3:row"


# --------------------------------------------------------------------------- LLM.int8()
def bnb_reference(x: np.ndarray, w: np.ndarray, threshold: float) -> tuple[np.ndarray, np.ndarray]:
    """The decomposition by hand: fp32 absmax / 127 scales, rint, int64 sums, fp16 outlier part."""
    cols = np.flatnonzero(np.abs(x).max(axis=0) >= threshold)
    reg = x.astype(np.float32).copy()
    reg[:, cols] = 0
    s_x = (np.abs(reg).max(axis=1) / np.float32(127)).astype(np.float32)
    s_x = np.where(s_x == 0, np.float32(1), s_x)
    s_w = (np.abs(w).max(axis=1) / np.float32(127)).astype(np.float32)
    c_x = np.clip(np.rint(reg / s_x[:, None]), -127, 127).astype(np.int64)
    c_w = np.clip(np.rint(w / s_w[:, None]), -127, 127).astype(np.int64)
    y = (c_x @ c_w.T).astype(np.float64) * s_x[:, None].astype(np.float64) * s_w[None, :].astype(np.float64)
    w_deq = (c_w.astype(np.float32) * s_w[:, None]).astype(np.float32)
    y += x[:, cols].astype(np.float16).astype(np.float64) @ w_deq[:, cols].astype(np.float16).astype(np.float64).T
    return y, cols


def test_llm_int8_equals_the_decomposition_by_hand() -> None:
    x = outlier_inputs(128, 96, size=10.0)
    w = weight()
    got = llm_int8_matmul(x, w)
    expected, cols = bnb_reference(x, w, 6.0)
    assert np.array_equal(got.outlier_columns, cols) and list(cols) == [3, 40, 77]
    assert np.allclose(got.output, expected, rtol=1e-12, atol=1e-12)


def test_llm_int8_reproduces_fp16_with_outliers_where_plain_int8_does_not() -> None:
    x = outlier_inputs(256, 96, size=25.0)
    w = weight()
    reference = fp16_output(x, w)
    mixed = llm_int8_matmul(x, w)
    plain = llm_int8_matmul(x, w, threshold=math.inf)
    assert mixed.outlier_columns.size == 3 and plain.outlier_columns.size == 0
    assert relative_error(reference, mixed.output) < 1e-2
    assert relative_error(reference, plain.output) > 2 * relative_error(reference, mixed.output)
    paper = llm_int8_matmul(x, w, outlier_weights="fp16")
    assert relative_error(reference, paper.output) <= relative_error(reference, mixed.output)


def test_llm_int8_refuses_bad_arguments() -> None:
    with pytest.raises(ValueError, match="threshold"):
        llm_int8_matmul(np.ones((2, 4)), np.ones((3, 4)), threshold=0)
    with pytest.raises(ValueError, match="4 input columns"):
        llm_int8_matmul(np.ones((2, 5)), np.ones((3, 4)))
    with pytest.raises(ValueError, match="outlier_weights"):
        llm_int8_matmul(np.ones((2, 4)), np.ones((3, 4)), outlier_weights="bf16")
