"""The outlier demo: why per-channel scaling and outlier handling exist; FP8 current vs delayed scaling.

One synthetic weight matrix (64 rows, N(0, 0.02) weights) whose row `OUTLIER_ROW` is
scaled so that its amax is `ratio` (default 45) times the median amax of the other
rows. int8 schemes on it:

    per tensor  s = amax(W) / 127: every ordinary row gets a step ~ratio x too coarse
    per row     s_r = amax(row r) / 127: the ordinary rows get their own step; the
                outlier row keeps its coarse one and now dominates the total error
    per row + the outlier row in fp16 (LLM.int8() in miniature): removes that term for
                N more bytes out of about 64 N (~1.5%)

The last section feeds an FP8 (e4m3) per-tensor quantizer a sequence of tensors with
one transient outlier: current scaling recovers on the next step, delayed scaling
(amax history window W) stays dominated by the outlier for W steps.
"""

from __future__ import annotations

import numpy as np

from precisionlab.labs import Lab
from precisionlab.quant import CurrentScaler, DelayedScaler, quantize
from precisionlab.quant.scalers import fake_quantize_fp8
from precisionlab.results import Figure, LabResult, Scalar, Series, Table

OUTLIER_ROW = 7
ROWS = 64

INT8_SCHEMES = [
    ("per-tensor", "int8"),
    ("per-tensor asym", "int8:asym"),
    ("per-row", "int8:row"),
    ("per-row asym", "int8:row:asym"),
    ("per-row + fp16 outlier row", "int8:row:outliers=1"),
    ("per-group g128", "int8:g128"),
    ("per-group g32, fp32 scales", "int8:g32:scale=fp32"),
]

LOW_BIT_SCHEMES = ["mxfp8", "dsv3_weight", "dsv3_act", "mxfp6", "int4:g128", "nf4:g64", "mxfp4", "mxfp4:rceil",
                   "nvfp4"]


def outlier_matrix(cols: int = 1024, ratio: float = 45.0, seed: int = 0) -> np.ndarray:
    """W ~ N(0, 0.02) of shape (64, cols), row OUTLIER_ROW rescaled to `ratio` x the median row amax."""
    rng = np.random.default_rng(seed)
    w = rng.normal(0.0, 0.02, size=(ROWS, cols))
    others = np.delete(np.abs(w).max(axis=1), OUTLIER_ROW)
    w[OUTLIER_ROW] *= ratio * np.median(others) / np.abs(w[OUTLIER_ROW]).max()
    return w.astype(np.float32)


def _row_rms(err: np.ndarray) -> np.ndarray:
    return np.sqrt(np.mean(err.astype(np.float64) ** 2, axis=1))


def int8_table(w: np.ndarray) -> tuple[Table, dict[str, dict[str, float]]]:
    fp32_bytes = w.size * 4
    norm = float(np.linalg.norm(w.astype(np.float64)))
    rows: list[list[Scalar]] = []
    stats: dict[str, dict[str, float]] = {}
    typical = np.arange(w.shape[0]) != OUTLIER_ROW
    for label, scheme in INT8_SCHEMES:
        q = quantize(w, scheme)
        err = q.dequantize().astype(np.float64) - w
        per_row = _row_rms(err)
        entry = {
            "rel_err": float(np.linalg.norm(err)) / norm,
            "typical_rms": float(np.sqrt(np.mean(per_row[typical] ** 2))),
            "outlier_rms": float(per_row[OUTLIER_ROW]),
            "bytes": float(q.nbytes),
        }
        stats[scheme] = entry
        rows.append([label, scheme, entry["rel_err"], entry["typical_rms"], entry["outlier_rms"], q.nbytes,
                     fp32_bytes / q.nbytes, q.padded_elements])
    table = Table(
        key="int8_schemes",
        title=f"int8 schemes on a {w.shape[0]}x{w.shape[1]} matrix with one outlier row",
        columns=["scheme", "spec", "rel err W", "typical-row rms err", "outlier-row rms err", "bytes", "vs fp32",
                 "padded"],
        rows=rows,
        note=("rel err = ||W_hat - W|| / ||W||; typical rows = every row but the outlier. Bytes count payload, "
              "fp16 scales (fp32 where stated), int8 zero points, the fp16 row and its int32 index; padded = zeros "
              "filling the last group of each row when g does not divide it (stored and counted in the bytes)."),
        formats={"rel err W": ".4g", "typical-row rms err": ".4g", "outlier-row rms err": ".4g", "vs fp32": ".3f"},
    )
    return table, stats


def low_bit_table(w: np.ndarray) -> tuple[Table, Figure]:
    norm = float(np.linalg.norm(w.astype(np.float64)))
    rows: list[list[Scalar]] = []
    series = []
    for scheme in LOW_BIT_SCHEMES:
        q = quantize(w, scheme)
        err = q.dequantize().astype(np.float64) - w
        rel = float(np.linalg.norm(err)) / norm
        rows.append([scheme, q.bits_per_element, rel, float(np.abs(err).max()), q.nbytes, q.padded_elements])
        series.append(Series(scheme, [q.bits_per_element], [rel], kind="scatter"))
    table = Table(
        key="low_bit_schemes",
        title="Block-scaled formats on the same matrix",
        columns=["scheme", "bits/elem", "rel err W", "max err", "bytes", "padded"],
        rows=rows,
        note=("mx*: 32-element blocks with a ue8m0 scale (OCP MX); nvfp4: 16-element blocks, e4m3 scale and an "
              "fp32 tensor scale; dsv3_*: DeepSeek-V3's 128x128 weight blocks / 1x128 tiles with fp32 scales. "
              "The outlier row sits inside its own blocks, so fine blocks contain it. padded: as above."),
        formats={"bits/elem": ".4g", "rel err W": ".4g", "max err": ".4g"},
    )
    figure = Figure(key="error_vs_bits", title="Relative error against bits per element",
                    xlabel="bits per element (scales included)", ylabel="relative error of W", series=series,
                    yscale="log")
    return table, figure


def scaling_sequence(steps: int, outlier_step: int, factor: float, seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    seq = [rng.normal(0.0, 1.0, size=4096).astype(np.float32) for _ in range(steps)]
    seq[outlier_step][123] = factor * float(np.abs(seq[outlier_step]).max())
    return seq


def scaler_section(steps: int, window: int, outlier_step: int = 4, factor: float = 50.0,
                   seed: int = 1) -> tuple[Table, Figure, dict[str, Scalar]]:
    seq = scaling_sequence(steps, outlier_step, factor, seed)
    current, delayed = CurrentScaler("e4m3"), DelayedScaler("e4m3", history=window)
    rows: list[list[Scalar]] = []
    cur_scales, del_scales = [], []
    for step, x in enumerate(seq):
        sc, sd = current.step(x), delayed.step(x)
        x64 = x.astype(np.float64)
        norm = float(np.linalg.norm(x64))
        ec = float(np.linalg.norm(fake_quantize_fp8(x, sc) - x64)) / norm
        ed = float(np.linalg.norm(fake_quantize_fp8(x, sd) - x64)) / norm
        rows.append([step, float(np.abs(x).max()), sc, sd, ec, ed])
        cur_scales.append(sc)
        del_scales.append(sd)
    baseline = del_scales[outlier_step]

    def stale(scales: list[float]) -> int:
        after = scales[outlier_step + 1 :]
        return sum(1 for s in after if s > 4 * baseline)

    table = Table(
        key="fp8_scaling",
        title=f"FP8 e4m3 per-tensor scaling: current vs delayed (window {window}), outlier at step {outlier_step}",
        columns=["step", "amax", "current scale", "delayed scale", "current rel err", "delayed rel err"],
        rows=rows,
        note=("s = amax / 448; delayed uses max(amax) over the previous W steps, never the current one, so the "
              "outlier step itself saturates and the next W steps quantize ordinary tensors with a scale "
              f"{factor:g}x too coarse."),
        formats={"amax": ".4g", "current scale": ".4g", "delayed scale": ".4g", "current rel err": ".3g",
                 "delayed rel err": ".3g"},
    )
    xs = list(range(steps))
    figure = Figure(key="fp8_scaling", title="Per-tensor FP8 scale with a transient outlier", xlabel="step",
                    ylabel="scale s (decode direction)", yscale="log",
                    series=[Series("current", xs, cur_scales, kind="step"),
                            Series(f"delayed (W={window})", xs, del_scales, kind="step", style="--")],
                    vlines=[(float(outlier_step), "outlier")])
    findings: dict[str, Scalar] = {
        "demo.delayed_stale_steps": stale(del_scales),
        "demo.current_stale_steps": stale(cur_scales),
        "demo.delayed_window": window,
    }
    return table, figure, findings


MAX_COLS = 1 << 18
MAX_WINDOW = 1024
MAX_STEPS = 2 * MAX_WINDOW
"""Enough steps to watch the largest window fill after the outlier and drain again."""


def run(cols: int = 1024, ratio: float = 45.0, seed: int = 0, steps: int = 24, window: int = 16) -> LabResult:
    for label, value, top in (("cols", cols, MAX_COLS), ("window", window, MAX_WINDOW),
                              ("steps", steps, MAX_STEPS)):
        if not 1 <= value <= top:
            raise ValueError(f"{label} must be an integer in 1..{top}, got {value}")
    if seed < 0:
        raise ValueError(f"seed must be a non-negative integer, got {seed}")
    w = outlier_matrix(cols, ratio, seed)
    amax_rows = np.abs(w).max(axis=1)
    amax_ratio = float(amax_rows[OUTLIER_ROW] / np.median(np.delete(amax_rows, OUTLIER_ROW)))
    int8, stats = int8_table(w)
    low, figure = low_bit_table(w)
    scaling, scaling_fig, scaling_findings = scaler_section(steps, window)
    per_tensor, per_row, fp16_row = stats["int8"], stats["int8:row"], stats["int8:row:outliers=1"]
    findings: dict[str, Scalar] = {
        "demo.outlier_amax_ratio": amax_ratio,
        "demo.typical_row_error_ratio": per_tensor["typical_rms"] / per_row["typical_rms"],
        "demo.fp16_row_error_gain": per_row["rel_err"] / fp16_row["rel_err"],
        "demo.fp16_row_memory_overhead": fp16_row["bytes"] / per_row["bytes"] - 1.0,
        "demo.per_tensor_rel_err": per_tensor["rel_err"],
        "demo.per_row_rel_err": per_row["rel_err"],
        "demo.g32_fp32_compression": float(w.size * 4 / stats["int8:g32:scale=fp32"]["bytes"]),
        **scaling_findings,
    }
    return LabResult(
        name="quant_demo",
        title="Quantization with an outlier row: per-channel scaling, an fp16 row, block formats and FP8 scaling",
        sections=[int8, low, scaling],
        figures=[figure, scaling_fig],
        findings=findings,
        params={"cols": cols, "ratio": ratio, "seed": seed, "steps": steps, "window": window},
        summary=(f"Per-row scaling cuts the typical-row error {findings['demo.typical_row_error_ratio']:.0f}x "
                 f"(the outlier row's amax is {amax_ratio:.0f}x the others'); keeping that row in fp16 cuts the total "
                 f"error another {findings['demo.fp16_row_error_gain']:.1f}x for "
                 f"{100 * (fp16_row['bytes'] / per_row['bytes'] - 1.0):.2f}% more bytes."),
    )


LAB = Lab(name="quant_demo", title="Quantization: per-channel, outliers, block formats", run=run, order=20,
          quick={"cols": 256, "steps": 12, "window": 4})
