"""The emulated-precision toy run: an fp32 run against a float64 reference, one fp16 step against
numpy's own float16 casts, and the behaviour each variant must show."""

from __future__ import annotations

import math

import numpy as np
import pytest

from precisionlab.training.toy import TrainConfig, get_variant, make_problem, run_study, train


def reference_sgd(x: np.ndarray, y: np.ndarray, steps: int, lr: float, momentum: float,
                  max_norm: float) -> list[float]:
    """Plain float64 SGD with momentum and norm clipping on mean((Xw - y)^2)."""
    n, d = x.shape
    w, buf, losses = np.zeros(d), np.zeros(d), []
    for _ in range(steps):
        r = x @ w - y
        losses.append(float(np.mean(r * r)))
        g = x.T @ (2 * r / n)
        norm = float(np.linalg.norm(g))
        if norm > max_norm:
            g = g * (max_norm / norm)
        buf = momentum * buf + g
        w = w - lr * buf
    return losses


def test_problem_is_exact_in_every_compute_format() -> None:
    ml_dtypes = pytest.importorskip("ml_dtypes")
    p = make_problem(samples=2048)
    for dtype in (np.float16, ml_dtypes.bfloat16, np.float32):
        assert np.array_equal(p.features.astype(dtype).astype(np.float64), p.features)
    assert np.allclose(p.features @ p.optimum, p.targets)


def test_fp32_run_follows_float64_reference() -> None:
    p = make_problem(samples=4096)
    cfg = TrainConfig(steps=40)
    log = train(p, get_variant("fp32"), cfg)
    ref = reference_sgd(p.features, p.targets, 40, cfg.lr, cfg.momentum, cfg.max_norm)
    assert log.loss[:40] == pytest.approx(ref, rel=1e-4)


def test_fp16_plain_steps_match_numpy_float16_casts() -> None:
    p = make_problem(samples=4096)
    cfg = TrainConfig(steps=3)
    log = train(p, get_variant("fp16_plain"), cfg)
    h = np.float16
    x = p.features.astype(h).astype(np.float64)
    y = p.targets.astype(h).astype(np.float64)
    n = p.samples
    w = np.zeros(x.shape[1])
    buf = np.zeros_like(w)
    for _ in range(3):
        pred = (x @ w).astype(h).astype(np.float64)
        r = (pred - y).astype(h).astype(np.float64)
        dpred = (r * (2.0 / n)).astype(h).astype(np.float64)
        g = (x.T @ dpred).astype(h).astype(np.float64)
        assert np.linalg.norm(g) <= cfg.max_norm
        buf = ((cfg.momentum * buf).astype(h).astype(np.float64) + g).astype(h).astype(np.float64)
        update = (cfg.lr * buf).astype(h).astype(np.float64)
        w = (w - update).astype(h).astype(np.float64)
    assert np.array_equal(log.weights, w)


@pytest.fixture(scope="module")
def study():  # type: ignore[no-untyped-def]
    return run_study()


def test_plain_fp16_stalls_and_scaling_recovers(study) -> None:  # type: ignore[no-untyped-def]
    target = study.target
    plain, master = study.runs["fp16_plain"], study.runs["fp16_master"]
    scaled, bf16, fp32 = study.runs["fp16_master_scaled"], study.runs["bf16_master"], study.runs["fp32"]
    assert plain.stalled(target) and master.stalled(target)
    assert plain.flushed[-1] > 0.9  # the output gradients underflow to zero
    assert not scaled.stalled(target) and scaled.steps_to(target) is not None
    assert scaled.final_loss < plain.final_loss / 100
    assert bf16.steps_to(target) is not None and not bf16.variant.loss_scaling
    assert max(bf16.flushed) == 0.0
    assert fp32.steps_to(target) is not None


def test_clip_before_unscale_is_slower_but_ordinary(study) -> None:  # type: ignore[no-untyped-def]
    trap = study.runs["clip_before_unscale"]
    assert all(trap.clipped[:50])
    assert not any(study.runs["fp16_master_scaled"].clipped)
    loss = np.array(trap.loss)
    assert np.all(np.isfinite(loss)) and loss[-1] < loss[0]  # the curve still goes down
    assert study.slowdown() > 1.5


def test_no_skip_turns_weights_nan(study) -> None:  # type: ignore[no-untyped-def]
    skip, no_skip = study.runs["high_scale_skip"], study.runs["no_skip"]
    assert sum(skip.skipped) > 0 and all(np.isfinite(skip.weights))
    assert no_skip.first_nan_step is not None and np.isnan(no_skip.weights).all()
    assert math.isnan(no_skip.final_loss)


def test_unknown_variant_and_bad_config() -> None:
    with pytest.raises(ValueError, match="unknown training variant"):
        get_variant("fp12")
    with pytest.raises(ValueError):
        TrainConfig(steps=0)
    with pytest.raises(ValueError):
        TrainConfig(lr=-1.0)


def test_short_runs_are_never_called_stalled() -> None:
    log = train(make_problem(samples=1024), get_variant("fp16_plain"), TrainConfig(steps=5))
    assert not log.stalled(0.0)


def test_fp16_master_scaled_steps_match_numpy_casts() -> None:
    """fp16 compute, fp32 master and state, loss scale 2^16, clip after unscaling: every rounding replayed with
    numpy's float16 / float32 casts (each a single correctly rounded cast from float64)."""
    p = make_problem(samples=4096)
    cfg = TrainConfig(steps=4)
    log = train(p, get_variant("fp16_master_scaled"), cfg)
    h, f = np.float16, np.float32

    def r16(v: np.ndarray) -> np.ndarray:
        return np.asarray(v).astype(h).astype(np.float64)

    def r32(v: np.ndarray) -> np.ndarray:
        return np.asarray(v).astype(f).astype(np.float64)

    x, y, n, s = r16(p.features), r16(p.targets), p.samples, 2.0**16
    w = np.zeros(x.shape[1])
    buf = np.zeros_like(w)
    losses = []
    for _ in range(4):
        r = r16(r16(x @ r16(w)) - y)
        losses.append(float(r32(np.mean(r32(r * r)))))
        grad = r16(x.T @ r16(r * (2.0 * s / n)))
        assert np.all(np.isfinite(grad))  # no overflow at 2^16: no step is skipped
        g = r32(grad / s)
        norm = float(np.sqrt(np.sum(g * g)))
        if norm > cfg.max_norm:
            g = r32(g * (cfg.max_norm / norm))
        buf = r32(r32(cfg.momentum * buf) + g)
        w = r32(w - r32(cfg.lr * buf))
    assert log.loss[:4] == losses
    assert log.scale == [s] * 4 and not any(log.skipped)
    assert np.count_nonzero(w) == w.size  # every weight moved
    assert np.array_equal(log.weights, w)
