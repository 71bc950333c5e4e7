"""The HTML page, the terminal layout and the figures, checked without a browser.

Expected values are written out here: which table is shown and which is linked, what a summary line
says, what a figure's notes say about constructed coincident data, colour distances from the CIELAB
formula computed in this file."""

from __future__ import annotations

import itertools
import math
from html.parser import HTMLParser
from pathlib import Path

import pytest

from precisionlab.report.cells import column_kind, fail_rows, is_prose_table
from precisionlab.report.html import describe_figure, headline, render_html
from precisionlab.results import Figure, LabResult, Series, Table


class Page(HTMLParser):
    """Ids, local links, and the start tags with their attributes."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self.ids: list[str] = []
        self.links: list[str] = []
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.feed(text)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        found = dict(attrs)
        self.tags.append((tag, found))
        if found.get("id"):
            self.ids.append(str(found["id"]))
        href = found.get("href")
        if tag == "a" and href and href.startswith("#"):
            self.links.append(href[1:])


FORMATS = Table("formats", "Number formats", ["format", "bits"], [["fp16", 16], ["bf16", 16], ["e4m3", 8]])


def test_a_repeated_table_is_linked_not_printed_again() -> None:
    first = LabResult("formats", "Formats", sections=[FORMATS])
    subset = LabResult("advise", "Advise", sections=[Table("formats", "Number formats", ["format", "bits"],
                                                           [["e4m3", 8]])])
    page = render_html([first, subset])
    assert page.count("<td class='short'>e4m3</td>") == 1  # the row is printed once
    assert "The same table as <a href='#formats-formats'>Number formats</a> in Formats (here: the rows e4m3)" in page
    extra = LabResult("limits", "Limits", sections=[Table("formats", "Number formats", ["format", "bits"],
                                                          [["e2m1", 4]])])
    assert "<td class='short'>e2m1</td>" in render_html([first, extra])  # a new row: printed in full


def test_every_id_is_unique_and_every_local_link_resolves() -> None:
    figure = Figure("f", "A figure", "x", "y", [Series("s", [1.0, 2.0], [1.0, 4.0])])
    results = [LabResult("a", "Lab A", sections=[FORMATS, Table("t", "T", ["k"], [[1]])], figures=[figure]),
               LabResult("b", "Lab B", sections=[FORMATS])]
    results[1].skip("torch_rows", "torch rows", "torch is not installed", "pip install torch", section="formats")
    page = Page(render_html(results, provenance={"precisionlab": "0.1.0", "command": "precisionlab run"}))
    assert len(page.ids) == len(set(page.ids))
    assert page.links and set(page.links) <= set(page.ids)


def test_numbers_are_right_aligned_and_never_wrap_prose_wraps_left() -> None:
    table = Table("t", "T", ["name", "value", "words"],
                  [["fp16", 1.5e-7, "a long explanation that certainly wraps somewhere on a page"],
                   ["bf16", math.inf, "short"]])
    page = render_html([LabResult("l", "L", sections=[table])])
    assert "<td class='num'>1.5e-07</td>" in page and "<td class='num'>inf</td>" in page
    assert "<td class='prose'>a long explanation" in page and "<td class='short'>fp16</td>" in page
    assert "<div class='scroll' role='region'" in page
    assert ".num{text-align:right;white-space:nowrap" in page


def test_a_prose_table_is_laid_out_as_cards() -> None:
    prose = "x " * 30
    table = Table("advice", "Advice", ["scenario", "a", "b", "c"], [["one", prose, prose, prose]])
    assert is_prose_table(table) and not is_prose_table(FORMATS)
    page = render_html([LabResult("advise", "Advise", sections=[table])])
    assert "<article class='card'><h4>one</h4><dl><dt>a</dt>" in page and "<table>" not in page.split("Advice")[-1]


def test_the_summary_has_a_headline_and_links_failures_and_skipped_parts() -> None:
    checks = Table("checks", "Checks", ["variant", "status"], [["fp32", "PASS"], ["fp16_acc16", "FAILED (expected)"],
                                                              ["e4m3", "FAIL"]])
    assert fail_rows(checks) == ["e4m3"]  # an expected failure is a demonstration, not a failed check
    result = LabResult("gemm", "GEMM", sections=[checks], summary="Ratio 8.01 (ulp ratio 8). Errors are exact.")
    result.skip("torch_matmul", "torch timings", "torch is not installed", "pip install torch", section="checks")
    assert headline(result) == "Ratio 8.01 (ulp ratio 8)."
    page = render_html([result])
    summary = page.split("id='summary'")[1].split("</section>")[0]
    assert "Ratio 8.01 (ulp ratio 8)." in summary and "Errors are exact" not in summary
    assert "<a class='bad' href='#gemm-checks'>FAIL</a> Checks: e4m3" in summary
    assert "<a class='warn' href='#gemm-checks'>skipped</a> torch timings (torch is not installed)" in summary


def test_alt_text_says_what_the_figure_shows() -> None:
    fig = Figure("e", "Error", "bits per element", "relative error", yscale="log",
                 series=[Series("int8", [8.0], [1e-3], kind="scatter"), Series("int4", [4.0], [2e-2], kind="scatter")],
                 note="Lower is better.")
    alt = describe_figure(fig, ["int4 coincides with int8 at its point: drawn as a ring around it"])
    assert alt.startswith("Scatter plot: relative error (log scale) against bits per element.")
    assert "2 series: int8, int4." in alt and "x from 4 to 8, y from 0.001 to 0.02." in alt
    assert alt.endswith("Lower is better. int4 coincides with int8 at its point: drawn as a ring around it.")
    tags = Page(render_html([LabResult("q", "Q", figures=[fig])])).tags
    image = next(attrs for tag, attrs in tags if tag == "img")
    assert image["alt"] == describe_figure(fig) and image["width"] and image["height"]


def test_a_column_of_numbers_with_an_overflow_stays_numeric() -> None:
    assert column_kind([1.0, "inf", None, 2]) == "number"
    assert column_kind(["0x7e", "0x7f"]) == "text" and column_kind([True, False]) == "text"


# ---- terminal layout ---------------------------------------------------------------------------------


def test_wide_tables_split_into_column_groups_that_fit() -> None:
    from precisionlab.report.terminal import allocate, column_groups

    widths = [20, 12, 12, 12, 12, 12, 12]
    groups = column_groups(widths, 80)
    assert all(group[0] == 0 for group in groups) and sorted({i for g in groups for i in g}) == list(range(7))
    assert all(sum(widths[i] + 3 for i in g) + 1 <= 80 for g in groups)
    assert column_groups([10, 10], 200) == [[0, 1]]
    got = allocate([10, 5, 5], [10, 40, 20], 60)
    assert got[0] == 10 and sum(got) <= 60 and got[1] > got[2] >= 5  # the spare room goes where it is wanted


# ---- figures -------------------------------------------------------------------------------------------


def _lab(colour: str) -> tuple[float, float, float]:
    """sRGB hex -> CIELAB (D65), the textbook formulas."""
    def linear(c: float) -> float:
        return ((c + 0.055) / 1.055) ** 2.4 if c > 0.04045 else c / 12.92

    r, g, b = (linear(int(colour[i:i + 2], 16) / 255) for i in (1, 3, 5))
    x = (0.4124 * r + 0.3576 * g + 0.1805 * b) / 0.95047
    y = 0.2126 * r + 0.7152 * g + 0.0722 * b
    z = (0.0193 * r + 0.1192 * g + 0.9505 * b) / 1.08883

    def f(t: float) -> float:
        return t ** (1 / 3) if t > 216 / 24389 else (24389 / 27 * t + 16) / 116

    return 116 * f(y) - 16, 500 * (f(x) - f(y)), 200 * (f(y) - f(z))


def test_the_palette_colours_are_far_apart_and_readable_on_white() -> None:
    from precisionlab.report.plots import MARKERS, PALETTE, series_style

    labs = [_lab(c) for c in PALETTE]
    assert min(math.dist(a, b) for a, b in itertools.combinations(labs, 2)) >= 20  # tf32 and ue8m0 were both C2
    assert max(lab[0] for lab in labs) <= 76
    first = [series_style(i) for i in range(len(PALETTE))]
    assert len({c for c, _ in first}) == len(first) and len({m for _, m in first}) == len(first)
    assert len(MARKERS) > len(PALETTE)


def test_coincident_points_are_rings_and_coincident_lines_dashed(tmp_path: Path) -> None:
    from precisionlab.report.plots import draw_figure

    points = Figure("p", "P", "bits", "error", yscale="log", series=[
        Series("mxfp4", [4.25], [0.1], kind="scatter"), Series("mxfp4:rceil", [4.25], [0.1001], kind="scatter"),
        Series("int4", [4.5], [0.05], kind="scatter")])
    notes = draw_figure(points, tmp_path / "p.png").notes
    assert notes == ["mxfp4:rceil coincides with mxfp4 at its point: drawn as a ring around it"]
    lines = Figure("l", "L", "x", "y", yscale="log", series=[
        Series("fp32 max", [0.0, 100.0], [3.4028e38, 3.4028e38], style="--"),
        Series("bf16 max", [0.0, 100.0], [3.3895e38, 3.3895e38], style="--"),
        Series("fp16 max", [0.0, 100.0], [65504.0, 65504.0], style="--"),
        Series("crossing", [0.0, 100.0], [1.0, 1e40])])
    assert draw_figure(lines, tmp_path / "l.png").notes == ["bf16 max lies on fp32 max: drawn dashed on top"]
    apart = Figure("a", "A", "x", "y", series=[Series("a", [1.0], [1.0], kind="scatter"),
                                               Series("b", [2.0], [2.0], kind="scatter")])
    assert draw_figure(apart, tmp_path / "a.png").notes == []


def test_a_figure_is_drawn_once_per_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import matplotlib.figure

    from precisionlab.report.plots import draw_figure

    calls = []
    real = matplotlib.figure.Figure.draw

    def counted(self, renderer):  # type: ignore[no-untyped-def]
        calls.append(type(renderer).__name__)
        return real(self, renderer)

    monkeypatch.setattr(matplotlib.figure.Figure, "draw", counted)
    fig = Figure("f", "F", "n", "err", xscale="log", yscale="log",
                 series=[Series(f"s{i}", [1.0, 10.0, 100.0], [1e-3 * (i + 1), 1e-2, 1e-1]) for i in range(8)],
                 hlines=[(0.05, "limit")], vlines=[(10.0, "ridge")])
    drawn = draw_figure(fig, tmp_path / "f.png", tmp_path / "f.svg")
    assert len(calls) == 2  # one draw for the PNG, one for the SVG: no layout passes (tight_layout drew twice)
    assert [p.name for p in drawn.paths] == ["f.png", "f.svg"]
    assert (tmp_path / "f.svg").read_text().lstrip().startswith("<?xml")
    from PIL import Image

    with Image.open(tmp_path / "f.png") as image:
        assert image.size == drawn.size


def test_log_ticks_are_plain_unicode_powers_of_ten() -> None:
    from precisionlab.report.plots import log_tick

    assert [log_tick(v) for v in (1e-3, 1.0, 100.0, 2.0, 0.0)] == ["10⁻³", "10⁰", "10²", "2", ""]
