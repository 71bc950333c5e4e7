"""GPTQ against a direct reference of the published algorithm, on fixed layers, and its contracts.

The reference below is written from the paper's equations (Frantar et al., 2023, eqs. 2-3: the
OBS update with a fixed column order): for each column q in order, quantize it, move the
remaining columns F by delta_F = -(w_q - quant(w_q)) / [H^-1]_qq * (H^-1)_{q,F}, and remove q from
the inverse Hessian by one step of Gaussian elimination, H^-1 <- H^-1 - (H^-1)_{:,q} (H^-1)_{q,:} /
[H^-1]_qq. Everything in float64, the inverse formed explicitly with numpy (no Cholesky, no lazy
blocks), so it shares neither code nor the order of the arithmetic with the implementation.

Its integer grid is the quant library's documented rule (docs/quant.md) re-derived here: symmetric
s = fp16(amax / (2^(b-1) - 1)), q = clip(rint(x / s), -qmax, qmax); asymmetric lo = min(x_min, 0),
hi = max(x_max, 0), s = fp16((hi - lo) / (2^b - 1)), z = clip(qmin - rint(lo / s), qmin, qmax),
q = clip(rint(x / s) + z, qmin, qmax); numpy's float64 -> float16 cast rounds once, to nearest even.
"""

from __future__ import annotations

import numpy as np
import pytest

from precisionlab.ptq.gptq import gptq_quantize, inverse_hessian_factor
from precisionlab.quant import quantize


# --------------------------------------------------------------------------- the reference
def int_grid(values: np.ndarray, bits: int, asym: bool) -> tuple[np.ndarray, np.ndarray]:
    """Per-row (scale, zero point) of an (M, w) group of values."""
    qmax = 2 ** (bits - 1) - 1
    qmin = -(2 ** (bits - 1))
    if asym:
        lo = np.minimum(values.min(axis=1), 0.0)
        hi = np.maximum(values.max(axis=1), 0.0)
        s = np.float16((hi - lo) / (2**bits - 1)).astype(np.float64)
        z = np.clip(qmin - np.rint(lo / s), qmin, qmax)
    else:
        s = np.float16(np.abs(values).max(axis=1) / qmax).astype(np.float64)
        z = np.zeros_like(s)
    assert (s > 0).all(), "the reference grid assumes no all-zero group"
    return s, z


def int_codes(w: np.ndarray, s: np.ndarray, z: np.ndarray, bits: int, asym: bool) -> np.ndarray:
    qmax = 2 ** (bits - 1) - 1
    lo = -(2 ** (bits - 1)) if asym else -qmax
    return np.clip(np.rint(w / s) + z, lo, qmax)


def reference_gptq(weight: np.ndarray, hessian: np.ndarray, group: int, bits: int = 4, asym: bool = False,
                   damp: float = 0.01, order: np.ndarray | None = None,
                   static_groups: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """(integer codes (M, N), scales (M, groups)) of GPTQ by the paper's column-by-column equations."""
    w = weight.astype(np.float64).copy()
    m, n = w.shape
    h = hessian.astype(np.float64).copy()
    diag = np.diag(h).copy()
    dead = diag == 0
    if dead.any():  # a dead input is decoupled (its diagonal: the mean of the live ones)
        h[dead, :] = 0.0
        h[:, dead] = 0.0
        h[dead, dead] = diag[~dead].mean()
    h += damp * np.mean(np.diag(h)) * np.eye(n)
    hinv = np.linalg.inv(h)
    columns = list(range(n)) if order is None else [int(c) for c in order]
    n_groups = -(-n // group)
    scales = np.zeros((m, n_groups))
    zeros = np.zeros((m, n_groups))
    if static_groups:
        for g in range(n_groups):
            scales[:, g], zeros[:, g] = int_grid(w[:, g * group : (g + 1) * group], bits, asym)
    codes = np.zeros((m, n))
    remaining = list(columns)
    for q in columns:
        g = q // group
        if not static_groups and q % group == 0:  # the group's grid, from its current values
            scales[:, g], zeros[:, g] = int_grid(w[:, q : q + group], bits, asym)
        c = int_codes(w[:, q], scales[:, g], zeros[:, g], bits, asym)
        value = (c - zeros[:, g]) * scales[:, g]
        remaining.remove(q)
        delta = (w[:, q] - value) / hinv[q, q]
        if remaining:
            f = np.array(remaining)
            w[:, f] -= np.outer(delta, hinv[q, f])
        w[:, q] = value
        hinv = hinv - np.outer(hinv[:, q], hinv[q, :]) / hinv[q, q]
        codes[:, q] = c
    return codes.astype(np.int64), scales


def signed_codes(codes: np.ndarray, bits: int, n: int) -> np.ndarray:
    """Two's-complement b-bit codes (uint8) as signed integers, the first n columns."""
    c = codes[:, :n].astype(np.int64)
    return np.where(c >= 2 ** (bits - 1), c - 2**bits, c)


# --------------------------------------------------------------------------- fixed layers
def fixed_layer(m: int = 48, n: int = 320, tokens: int = 640, seed: int = 7) -> tuple[np.ndarray, np.ndarray]:
    """A seeded weight and the Hessian of correlated inputs with channels of very different scales."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((tokens, n)) * np.exp(rng.standard_normal(n))
    x[:, : n // 4] += 0.7 * x[:, n // 4 : n // 2]
    w = (rng.standard_normal((m, n)) * 0.05).astype(np.float32)
    return w, 2.0 * x.T @ x / tokens


def layer_error(w: np.ndarray, w_hat: np.ndarray, h: np.ndarray) -> float:
    d = w_hat.astype(np.float64) - w
    return float(np.sqrt(np.trace(d @ h @ d.T) / np.trace(w @ h @ w.T)))


@pytest.mark.parametrize(("scheme", "group", "asym"), [
    ("int4:g128", 128, False),     # groups aligned with the 128-column blocks
    ("int4:g32:asym", 32, True),   # several groups per block, fitted from intra-block updates
    ("int4:g256", 256, False),     # a group straddling two blocks: fitted with the lazy updates owed
    ("int8:g64", 64, False),
])
def test_gptq_equals_the_direct_reference(scheme: str, group: int, asym: bool) -> None:
    w, h = fixed_layer()
    bits = 8 if scheme.startswith("int8") else 4
    result = gptq_quantize(w, h, scheme, dtype="float64", act_order=False, static_groups=False)
    assert result.status == "ok" and result.quantized is not None
    codes, scales = reference_gptq(w, h, group, bits=bits, asym=asym)
    mine = signed_codes(result.quantized.codes, bits, w.shape[1])
    assert np.array_equal(mine, codes)
    assert np.array_equal(result.quantized.scales.astype(np.float64), scales)


def test_gptq_act_order_with_static_groups_equals_the_reference() -> None:
    w, h = fixed_layer(seed=11)
    order = np.argsort(-np.diag(h), kind="stable")
    result = gptq_quantize(w, h, "int4:g64:asym", act_order=True, static_groups=True, dtype="float64")
    codes, _ = reference_gptq(w, h, 64, asym=True, order=order, static_groups=True)
    assert result.quantized is not None
    assert np.array_equal(signed_codes(result.quantized.codes, 4, w.shape[1]), codes)


def test_dead_columns_are_decoupled_and_rounded_not_zeroed() -> None:
    w, h = fixed_layer(seed=3)
    dead = [5, 77, 200]
    h[dead, :] = 0.0
    h[:, dead] = 0.0
    result = gptq_quantize(w, h, "int4:g128", dtype="float64", act_order=False, static_groups=False)
    assert result.dead_columns == 3 and result.weight is not None and result.quantized is not None
    codes, _ = reference_gptq(w, h, 128)
    assert np.array_equal(signed_codes(result.quantized.codes, 4, w.shape[1]), codes)
    # a dead column's own rounding moves nothing, and its weights keep their (rounded) values
    assert np.count_nonzero(result.weight[:, dead]) > 0
    assert np.isfinite(result.weight).all()


def test_the_default_is_act_order_with_static_groups_and_beats_the_natural_order() -> None:
    """The default equals the reference with act-order and static groups, and on these correlated inputs
    with channels of very different scales lowers the layer error below the paper's natural order."""
    w, h = fixed_layer(seed=13)
    default = gptq_quantize(w, h, "int4:g64", dtype="float64")
    assert default.options["act_order"] and default.options["static_groups"] and default.quantized is not None
    order = np.argsort(-np.diag(h), kind="stable")
    codes, _ = reference_gptq(w, h, 64, order=order, static_groups=True)
    assert np.array_equal(signed_codes(default.quantized.codes, 4, w.shape[1]), codes)
    natural = gptq_quantize(w, h, "int4:g64", dtype="float64", act_order=False, static_groups=False)
    assert default.weight is not None and natural.weight is not None
    assert layer_error(w, default.weight, h) < layer_error(w, natural.weight, h)


def test_float32_sweep_matches_float64_on_nearly_every_code() -> None:
    w, h = fixed_layer(seed=5)
    a = gptq_quantize(w, h, "int4:g128", dtype="float32").quantized
    b = gptq_quantize(w, h, "int4:g128", dtype="float64").quantized
    assert a is not None and b is not None
    assert np.mean(a.codes == b.codes) > 0.99


@pytest.mark.parametrize("scheme", ["int4:g128", "int4:g32:asym", "int8:row", "int8", "int4:col", "uint4:g64",
                                    "e4m3:g32", "mxfp4", "mxfp8:rceil", "mxint8", "nvfp4", "nf4:g64",
                                    "dsv3_weight", "int4:block16x64"])
def test_a_diagonal_hessian_gives_round_to_nearest(scheme: str) -> None:
    """With H diagonal no error moves to other columns: GPTQ is RTN, code for code, scale for scale."""
    w, h = fixed_layer(seed=1)
    result = gptq_quantize(w, np.diag(np.diag(h)), scheme)
    rtn = quantize(w, scheme)
    assert result.quantized is not None
    assert np.array_equal(result.quantized.codes, rtn.codes)
    assert np.array_equal(result.quantized.scales, rtn.scales)
    assert result.quantized.nbytes == rtn.nbytes


@pytest.mark.parametrize("scheme", ["int4:g128", "int4:g64:asym", "int4", "mxfp4", "nvfp4", "e4m3:g32", "nf4:g64"])
def test_gptq_lowers_the_layer_error_and_stays_on_the_grid(scheme: str) -> None:
    w, h = fixed_layer()
    result = gptq_quantize(w, h, scheme)
    assert result.quantized is not None and result.weight is not None
    assert np.array_equal(result.quantized.dequantize(), result.weight)  # what the stored tensor reads back as
    assert layer_error(w, result.weight, h) < layer_error(w, quantize(w, scheme).dequantize(), h)


def test_damping_is_raised_until_the_factorisation_works_and_reported() -> None:
    w, h = fixed_layer()
    mean = float(np.mean(np.diag(h)))
    shifted = h - 0.05 * mean * np.eye(h.shape[0])  # indefinite: needs more than 5% damping
    result = gptq_quantize(w, shifted, "int4:g128")
    assert result.status == "ok"
    assert result.damping == pytest.approx(0.08) and result.damping_tries == 4  # 1%, 2%, 4% fail; 8% works
    u, used, tries = inverse_hessian_factor(h, damp=0.01)
    damped = h + 0.01 * mean * np.eye(h.shape[0])
    assert used == 0.01 and tries == 1
    assert np.allclose(u.T @ u, np.linalg.inv(damped), rtol=1e-8, atol=1e-10 / mean)
    assert np.allclose(np.tril(u, -1), 0.0)
    # numpy's factorisation (used without torch) gives the same factor
    by_numpy, _, _ = inverse_hessian_factor(h, damp=0.01, backend="numpy")
    assert np.allclose(by_numpy, u, rtol=1e-7, atol=1e-12 * float(np.abs(u).max()))


def test_a_layer_that_cannot_be_factorised_is_reported_failed_not_rounded() -> None:
    w, h = fixed_layer()
    v = np.random.default_rng(0).standard_normal(h.shape[0])
    v /= np.linalg.norm(v)
    broken = h - 5.0 * float(np.mean(np.diag(h))) * np.outer(v, v)  # an eigenvalue below -100% damping
    result = gptq_quantize(w, broken, "int4:g128")
    assert result.status == "failed"
    assert result.quantized is None and result.weight is None
    assert "not positive definite" in result.message


@pytest.mark.parametrize(("scheme", "kwargs", "message"), [
    ("int4:g128:outliers=2", {}, "outliers="),
    ("int4:g32:axis=0", {}, "axis"),
    ("gguf_q4_k", {}, "super-block"),
    ("int4:g32", {"static_groups": False}, "static_groups=True"),  # act_order is the default
    ("int4:g128", {"block_size": 0}, "block_size"),
    ("int4:g128", {"damp": 0.0}, "damp"),
    ("int4:g128", {"dtype": "float16"}, "dtype"),
])
def test_schemes_and_options_that_do_not_apply_are_refused(scheme: str, kwargs: dict, message: str) -> None:
    w, h = fixed_layer(m=8, n=64, tokens=128)
    with pytest.raises(ValueError, match=message):
        gptq_quantize(w, h, scheme, **kwargs)


def test_a_gguf_row_that_is_not_whole_blocks_is_refused() -> None:
    w, h = fixed_layer(m=8, n=48, tokens=128)  # 48 inputs: one block of 32 and a partial one
    with pytest.raises(ValueError, match="whole blocks of 32"):
        gptq_quantize(w, h, "gguf_q4_1")


def test_bad_hessians_are_refused() -> None:
    w, h = fixed_layer(m=8, n=64, tokens=128)
    with pytest.raises(ValueError, match=r"\(64, 64\)"):
        gptq_quantize(w, h[:32, :32], "int4:g32")
    asym = h.copy()
    asym[0, 1] += 1.0
    with pytest.raises(ValueError, match="not symmetric"):
        gptq_quantize(w, asym, "int4:g32")
    with pytest.raises(ValueError, match="dead"):
        gptq_quantize(w, np.zeros_like(h), "int4:g32")


def test_act_order_on_a_per_row_scheme_needs_no_static_groups() -> None:
    w, h = fixed_layer()
    plain = gptq_quantize(w, h, "int8:row", act_order=False, static_groups=False)
    ordered = gptq_quantize(w, h, "int8:row", act_order=True, static_groups=False)
    assert plain.weight is not None and ordered.weight is not None
    rtn = layer_error(w, quantize(w, "int8:row").dequantize(), h)
    assert layer_error(w, ordered.weight, h) < rtn and layer_error(w, plain.weight, h) < rtn
