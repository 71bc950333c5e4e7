"""The report's layout rules that a newcomer tripped over: figures of intervals, reference-line labels, long
tables, figure sizes on a phone, and summary wording (the browser test checks the page as a whole)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from precisionlab.report import plots
from precisionlab.report.html import FIGURE_MIN_SCALE, LONG_TABLE_ROWS, FigureFile, render_html
from precisionlab.results import INTERVAL_STYLE, Figure, LabResult, Series, Table


def test_dodge_offsets_spread_the_intervals_that_would_touch() -> None:
    """Display positions in points; DODGE_PT = 9."""
    d = plots.DODGE_PT
    assert plots.dodge_offsets([100.0, 100.0, 300.0]) == [-d / 2, d / 2, 0.0]  # GPTQ and RTN at one x
    assert plots.dodge_offsets([100.0, None, 100.0, 100.0]) == [-d, 0.0, 0.0, d]
    # int4:g128 at 4.469 and nvfp4 at 4.5 bits: 4 pt apart, spread to 9 around their mean 102
    assert plots.dodge_offsets([100.0, 104.0, 200.0]) == [-2.5, 2.5, 0.0]
    assert plots.dodge_offsets([100.0, 109.0]) == [0.0, 0.0]  # already a marker apart
    assert plots.dodge_clusters([300.0, 100.0, 104.0]) == [[1, 2]]


def test_line_labels_never_sit_on_each_other() -> None:
    gap = plots.LINE_LABEL_PT
    assert plots.line_label_rises([100.0, 300.0]) == [0.0, 0.0]  # far apart: each on its line
    assert plots.line_label_rises([100.0, 97.0]) == [0.0, -gap]  # 'reference' at 0 and 'threshold -1': below
    # the third: on its line (95) is 5 pt from 100, below (86) 2 pt from 88, above (104) 4 pt from 100: 77
    assert plots.line_label_rises([100.0, 97.0, 95.0]) == [0.0, -gap, -2 * gap]


def colour_columns(png: Path, colour: str) -> np.ndarray:
    """x pixel positions of the pixels within 40 (per channel) of `colour` in the PNG."""
    from matplotlib.image import imread

    image = imread(str(png))[..., :3] * 255
    target = np.array([int(colour[i:i + 2], 16) for i in (1, 3, 5)], dtype=float)
    near = np.all(np.abs(image - target) < 40, axis=2)
    near[:, int(near.shape[1] * 0.8):] = False  # the legend, beside the axes
    return np.nonzero(near)[1]


def test_two_intervals_at_one_x_are_drawn_side_by_side(tmp_path: Path) -> None:
    """GPTQ and RTN of one scheme have the same bits per weight: their error bars were drawn on one vertical line.
    Drawn now DODGE_PT apart: DODGE_PT * DPI / 72 pixels between the two colours' centres."""
    fig = Figure(key="f", title="t", xlabel="bits per weight", ylabel="difference",
                 series=[Series("gptq", [4.25] * 3, [-12.0, -4.0, 3.0], style=INTERVAL_STYLE),
                         Series("rtn", [4.25] * 3, [-15.0, -6.0, 2.0], style=INTERVAL_STYLE),
                         Series("int8", [8.0] * 3, [-3.0, 0.0, 3.0], style=INTERVAL_STYLE)],
                 hlines=[(0.0, "reference"), (-1.0, "threshold -1")])
    drawn = plots.draw_figure(fig, tmp_path / "f.png")
    first, second = (colour_columns(tmp_path / "f.png", plots.PALETTE[i]) for i in (0, 1))
    assert first.size and second.size
    centre_0, centre_1 = np.median(first), np.median(second)
    assert abs(abs(centre_1 - centre_0) - plots.DODGE_PT * plots.DPI / 72) < 2.5, (centre_0, centre_1)
    assert drawn.notes == [f"gptq and rtn share x = 4.25: their intervals are drawn side by side, "
                           f"{plots.DODGE_PT:g} pt apart"]


def test_an_interval_is_an_error_bar_with_one_marker() -> None:
    interval = Series("a", [1.0] * 3, [0.0, 1.0, 2.0], style=INTERVAL_STYLE)
    assert plots._series_kind(interval) == (False, True)
    assert plots.is_interval(interval, [1.0, 1.0, 1.0])
    assert not plots.is_interval(interval, [1.0, 1.0])  # a point dropped (not finite): drawn as plain points


def table(rows: int) -> Table:
    return Table(key="t", title="tensors", columns=["name", "value"],
                 rows=[[f"blk.{i}", float(i)] for i in range(rows)], note="the note")


def test_a_long_table_is_folded_with_its_row_count_and_its_note_stays() -> None:
    page = render_html([LabResult(name="audit", title="Audit", sections=[table(LONG_TABLE_ROWS + 1)])])
    assert f"<details class='long'><summary>{LONG_TABLE_ROWS + 1} rows: show the table</summary>" in page
    assert page.index("</details>") < page.index("the note")
    short = render_html([LabResult(name="audit", title="Audit", sections=[table(LONG_TABLE_ROWS)])])
    assert "class='long'" not in short


def test_a_figure_is_never_shown_below_its_readable_size() -> None:
    fig = Figure(key="k", title="t", xlabel="x", ylabel="y", series=[Series("s", [1.0], [2.0])])
    page = render_html([LabResult(name="lab", title="Lab", figures=[fig])],
                       {("lab", "k"): FigureFile("lab_k.png", 900, 500)})
    assert f"style='min-width:{round(FIGURE_MIN_SCALE * 900)}px'" in page
    assert "<div class='figbox'><a href='lab_k.png'><img src='lab_k.png'" in page


def test_a_skipped_part_says_skipped_once() -> None:
    result = LabResult(name="x", title="X", sections=[Table(key="t", title="t", columns=["a"], rows=[[1]])])
    result.skip("eval", "task-level evaluation", "torch is not installed", "pip install torch", section="t")
    page = render_html([result])
    assert "<b>skipped:</b> task-level evaluation: torch is not installed (install: pip install torch)" in page
    assert "skipped, torch" not in page and ": skipped" not in page


@pytest.mark.parametrize(("stalled", "nan", "words"), [
    (True, True, ("fp16 without scaling stalled (final loss", "the weights became NaN")),
    (False, False, ("fp16 without scaling did not stall", "the weights stayed finite")),
])
def test_the_loss_scaling_summary_is_words_not_python_booleans(stalled: bool, nan: bool,
                                                               words: tuple[str, str]) -> None:
    from precisionlab.labs.lossscale import _summary

    text = _summary({"train.fp16_plain.stalled": stalled, "train.fp16_plain.final_loss": 0.69,
                     "train.fp16_master_scaled.final_loss": 0.01, "train.bf16_master.final_loss": 0.02,
                     "train.clip_before_unscale.slowdown": 3.0, "train.no_skip.nan_weights": nan})
    assert all(w in text for w in words) and "True" not in text and "False" not in text


def test_the_axpy_summary_says_when_fp16_is_numpy_software() -> None:
    from precisionlab.labs.axpy import summary

    assert summary(0.15, 79.3, ["fp16", "bf16"]).startswith(
        "numpy's software fp16 runs 0.15× the fp32 speed, though it moves half the bytes")
    assert summary(1.9, 79.3, []).startswith("fp16 runs 1.9× the fp32 speed")


def png_size(path: Path) -> tuple[int, int]:
    """Width and height from the PNG's IHDR chunk (the file, not what the drawing code says of it)."""
    head = path.read_bytes()[:24]
    return int.from_bytes(head[16:20], "big"), int.from_bytes(head[20:24], "big")


def test_wrap_text_breaks_between_words_only() -> None:
    short = lambda line: len(line) <= 10  # noqa: E731
    assert plots.wrap_text("one two three four", short) == "one two\nthree four"
    assert plots.wrap_text("a-very-long-word fits", short) == "a-very-long-word\nfits"  # a long word stays whole
    assert plots.wrap_text("", short) == ""


def test_a_narrow_drawing_fits_a_phone_legend_axes_and_title_included(tmp_path: Path) -> None:
    """A phone (390 px) showed each figure at FIGURE_MIN_SCALE of its ~1000 px, its legend and axes cut off in a
    scrolling box. The narrow drawing is whole within NARROW_MAX_PX: legend below, long text wrapped."""
    labels = [f"decode, weights int{b}, batch 1..32, a long legend label {b}" for b in range(8)]
    fig = Figure(key="f", title="Decode and prefill of a large model on a very long accelerator name roofline",
                 xlabel="arithmetic intensity of the whole decode step (FLOP/byte)",
                 ylabel="attained TFLOP/s per device over every layer", xscale="log", yscale="log",
                 series=[Series(label, [1.0, 10.0, 100.0], [0.5 * (i + 1), 5.0 * (i + 1), 50.0 * (i + 1)])
                         for i, label in enumerate(labels)])
    plots.draw_figure(fig, tmp_path / "wide.png")
    plots.draw_figure(fig, tmp_path / "narrow.png", narrow=True)
    (wide_w, wide_h), (narrow_w, narrow_h) = png_size(tmp_path / "wide.png"), png_size(tmp_path / "narrow.png")
    assert wide_w > 2 * plots.NARROW_MAX_PX
    assert narrow_w <= plots.NARROW_MAX_PX and narrow_h > wide_h  # the legend went below the axes
    from matplotlib.image import imread

    image = imread(str(tmp_path / "narrow.png"))[..., :3] * 255
    bottom = image[int(image.shape[0] * 0.55):]  # the legend's rows
    for colour in plots.PALETTE[:len(labels)]:
        target = np.array([int(colour[i:i + 2], 16) for i in (1, 3, 5)], dtype=float)
        assert np.any(np.all(np.abs(bottom - target) < 30, axis=2)), f"{colour}'s legend entry is not drawn"


def test_a_figure_with_a_narrow_drawing_switches_to_it_where_the_wide_one_would_shrink() -> None:
    fig = Figure(key="k", title="t", xlabel="x", ylabel="y", series=[Series("s", [1.0], [2.0])])
    page = render_html([LabResult(name="lab", title="Lab", figures=[fig])],
                       {("lab", "k"): FigureFile("lab_k.png", 1000, 500, narrow=("lab_k_narrow.png", 360, 600))})
    # the wide drawing is shown at >= 0.7 of its 1000 px down to a 700 px page body, 764 px with the page padding
    threshold = round(FIGURE_MIN_SCALE * 1000) + 64 - 1
    assert (f"<picture><source media='(max-width: {threshold}px)' srcset='lab_k_narrow.png' width='360' "
            f"height='600'><img src='lab_k.png' width='1000' height='500'") in page
    assert "min-width" not in page.split("<figure")[1]
