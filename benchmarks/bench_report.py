"""How long drawing the report's figures takes, against the usual matplotlib recipe on the same data.

    python3 benchmarks/bench_report.py [--repeat 3] [--full]

Runs every lab once (`--quick` sizes unless --full; the figures are the same in number and kind),
then draws all of their figures, best of --repeat:
  precisionlab      report.plots.draw_figure: layout computed once from measured text, one draw
                    per file (PNG), and with --svg its SVG too;
  usual recipe      the same series with pyplot, legend loc="best", tight_layout() and savefig()
                    (what report.plots did before: a layout pass, then the draw);
then the HTML page alone. Prints seconds and the ratio usual / precisionlab. The two draw the same
points; the pictures differ in style (legend place, rings), so only the time is compared.
Nothing is asserted: timings on a shared machine are noisy.
"""

from __future__ import annotations

import argparse
import platform
import tempfile
from pathlib import Path

from _timing import best_of


def usual(fig, path: Path) -> None:  # type: ignore[no-untyped-def]
    """The conventional pyplot drawing of a Figure: plot, loc='best' legend, tight_layout, savefig."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, ax = plt.subplots(figsize=(8, 5), dpi=110)
    try:
        for s in fig.series:
            xs, ys = [float(v) for v in s.x], [float(v) for v in s.y]
            if s.kind == "scatter":
                ax.scatter(xs, ys, label=s.label)
            elif s.kind == "bar":
                ax.bar([str(x) for x in xs], ys, label=s.label)
            else:
                ax.plot(xs, ys, marker="o", markersize=3, label=s.label)
        ax.set_xscale(fig.xscale)
        ax.set_yscale(fig.yscale)
        ax.set_title(fig.title)
        ax.set_xlabel(fig.xlabel)
        ax.set_ylabel(fig.ylabel)
        if fig.series:
            ax.legend(fontsize=8, loc="best")
        figure.tight_layout()
        figure.savefig(path)
    finally:
        plt.close(figure)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--full", action="store_true", help="the labs at their default sizes (slower)")
    args = parser.parse_args()

    from precisionlab.labs import all_labs
    from precisionlab.report.html import render_html
    from precisionlab.report.plots import draw_figure

    results = [lab.run(**({} if args.full else lab.quick)) for lab in all_labs()]
    figures = [(r.name, f) for r in results for f in r.figures]
    folder = Path(tempfile.mkdtemp(prefix="bench-report-"))
    draw_figure(figures[0][1], folder / "warm.png")  # imports and font cache out of the timing
    usual(figures[0][1], folder / "warm-usual.png")

    png = best_of(lambda: [draw_figure(f, folder / f"{n}_{f.key}.png") for n, f in figures], args.repeat)
    both = best_of(lambda: [draw_figure(f, folder / f"{n}_{f.key}.png", folder / f"{n}_{f.key}.svg")
                            for n, f in figures], args.repeat)
    peer = best_of(lambda: [usual(f, folder / f"usual_{n}_{f.key}.png") for n, f in figures], args.repeat)
    page = best_of(lambda: render_html(results), args.repeat)

    print(f"{platform.machine()}, Python {platform.python_version()}; {len(figures)} figures of "
          f"{len(results)} labs ({'default' if args.full else 'quick'} sizes), best of {args.repeat}")
    print(f"{'precisionlab, PNG':<28} {png:7.2f} s")
    print(f"{'precisionlab, PNG + SVG':<28} {both:7.2f} s")
    print(f"{'usual recipe, PNG':<28} {peer:7.2f} s   usual / precisionlab PNG = {peer / png:.2f}x")
    print(f"{'HTML page':<28} {page:7.3f} s")


if __name__ == "__main__":
    main()
