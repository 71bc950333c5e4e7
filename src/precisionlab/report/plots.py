"""Draw Figure data as PNG files with matplotlib's Agg backend (no display needed)."""

from __future__ import annotations

import math
from pathlib import Path

from precisionlab.labs.result import Figure


def _finite_pairs(xs: list[float], ys: list[float]) -> tuple[list[float], list[float]]:
    pairs = [(x, y) for x, y in zip(xs, ys, strict=True) if _finite(x) and _finite(y)]
    return [p[0] for p in pairs], [p[1] for p in pairs]


def _finite(v: object) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def save_figure(fig: Figure, path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, ax = plt.subplots(figsize=(8, 5), dpi=110)
    try:
        for s in fig.series:
            xs, ys = _finite_pairs([float(v) for v in s.x], [float(v) for v in s.y])
            if s.kind == "scatter":
                ax.scatter(xs, ys, label=s.label, s=28)
                for x, y in zip(xs, ys, strict=True) if len(fig.series) > 6 else []:
                    ax.annotate(s.label, (x, y), fontsize=7)
            elif s.kind == "step":
                ax.step(xs, ys, s.style or "-", where="post", label=s.label)
            elif s.kind == "bar":
                ax.bar([str(x) for x in xs], ys, label=s.label)
            else:
                ax.plot(xs, ys, s.style or "-o", label=s.label, markersize=3)
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
        if len(fig.series) > 6:  # a long legend goes beside the axes, never over the data
            figure.set_size_inches(11, 5)
            ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.01, 0.5))
        elif fig.series:
            ax.legend(fontsize=8, loc="best")
        figure.tight_layout()
        path.parent.mkdir(parents=True, exist_ok=True)
        figure.savefig(path)
    finally:
        plt.close(figure)
    return path
