"""Draw Figure data as PNG files with matplotlib's Agg backend (no display needed).

Every series gets its own (colour, marker) pair: ten colours, then the same ten with the next
marker, so a legend of twenty entries still names each series once. When a figure has many
series its scatter points are also labelled on the axes; those labels are placed greedily
inside the axes so that no two overlap (see `place_labels`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from precisionlab.labs.result import Figure

COLOURS = 10
"""matplotlib's default cycle ("tab10")."""
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")
LONG_LEGEND = 6
"""More series than this: the legend goes beside the axes and scatter points get labels."""
LABEL_FONT = 7
LABEL_GAP = 4
"""Points between a data point and its label."""
LABEL_RISES = (4, -10, 14, -20, 24, -30, 34, -40)
"""Vertical offsets (points) tried in turn for a label, each right then left of its point."""

Box = tuple[float, float, float, float]


def series_style(index: int) -> tuple[str, str]:
    """(colour, marker) of the index-th series: unique for the first COLOURS × len(MARKERS)."""
    return f"C{index % COLOURS}", MARKERS[(index // COLOURS) % len(MARKERS)]


def _finite_pairs(xs: list[float], ys: list[float]) -> tuple[list[float], list[float]]:
    pairs = [(x, y) for x, y in zip(xs, ys, strict=True) if _finite(x) and _finite(y)]
    return [p[0] for p in pairs], [p[1] for p in pairs]


def _finite(v: object) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _overlaps(a: Box, b: Box) -> bool:
    return a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3]


def place_labels(anchors: Sequence[tuple[float, float]], sizes: Sequence[tuple[float, float]],
                 bounds: Box | None = None) -> list[tuple[float, float]]:
    """Greedy label placement in display units (points, y up).

    Label i, of size (width, height), anchored at its data point, takes the first offset
    (right of the point, then left, for each rise in LABEL_RISES) whose box
    (x0, y0, x1, y1) = (anchor + offset, anchor + offset + size) lies inside `bounds` and
    overlaps no box already placed; when every offset fails it takes the first. Returns one
    offset (dx, dy) per label.
    """
    placed: list[Box] = []
    chosen: list[tuple[float, float]] = []
    for (ax, ay), (w, h) in zip(anchors, sizes, strict=True):
        candidates = [(dx, dy) for dy in LABEL_RISES for dx in (LABEL_GAP, -LABEL_GAP - w)]
        offset = candidates[0]
        for dx, dy in candidates:
            box = (ax + dx, ay + dy, ax + dx + w, ay + dy + h)
            inside = bounds is None or (bounds[0] <= box[0] and box[2] <= bounds[2]
                                        and bounds[1] <= box[1] and box[3] <= bounds[3])
            if inside and not any(_overlaps(box, other) for other in placed):
                offset = (dx, dy)
                break
        dx, dy = offset
        placed.append((ax + dx, ay + dy, ax + dx + w, ay + dy + h))
        chosen.append(offset)
    return chosen


def _label_points(ax: Any, points: list[tuple[str, float, float]], dpi: float) -> None:
    """Annotate each (label, x, y) without overlaps; call after the axes' scales are set."""
    to_points = 72.0 / dpi
    anchors = [tuple(v * to_points for v in ax.transData.transform((x, y))) for _, x, y in points]
    sizes = [(0.6 * LABEL_FONT * len(label), 1.2 * LABEL_FONT) for label, _, _ in points]
    x0, y0, x1, y1 = (v * to_points for v in ax.get_window_extent().extents)
    for (label, x, y), offset in zip(points, place_labels(anchors, sizes, (x0, y0, x1, y1)), strict=True):
        displaced = offset != (LABEL_GAP, LABEL_RISES[0])  # a thin leader line says whose label it is
        ax.annotate(label, (x, y), xytext=offset, textcoords="offset points", fontsize=LABEL_FONT,
                    arrowprops={"arrowstyle": "-", "linewidth": 0.5, "color": "grey"} if displaced else None)


def save_figure(fig: Figure, path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    crowded = len(fig.series) > LONG_LEGEND
    figure, ax = plt.subplots(figsize=(11, 5) if crowded else (8, 5), dpi=110)
    try:
        labelled: list[tuple[str, float, float]] = []
        for index, s in enumerate(fig.series):
            colour, marker = series_style(index)
            xs, ys = _finite_pairs([float(v) for v in s.x], [float(v) for v in s.y])
            if s.kind == "scatter":
                ax.scatter(xs, ys, label=s.label, s=28, color=colour, marker=marker)
                if crowded:
                    labelled += [(s.label, x, y) for x, y in zip(xs, ys, strict=True)]
            elif s.kind == "step":
                ax.step(xs, ys, s.style or "-", where="post", label=s.label, color=colour)
            elif s.kind == "bar":
                ax.bar([str(x) for x in xs], ys, label=s.label, color=colour)
            elif s.style:  # the lab chose the line and marker (or none)
                ax.plot(xs, ys, s.style, label=s.label, markersize=3, color=colour)
            else:
                ax.plot(xs, ys, "-", marker=marker, label=s.label, markersize=3, color=colour)
        for value, label in fig.hlines:
            ax.axhline(value, linestyle=":", linewidth=1, color="grey")
            ax.annotate(label, (0.01, value), xycoords=("axes fraction", "data"), fontsize=7, color="grey")
        for value, label in fig.vlines:
            ax.axvline(value, linestyle=":", linewidth=1, color="grey")
            ax.annotate(label, (value, 0.98), xycoords=("data", "axes fraction"), fontsize=7, color="grey",
                        rotation=90, va="top")
        ax.set_xscale(fig.xscale)
        ax.set_yscale(fig.yscale)
        ax.set_xlabel(fig.xlabel)
        ax.set_ylabel(fig.ylabel)
        ax.set_title(fig.title)
        ax.grid(True, which="major", alpha=0.3)
        if crowded:  # a long legend goes beside the axes, never over the data
            ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.01, 0.5))
        elif fig.series:
            ax.legend(fontsize=8, loc="best")
        figure.tight_layout()
        if labelled:
            _label_points(ax, labelled, figure.dpi)
        path.parent.mkdir(parents=True, exist_ok=True)
        figure.savefig(path)
    finally:
        plt.close(figure)
    return path
