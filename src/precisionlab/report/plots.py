"""Draw Figure data as PNG (and SVG) files with matplotlib's Agg backend (no display needed).

Rules every figure follows:

- Every series of a figure has its own colour and its own marker (PALETTE and MARKERS, the
  first len(PALETTE) series all differ in both); the legend sits beside the axes, never over
  the data.
- No point hides another. Markers that land within COINCIDENT_PT of a marker drawn earlier are
  drawn as hollow rings, one size larger per marker below them, so each stays visible; a line
  lying on an earlier line for most of its length is drawn dashed on top of it. Each such case
  is reported in `Drawn.notes` (the HTML caption and the alt text say it), since the reader
  would otherwise not know that two series coincide.
- Crowded scatter plots (more than LONG_LEGEND series) also label their points on the axes,
  placed greedily so that no two labels overlap (`place_labels`).
- An interval series (style INTERVAL: three points at one x, low, estimate, high) is drawn as an
  error bar: a vertical line with caps, one marker at the estimate only. Intervals at the same x
  (GPTQ and RTN of one scheme: the same bits per weight) are drawn side by side, DODGE_PT apart,
  and the caption says so.
- Reference-line labels (hlines) never overlap: one that would sit on another moves below its
  line, then further off in turn (line_label_rises).
- The layout is computed once, from measured text sizes, before the one draw per file: the
  axes box has a fixed size and the figure grows around it (legend, tick labels, title), so
  matplotlib never re-lays a figure out (no tight_layout, no bbox_inches="tight").
- A narrow drawing (`narrow=True`, what the HTML report shows on a phone) has a smaller axes box
  (NARROW_AXES_HEIGHT high, as wide as NARROW_MAX_PX leaves), its legend in one column below the
  axes, and its title, axis labels and legend labels wrapped to the figure's width, so the whole
  figure, legend and axes included, is at most NARROW_MAX_PX wide at full size.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from precisionlab.results import INTERVAL_STYLE, Figure, Series

PALETTE = (
    "#0072B2", "#E69F00", "#009E73", "#D55E00", "#CC79A7", "#56B4E9", "#000000", "#882255", "#117733",
    "#999933", "#AA4499", "#332288", "#8C564B", "#7F7F7F", "#BCBD22", "#17BECF", "#F03B20", "#A6761D",
    "#66A61E", "#FB9A99",
)
"""Twenty colours, pairwise at least 22 CIELAB ΔE apart and dark enough to read on white (L* <= 75);
the first seven are Okabe and Ito's colour-blind-safe set."""
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*", "<", ">", "p", "h", "d", "8", "H", "+", "x", "1", "2", "3",
           "4")
"""Twenty-one markers: one more than the colours, so (colour, marker) pairs repeat only after 420 series."""
COLOURS = len(PALETTE)
LONG_LEGEND = 6
"""More scatter series than this: their points also get labels on the axes."""
LABEL_FONT = 7
LABEL_GAP = 4
"""Points between a data point and its label."""
LABEL_RISES = (4, -10, 14, -20, 24, -30, 34, -40)
"""Vertical offsets (points) tried in turn for a label, each right then left of its point."""
COINCIDENT_PT = 4.0
"""Two markers closer than this (in points, about a marker's width) would hide each other."""
ON_LINE_PT = 1.5
"""A vertex within this distance (points) of an earlier line lies on it."""
ON_LINE_SHARE = 0.9
"""A line with at least this share of its vertices on one earlier line is drawn dashed on top of it."""
SHARE_SAMPLE = 64
"""Vertices of a long line tested against an earlier one (evenly spaced, first and last included)."""

INTERVAL = INTERVAL_STYLE
"""Series.style of an interval: y = [low, estimate, high] at one x, drawn as an error bar."""
DODGE_PT = 9.0
"""Points between the error bars of intervals that share an x."""
LINE_LABEL_FONT = 7
LINE_LABEL_PT = 9.0
"""Reference-line labels closer than this (points, vertically) would overlap."""

DPI = 110
AXES_SIZE = (6.4, 3.9)
"""Width and height of every axes box, inches: the figure grows around it."""
NARROW_MAX_PX = 360
"""Widest a narrow drawing may be: a 390 px phone screen less the report page's side padding."""
NARROW_AXES_HEIGHT = 2.2
"""The axes box height of a narrow drawing, inches; its width is what NARROW_MAX_PX leaves beside the y tick
labels and axis label (at least NARROW_AXES_MIN_WIDTH)."""
NARROW_AXES_MIN_WIDTH = 1.6
PAD = 0.12
"""Inches of white space at each figure edge."""
TICK_FONT = 8.5
AXIS_FONT = 9.5
TITLE_FONT = 10.5
LEGEND_FONT = 8.0

Box = tuple[float, float, float, float]


@dataclass
class Drawn:
    """What drawing one figure produced: the files, and notes on what was drawn so that nothing hides."""

    paths: list[Path] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    size: tuple[int, int] = (0, 0)
    """The PNG's width and height in pixels."""


def series_style(index: int) -> tuple[str, str]:
    """(colour, marker) of the index-th series: both unique among the first len(PALETTE) series."""
    return PALETTE[index % len(PALETTE)], MARKERS[index % len(MARKERS)]


def _finite(v: object) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _drawable_pairs(s: Series, xlog: bool, ylog: bool) -> tuple[list[float], list[float]]:
    """The (x, y) points matplotlib can draw: finite, and positive on a log axis."""
    xs, ys = [], []
    for x, y in zip(s.x, s.y, strict=True):
        xf, yf = float(x), float(y)
        if _finite(xf) and _finite(yf) and not (xlog and xf <= 0) and not (ylog and yf <= 0):
            xs.append(xf)
            ys.append(yf)
    return xs, ys


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


# ---- what coincides ------------------------------------------------------------------------------


def ring_counts(points: Sequence[tuple[float, float]], earlier: Sequence[tuple[float, float]],
                radius: float = COINCIDENT_PT) -> list[int]:
    """For each point (display units), how many earlier markers lie within `radius` of it."""
    import numpy as np

    if not points or not earlier:
        return [0] * len(points)
    p = np.asarray(points, dtype=np.float64)[:, None, :]
    q = np.asarray(earlier, dtype=np.float64)[None, :, :]
    return (np.hypot(*(p - q).transpose(2, 0, 1)) < radius).sum(axis=1).tolist()


def share_on_line(points: Sequence[tuple[float, float]], line: Sequence[tuple[float, float]],
                  tolerance: float = ON_LINE_PT) -> float:
    """Share of `points` within `tolerance` of the polyline `line` (display units)."""
    import numpy as np

    if not points or not line:
        return 0.0
    p = np.asarray(points, dtype=np.float64)
    if len(p) > SHARE_SAMPLE:  # evenly spaced vertices decide the share as well as all of them
        p = p[np.linspace(0, len(p) - 1, SHARE_SAMPLE).round().astype(int)]
    v = np.asarray(line, dtype=np.float64)
    if len(v) == 1:
        distance = np.hypot(*(p - v[0]).T)
    else:
        a, b = v[:-1], v[1:]
        ab = b - a
        length2 = np.maximum((ab**2).sum(axis=1), 1e-12)
        t = np.clip(((p[:, None, :] - a[None]) * ab[None]).sum(axis=2) / length2[None], 0.0, 1.0)
        nearest = a[None] + t[..., None] * ab[None]
        distance = np.hypot(*(p[:, None, :] - nearest).transpose(2, 0, 1)).min(axis=1)
    return float((distance <= tolerance).mean())


def _step_path(xs: list[float], ys: list[float]) -> tuple[list[float], list[float]]:
    """The vertices of a 'post' step drawn through the points."""
    px, py = [], []
    for i, (x, y) in enumerate(zip(xs, ys, strict=True)):
        if i:
            px.append(x)
            py.append(ys[i - 1])
        px.append(x)
        py.append(y)
    return px, py


# ---- tick labels ---------------------------------------------------------------------------------

_SUPERSCRIPT = str.maketrans("-0123456789", "⁻⁰¹²³⁴⁵⁶⁷⁸⁹")


def log_tick(value: float, _pos: object = None) -> str:
    """A log-axis tick label: 10ⁿ at powers of ten (plain Unicode, no mathtext), %g elsewhere."""
    if not value > 0 or not math.isfinite(value):
        return ""
    exponent = math.log10(value)
    if abs(exponent - round(exponent)) < 1e-9:
        return "10" + str(round(exponent)).translate(_SUPERSCRIPT)
    return f"{value:g}"


def _log_axis(axis: Any, low: float, high: float) -> None:
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    axis.set_major_formatter(FuncFormatter(log_tick))
    if low > 0 and math.log10(high / low) < 1.5:  # too few decades for a labelled power of ten
        axis.set_minor_locator(LogLocator(base=10, subs=(2.0, 5.0)))
        axis.set_minor_formatter(FuncFormatter(log_tick))
    else:
        axis.set_minor_formatter(NullFormatter())


# ---- drawing -------------------------------------------------------------------------------------


def _text_size(renderer: Any, text: str, size: float) -> tuple[float, float]:
    """(width, height) of text (its lines stacked) in inches; a line with a $...$ part is measured as the
    mathtext matplotlib draws (log-axis tick labels are '$\\mathdefault{10^{3}}$'), not as its raw characters."""
    from matplotlib.font_manager import FontProperties

    if not text:
        return 0.0, 0.0
    width = height = 0.0
    for line in text.split("\n"):
        math = line.count("$") >= 2 and line.count("$") % 2 == 0
        w, h, _ = renderer.get_text_width_height_descent(line, FontProperties(size=size), ismath=math)
        width, height = max(width, w), height + h * 1.25
    return width / DPI, height / DPI


def _tick_labels(axis: Any) -> list[str]:
    low, high = sorted(axis.get_view_interval())
    labels = []
    for locs, formatter in ((axis.get_majorticklocs(), axis.get_major_formatter()),
                            (axis.get_minorticklocs(), axis.get_minor_formatter())):
        inside = [v for v in locs if low - 1e-12 * abs(low) <= v <= high + 1e-12 * abs(high)]
        labels += [str(t) for t in formatter.format_ticks(inside)]
    return [t for t in labels if t]


def _series_kind(s: Series) -> tuple[bool, bool]:
    """(draws a line, draws markers) for a series."""
    if s.style == INTERVAL:
        return False, True
    if s.kind == "scatter":
        return False, True
    if s.kind == "bar":
        return False, False
    if s.kind == "step":
        return True, False
    if s.style:
        markers = any(ch in s.style for ch in "os^Dv*xX+.pPhH<>d")
        line = any(ch in s.style for ch in "-:") or not markers
        return line, markers
    return True, True


def _line_style(style: str) -> Any:
    if "--" in style:
        return "--"
    if "-." in style:
        return "-."
    if ":" in style:
        return ":"
    return "-"


def wrap_text(text: str, fits: Any) -> str:
    """`text` with line breaks between words, so that every line passes `fits(line)` where a line of one word
    can (a word longer than the width stays whole)."""
    lines: list[str] = []
    for word in text.split():
        if lines and fits(f"{lines[-1]} {word}"):
            lines[-1] = f"{lines[-1]} {word}"
        else:
            lines.append(word)
    return "\n".join(lines) if lines else text


def draw_figure(fig: Figure, png: Path, svg: Path | None = None, narrow: bool = False) -> Drawn:
    """Draw `fig` into `png` (and `svg` when given) with one layout and one draw per file; `narrow`: the
    phone-width drawing (see the module docstring)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure as MplFigure
    from matplotlib.lines import Line2D

    figure = MplFigure(figsize=(8.0, 5.0), dpi=DPI)
    canvas = FigureCanvasAgg(figure)
    ax = figure.add_axes((0.1, 0.1, 0.8, 0.8))
    xlog, ylog = fig.xscale == "log", fig.yscale == "log"
    ax.set_xscale(fig.xscale)
    ax.set_yscale(fig.yscale)
    data = [(_drawable_pairs(s, xlog and s.kind != "bar", ylog), s) for s in fig.series]
    styles = [series_style(i) for i in range(len(fig.series))]

    # Plot everything in its own style first: the view limits (and so the display positions that
    # decide what coincides) come from the data.
    artists: list[list[Any]] = []
    for ((xs, ys), s), (colour, marker) in zip(data, styles, strict=True):
        line, markers = _series_kind(s)
        if is_interval(s, xs):
            bars = ax.errorbar([xs[1]], [ys[1]], yerr=[[ys[1] - ys[0]], [ys[2] - ys[1]]], fmt=marker, color=colour,
                               markersize=6, elinewidth=1.6, capsize=4, capthick=1.4, zorder=3)
            artists.append(list(bars.get_children()))
        elif s.kind == "bar":
            artists.append(list(ax.bar([str(x) for x in xs], ys, color=colour)))
        elif s.kind == "scatter":
            artists.append([ax.scatter(xs, ys, s=30, color=colour, marker=marker, zorder=3)])
        elif s.kind == "step":
            artists.append(ax.step(xs, ys, _line_style(s.style), where="post", color=colour, linewidth=1.4))
        else:
            artists.append(ax.plot(xs, ys, linestyle=_line_style(s.style) if line else "none",
                                   marker=marker if markers else "", markersize=4, color=colour, linewidth=1.4))
    for value, _ in fig.hlines:
        ax.axhline(value, linestyle=":", linewidth=1, color="grey")
    for value, _ in fig.vlines:
        ax.axvline(value, linestyle=":", linewidth=1, color="grey")
    ax.autoscale_view()
    for axis, log in ((ax.xaxis, xlog), (ax.yaxis, ylog)):
        if log:
            low, high = sorted(axis.get_view_interval())
            _log_axis(axis, low, high)

    # Legend beside the axes, from proxies in each series' own style.
    handles = []
    for ((_, _), s), (colour, marker) in zip(data, styles, strict=True):
        line, markers = _series_kind(s)
        handles.append(Line2D([], [], color=colour, marker=marker if markers or s.kind == "bar" else "",
                              linestyle=_line_style(s.style) if line or s.style == INTERVAL else "none",
                              label=s.label))
    renderer = canvas.get_renderer()

    def fits(size: float, inches: float) -> Callable[[str], bool]:
        return lambda line: _text_size(renderer, line, size)[0] <= inches

    xlabel, ylabel = fig.xlabel, fig.ylabel
    room = NARROW_MAX_PX / DPI - 2 * PAD
    if narrow:  # wrapped to the widest the figure may be (the y label to the axes' height)
        xlabel = wrap_text(xlabel, fits(AXIS_FONT, room))
        ylabel = wrap_text(ylabel, fits(AXIS_FONT, NARROW_AXES_HEIGHT))
        for handle in handles:
            handle.set_label(wrap_text(str(handle.get_label()), fits(LEGEND_FONT, room - 0.45)))
    ax.set_xlabel(xlabel, fontsize=AXIS_FONT)
    ax.set_ylabel(ylabel, fontsize=AXIS_FONT)
    ax.tick_params(labelsize=TICK_FONT)

    # Lay out once: the axes box is fixed, the margins are the measured text around it.
    tick_w = max((_text_size(renderer, t, TICK_FONT)[0] for t in _tick_labels(ax.yaxis)), default=0.0)
    tick_h = max((_text_size(renderer, t, TICK_FONT)[1] for t in _tick_labels(ax.xaxis)), default=0.0)
    if fig.series and any(s.kind == "bar" for s in fig.series):
        tick_h = max(tick_h, max((_text_size(renderer, str(x), TICK_FONT)[1] for s in fig.series for x in s.x),
                                 default=0.0))
    line_h = _text_size(renderer, "Xg", AXIS_FONT)[1]
    xlabel_h = max(line_h, _text_size(renderer, xlabel, AXIS_FONT)[1])  # more than one line only when narrow
    ylabel_h = max(line_h, _text_size(renderer, ylabel, AXIS_FONT)[1])
    left = PAD + ylabel_h + 0.08 + tick_w + 0.1
    below_axes = xlabel_h + 0.08 + tick_h + 0.1  # the x tick labels and the x axis label
    bottom = PAD + below_axes
    axes_w, axes_h = AXES_SIZE
    title = fig.title
    if narrow:  # the title is centred on the axes, whose right edge is PAD + 0.15 from the figure's
        axes_w, axes_h = max(NARROW_AXES_MIN_WIDTH, NARROW_MAX_PX / DPI - left - PAD - 0.15), NARROW_AXES_HEIGHT
        title = wrap_text(title, fits(TITLE_FONT, axes_w + 0.3))
    ax.set_title(title, fontsize=TITLE_FONT, y=1.0, pad=8)  # y given: no automatic re-placement
    title_w, title_h = _text_size(renderer, title, TITLE_FONT)
    top = PAD + title_h + 0.12 + 0.12  # room for an offset text ("1e8") above the y axis
    legend = None
    legend_w = legend_h = 0.0
    if handles and narrow:  # one column under the x axis label
        legend = ax.legend(handles=handles, fontsize=LEGEND_FONT, loc="upper left", borderaxespad=0.0,
                           bbox_to_anchor=(-(left - PAD) / axes_w, -(below_axes + 0.1) / axes_h), ncols=1,
                           frameon=False)
    elif handles:
        columns = 1 if len(handles) <= 16 else 2
        legend = ax.legend(handles=handles, fontsize=LEGEND_FONT, loc="upper left", bbox_to_anchor=(1.02, 1.0),
                           borderaxespad=0.0, ncols=columns, frameon=False)
    if legend is not None:
        extent = legend.get_window_extent(renderer)
        legend_w, legend_h = extent.width / DPI, extent.height / DPI
    if narrow:
        right = PAD + 0.15
        bottom += legend_h + 0.1 if legend is not None else 0.0
        width = max(left + axes_w + right, legend_w + 2 * PAD)
        height = bottom + axes_h + top
    else:
        right = PAD + (legend_w + 0.02 * axes_w + 0.1 if legend is not None else 0.15)
        width = max(left + axes_w + right, title_w + 2 * PAD)
        height = max(bottom + axes_h + top, bottom + legend_h + top)
    figure.set_size_inches(width, height)
    ax.set_position((left / width, (height - top - axes_h) / height, axes_w / width, axes_h / height))

    notes = _dodge_intervals(figure, ax, data, artists) + _make_visible(ax, data, styles, artists)
    _label_hlines(ax, fig.hlines)
    for value, label in fig.vlines:
        ax.annotate(label, (value, 0.98), xycoords=("data", "axes fraction"), fontsize=7, color="grey",
                    rotation=90, va="top")
    scatter = [(s.label, x, y) for (xy, s) in data if s.kind == "scatter" for x, y in zip(*xy, strict=True)]
    if sum(1 for s in fig.series if s.kind == "scatter") > LONG_LEGEND:
        _label_points(ax, scatter)
    ax.grid(True, which="major", alpha=0.3)

    drawn = Drawn(notes=notes, size=(int(figure.bbox.width), int(figure.bbox.height)))  # as Agg sizes it
    png.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(png, format="png", metadata={"Software": None})
    drawn.paths.append(png)
    if svg is not None:
        import matplotlib

        with matplotlib.rc_context({"svg.fonttype": "none", "svg.hashsalt": fig.key}):
            figure.savefig(svg, format="svg", metadata={"Date": None, "Creator": None})
        drawn.paths.append(svg)
    return drawn


def is_interval(s: Series, xs: Sequence[float]) -> bool:
    """An interval series whose three points all survived (finite, positive on a log axis) at one x."""
    return s.style == INTERVAL and len(xs) == 3 and xs[0] == xs[1] == xs[2]


def dodge_clusters(positions: Sequence[float | None]) -> list[list[int]]:
    """Indices of the intervals (display x positions in points; None: not an interval) that would touch: runs
    of neighbours closer than DODGE_PT, in x order (ties in series order); only runs of two or more."""
    items = sorted((p, i) for i, p in enumerate(positions) if p is not None)
    runs: list[list[tuple[float, int]]] = []
    for p, i in items:
        if runs and p - runs[-1][-1][0] < DODGE_PT:
            runs[-1].append((p, i))
        else:
            runs.append([(p, i)])
    return [[i for _, i in run] for run in runs if len(run) > 1]


def dodge_offsets(positions: Sequence[float | None]) -> list[float]:
    """Display offsets (points): each cluster (dodge_clusters) redrawn DODGE_PT apart around its mean position;
    every other interval stays put."""
    offsets = [0.0] * len(positions)
    for cluster in dodge_clusters(positions):
        places = [positions[i] or 0.0 for i in cluster]
        mean = sum(places) / len(places)
        for rank, (i, place) in enumerate(zip(cluster, places, strict=True)):
            offsets[i] = mean + (rank - (len(cluster) - 1) / 2) * DODGE_PT - place
    return offsets


def _dodge_intervals(figure: Any, ax: Any, data: list[tuple[tuple[list[float], list[float]], Series]],
                     artists: list[list[Any]]) -> list[str]:
    """Move apart the error bars of intervals that would touch (a display offset: the data stay as they are)."""
    from matplotlib.transforms import offset_copy

    to_points = 72.0 / DPI
    xs = [xy[0][1] if is_interval(s, xy[0]) else None for xy, s in data]
    positions = [None if x is None else float(ax.transData.transform((x, 0.0))[0]) * to_points for x in xs]
    offsets = dodge_offsets(positions)
    for offset, drawn in zip(offsets, artists, strict=True):
        if offset:
            shifted = offset_copy(ax.transData, fig=figure, x=offset, y=0.0, units="points")
            for artist in drawn:
                artist.set_transform(shifted)
    notes = []
    for cluster in dodge_clusters(positions):
        labels = [data[i][1].label for i in cluster]
        values = {xs[i] for i in cluster}
        where = f"share x = {next(iter(values)):g}" if len(values) == 1 else "lie within a marker's width in x"
        notes.append(f"{_names(labels)} {where}: their intervals are drawn side by side, {DODGE_PT:g} pt apart")
    return notes


def line_label_rises(heights: Sequence[float]) -> list[float]:
    """Where each reference-line label goes, given its line's height in points: its baseline's rise above the
    line, in points. 0 (on the line, the text above it) unless a label already placed is within LINE_LABEL_PT;
    then below the line (-LINE_LABEL_PT), then further above and below in turn, until it is clear."""
    placed: list[float] = []
    rises = []
    for height in heights:
        for step in range(len(heights) + 1):
            rise = 0.0 if step == 0 else (-1) ** step * ((step + 1) // 2) * LINE_LABEL_PT
            if all(abs(height + rise - other) >= LINE_LABEL_PT for other in placed):
                break
        placed.append(height + rise)
        rises.append(rise)
    return rises


def _label_hlines(ax: Any, hlines: Sequence[tuple[float, str]]) -> None:
    to_points = 72.0 / DPI
    heights = [float(ax.transData.transform((0.0, value))[1]) * to_points for value, _ in hlines]
    for (value, label), rise in zip(hlines, line_label_rises(heights), strict=True):
        ax.annotate(label, (0.01, value), xycoords=("axes fraction", "data"), xytext=(0.0, rise + 1.0),
                    textcoords="offset points", fontsize=LINE_LABEL_FONT, color="grey")


def _display_points(ax: Any, xs: list[float], ys: list[float]) -> list[tuple[float, float]]:
    if not xs:
        return []
    to_points = 72.0 / DPI
    pixels = ax.transData.transform(list(zip(xs, ys, strict=True)))
    return [(float(a) * to_points, float(b) * to_points) for a, b in pixels]


def _make_visible(ax: Any, data: list[tuple[tuple[list[float], list[float]], Series]],
                  styles: list[tuple[str, str]], artists: list[list[Any]]) -> list[str]:
    """Restyle what would hide behind an earlier series (rings, dashes); return a note for each case."""
    notes: list[str] = []
    markers_so_far: list[tuple[float, float]] = []
    owners: list[str] = []
    lines_so_far: list[tuple[str, list[tuple[float, float]]]] = []
    overlays = 0
    for ((xs, ys), s), (colour, marker), drawn in zip(data, styles, artists, strict=True):
        line, markers = _series_kind(s)
        points = _display_points(ax, xs, ys)
        if line and len(points) >= 2:
            path = _display_points(ax, *_step_path(xs, ys)) if s.kind == "step" else points
            under = [label for label, other in lines_so_far if share_on_line(points, other) >= ON_LINE_SHARE]
            if under:
                overlays += 1
                for artist in drawn:
                    artist.set_linestyle((overlays * 2.0 % 6, (3.0, 3.0)))
                    artist.set_linewidth(1.8)
                    artist.set_zorder(2.5 + 0.01 * overlays)
                    if markers:
                        artist.set_markerfacecolor("none")
                        artist.set_markersize(6)
                notes.append(f"{s.label} lies on {_names(under)}: drawn dashed on top")
            lines_so_far.append((s.label, path))
        if markers and points:
            counts = ring_counts(points, markers_so_far)
            hidden = [i for i, k in enumerate(counts) if k]
            if hidden and s.kind == "scatter":
                _ring_points(ax, drawn[0], xs, ys, counts, colour, marker)
                below = {owners[j] for i in hidden for j, q in enumerate(markers_so_far)
                         if math.dist(points[i], q) < COINCIDENT_PT}
                where = "its point" if len(points) == 1 else f"{len(hidden)} of its {len(points)} points"
                notes.append(f"{s.label} coincides with {_names(sorted(below))} at {where}: drawn as a ring around it"
                             if len(points) == 1 else
                             f"{s.label} coincides with {_names(sorted(below))} at {where}: drawn as rings")
            markers_so_far += points
            owners += [s.label] * len(points)
    return notes


def _ring_points(ax: Any, collection: Any, xs: list[float], ys: list[float], counts: list[int], colour: str,
                 marker: str) -> None:
    """Redraw a scatter series: free points filled, points on earlier markers as hollow rings that grow
    with the number of markers beneath them."""
    collection.remove()
    free = [(x, y) for x, y, k in zip(xs, ys, counts, strict=True) if not k]
    if free:
        ax.scatter(*zip(*free, strict=True), s=30, color=colour, marker=marker, zorder=3)
    for depth in sorted({k for k in counts if k}):
        ring = [(x, y) for x, y, k in zip(xs, ys, counts, strict=True) if k == depth]
        size = 30 * (1.0 + 1.2 * depth) ** 2
        ax.scatter(*zip(*ring, strict=True), s=size, marker=marker if marker not in "+x1234" else "o",
                   facecolors="none", edgecolors=colour, linewidths=1.5, zorder=3.5)


def _names(labels: Sequence[str]) -> str:
    unique = list(dict.fromkeys(labels))
    return unique[0] if len(unique) == 1 else ", ".join(unique[:-1]) + " and " + unique[-1]


def _label_points(ax: Any, points: list[tuple[str, float, float]]) -> None:
    """Annotate each (label, x, y) without overlaps; call once the axes' position and scales are final."""
    to_points = 72.0 / DPI
    anchors = [tuple(v * to_points for v in ax.transData.transform((x, y))) for _, x, y in points]
    sizes = [(0.6 * LABEL_FONT * len(label), 1.2 * LABEL_FONT) for label, _, _ in points]
    x0, y0, x1, y1 = (float(v) * to_points for v in ax.get_window_extent().extents)
    bounds = (x0, y0, x1, y1)
    for (label, x, y), offset in zip(points, place_labels(anchors, sizes, bounds), strict=True):
        displaced = offset != (LABEL_GAP, LABEL_RISES[0])  # a thin leader line says whose label it is
        ax.annotate(label, (x, y), xytext=offset, textcoords="offset points", fontsize=LABEL_FONT,
                    arrowprops={"arrowstyle": "-", "linewidth": 0.5, "color": "grey"} if displaced else None)


def save_figure(fig: Figure, path: Path) -> Path:
    """Draw one figure as a PNG (draw_figure without the SVG); returns the path."""
    draw_figure(fig, path)
    return path
