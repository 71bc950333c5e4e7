"""The HTML report: one self-contained page (no script, no external resource) over every lab's result.

Layout rules (what the browser test in tests/test_report_browser.py holds the page to):

- Every table sits in its own horizontally scrolling box, so a wide table never widens the page;
  numeric cells are right-aligned and never wrap, text is left-aligned, short text (codes, names)
  stays on one line and prose wraps.
- A table of prose (three or more prose columns, the advisor's) is laid out as one card per row.
- A table that repeats an earlier one (same key and columns, every row already shown) is not
  printed again: its heading stays and links to the first.
- The page opens with the provenance (version, commit, date, machine, versions, the command) and a
  summary: one line per lab with its headline finding, any failed check and any skipped part,
  each linking to its section.
- Figures carry alt text that says what they show (kind, axes, series, ranges) and a caption with
  the figure's note and what was drawn so that coincident series stay visible.
"""

from __future__ import annotations

import html
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from precisionlab.report.cells import SHORT_TEXT, column_kinds, fail_rows, format_cell, is_prose_table
from precisionlab.results import Figure, LabResult, Scalar, Table, jsonable

CSS = """
:root{--fg:#1b1b1f;--muted:#545861;--line:#d5d8de;--head:#eef1f7;--accent:#0b57d0;--bad:#b3261e;--warn:#8a5300}
*{box-sizing:border-box}
html{-webkit-text-size-adjust:100%}
body{margin:0;color:var(--fg);font:15px/1.5 system-ui,-apple-system,"Segoe UI",Roboto,"Noto Sans",sans-serif}
.page{max-width:1560px;margin:0 auto;padding:1.25rem 2rem 3rem}
a{color:var(--accent)}
h1{font-size:1.7rem;margin:.2rem 0 .6rem}
h2{font-size:1.35rem;margin:2.2rem 0 .5rem;padding-top:.4rem;border-top:2px solid var(--line)}
h3{font-size:1.05rem;margin:1.6rem 0 .35rem}
h4{font-size:1rem;margin:0 0 .4rem}
p{max-width:110ch}
.note,.muted,figcaption{color:var(--muted)}
.note{font-size:.92rem;margin:.3rem 0 .8rem}
.scroll{overflow-x:auto;width:fit-content;max-width:100%;border:1px solid var(--line);border-radius:4px;margin:.3rem 0;
  scrollbar-width:auto;scrollbar-color:#8a8f99 #eef1f7;
  background:linear-gradient(to right,#fff 50%,#fff0) left/3rem 100% no-repeat local,
    linear-gradient(to left,#fff 50%,#fff0) right/3rem 100% no-repeat local,
    radial-gradient(farthest-side at 0 50%,#0007,#0000) left/1.4rem 100% no-repeat scroll,
    radial-gradient(farthest-side at 100% 50%,#0007,#0000) right/1.4rem 100% no-repeat scroll}
.scroll::-webkit-scrollbar{height:12px}
.scroll::-webkit-scrollbar-track{background:#eef1f7}
.scroll::-webkit-scrollbar-thumb{background:#8a8f99;border-radius:6px;border:2px solid #eef1f7}
.scroll:focus{outline:2px solid var(--accent);outline-offset:1px}
table{border-collapse:separate;border-spacing:0;font-size:.86rem}
th,td{padding:3px 8px;border-bottom:1px solid var(--line);vertical-align:top;text-align:left}
thead th{background:var(--head);font-weight:600;vertical-align:bottom;white-space:normal;overflow-wrap:normal}
th.num{white-space:normal}
.scroll th:first-child,.scroll td:first-child{position:sticky;left:0;z-index:1;background:#fff;
  box-shadow:inset -1px 0 0 var(--line)}
.scroll thead th:first-child{background:var(--head)}
table.compact{font-size:.8rem}
table.compact th,table.compact td{padding:2px 6px}
.scroll-hint{font-size:.85rem;color:var(--muted);margin:.1rem 0 0}
tbody tr:last-child td{border-bottom:0}
.num{text-align:right;white-space:nowrap;font-variant-numeric:tabular-nums}
.short{white-space:nowrap}
.prose{min-width:20ch;max-width:56ch}
.cards{display:grid;grid-template-columns:repeat(auto-fill,minmax(min(30rem,100%),1fr));gap:1rem;margin:.5rem 0}
.card{border:1px solid var(--line);border-radius:6px;padding:.7rem 1rem;min-width:0}
.card dl{display:grid;grid-template-columns:max-content minmax(0,1fr);gap:.3rem 1rem;margin:0}
.card dt{font-weight:600;color:var(--muted)}
.card dd{margin:0;overflow-wrap:anywhere}
.summary td:first-child{white-space:nowrap}
.bad{color:var(--bad);font-weight:600}
.warn{color:var(--warn)}
.provenance dl{display:grid;grid-template-columns:repeat(auto-fill,minmax(min(19rem,100%),1fr));gap:.1rem 1.5rem;
  margin:.3rem 0;font-size:.88rem}
.provenance dl>div{display:flex;gap:.6rem;min-width:0}
.provenance .wide{grid-column:1/-1}
.provenance dt{color:var(--muted);flex:none}
.provenance dd{margin:0;overflow-wrap:anywhere;min-width:0}
code{font-size:.9em;overflow-wrap:anywhere}
nav>ol{columns:2 26rem;column-gap:2.5rem;margin:.2rem 0;padding-left:1.4rem}
nav li{break-inside:avoid-column}
nav ol ol{font-size:.88rem;padding-left:1.2rem;margin:.1rem 0 .5rem}
figure{margin:1rem 0 1.5rem}
figure .figbox{overflow-x:auto;max-width:100%;scrollbar-width:auto}
figure img{display:block;max-width:100%;height:auto}
details.long>summary{cursor:pointer;color:var(--accent);margin:.2rem 0}
@media (max-width:700px){
  .page{padding:.8rem .8rem 2rem}
  table.summary,table.summary tbody,table.summary tr,table.summary td{display:block;width:auto}
  table.summary thead{display:none}
  table.summary tr{border-bottom:1px solid var(--line);padding:.4rem .6rem}
  .scroll table.summary td{border:0;padding:.1rem 0;position:static;box-shadow:none}
  table.summary td.prose{min-width:0;max-width:none}
  table.summary td.checks::before{content:"checks: ";color:var(--muted)}
}
figcaption{font-size:.9rem;max-width:110ch;margin-top:.3rem}
details{margin:.8rem 0}
.skipped{color:var(--warn)}
.ref{font-style:italic}
@media print{
  .page{max-width:none;padding:0}
  body{font-size:10pt}
  .scroll{overflow:visible;border:0;width:auto;background:none}
  table{font-size:6.5pt;max-width:100%}
  th,td{padding:1px 3px}
  .prose{min-width:0}
  .cards{display:block}
  .card{margin:0 0 .5rem}
  section.lab{break-before:page}
  figure,tr,.card,h3{break-inside:avoid}
  h3{break-after:avoid}
  a{color:inherit;text-decoration:none}
}
"""

LONG_TABLE_ROWS = 40
"""A table of more rows than this is folded (a <details> whose summary gives the row count); its note stays."""
FIGURE_MIN_SCALE = 0.7
"""A figure is never shown smaller than this share of its pixel size (its axis text stays readable): where the
page is narrower, the figure's narrow drawing (legend below, at most report.plots.NARROW_MAX_PX wide) is shown
instead, whole; a figure drawn only once scrolls sideways in its own box."""
PAGE_SIDE_PADDING_PX = 64
"""The page's left and right padding together above 700 px (.page: 2rem each side)."""
COMPACT_COLUMNS = 12
"""A table of this many columns or more gets the compact type (smaller font, tighter cells), to fit 1280 px."""
WIDE = ("command", "options", "host", "versions", "git_commit")
"""Provenance fields given a whole line of their own."""
SUMMARY_LIMIT = 240
"""A lab's headline in the summary is its summary's first sentence, cut to about this many characters."""


@dataclass
class FigureFile:
    """A drawn figure as the page refers to it: file names (relative to the page), pixel size, notes."""

    png: str
    width: int
    height: int
    svg: str | None = None
    notes: list[str] = field(default_factory=list)
    narrow: tuple[str, int, int] | None = None
    """The phone-width drawing (report.plots' narrow=True): file name, width, height."""


def anchor(*parts: str) -> str:
    """An id for a lab, a table or a figure: lowercase words joined by '-'."""
    return "-".join(re.sub(r"[^a-z0-9]+", "-", p.lower()).strip("-") for p in parts)


def headline(result: LabResult) -> str:
    """The first sentence of the lab's summary (its headline finding), else its title."""
    text = result.summary.strip()
    if not text:
        return result.title
    match = re.search(r"(?<=[.!?])\s+(?=[A-Z(])", text)
    first = text[: match.start()] if match else text
    return first if len(first) <= SUMMARY_LIMIT else first[: SUMMARY_LIMIT - 1].rstrip() + "…"


def describe_figure(fig: Figure, notes: Sequence[str] = ()) -> str:
    """Alt text: what the figure plots, over which axes and ranges, which series, and any note."""
    kinds = {s.kind for s in fig.series} or {"line"}
    kind = "Scatter plot" if kinds == {"scatter"} else "Bar chart" if kinds == {"bar"} else "Chart"
    if kinds == {"line"} or kinds == {"step"}:
        kind = "Line chart"
    scale = {"log": " (log scale)", "linear": ""}
    xs = [float(v) for s in fig.series if s.kind != "bar" for v in s.x if _finite(v)]
    ys = [float(v) for s in fig.series for v in s.y if _finite(v)]
    parts = [f"{kind}: {fig.ylabel}{scale.get(fig.yscale, '')} against {fig.xlabel}{scale.get(fig.xscale, '')}."]
    labels = [s.label for s in fig.series]
    if labels:
        shown = ", ".join(labels[:12]) + (f" and {len(labels) - 12} more" if len(labels) > 12 else "")
        parts.append(f"{len(labels)} series: {shown}.")
    if xs and ys:
        parts.append(f"x from {min(xs):.3g} to {max(xs):.3g}, y from {min(ys):.3g} to {max(ys):.3g}.")
    lines = [label for _, label in [*fig.hlines, *fig.vlines]]
    if lines:
        parts.append(f"Reference lines: {', '.join(lines)}.")
    if fig.note:
        parts.append(fig.note)
    parts += [f"{n}." for n in notes]
    return " ".join(parts)


def _finite(v: object) -> bool:
    import math

    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


class _Shown:
    """The tables already printed, by (key, columns): their anchor, title and rows."""

    def __init__(self) -> None:
        self.tables: dict[tuple[str, tuple[str, ...]], tuple[str, str, str, list[tuple[object, ...]]]] = {}

    def earlier(self, table: Table) -> tuple[str, str, str] | None:
        """(anchor, title, lab title) of an earlier table this one repeats, if any."""
        seen = self.tables.get((table.key, tuple(table.columns)))
        if seen is None:
            return None
        rows = set(seen[3])
        return seen[:3] if all(_row_key(r) in rows for r in table.rows) else None

    def add(self, table: Table, where: str, lab_title: str) -> None:
        self.tables.setdefault((table.key, tuple(table.columns)),
                               (where, table.title, lab_title, [_row_key(r) for r in table.rows]))


def _row_key(row: Sequence[Scalar]) -> tuple[object, ...]:
    return tuple(jsonable(list(row)))


def render_html(results: Sequence[LabResult], figures: Mapping[tuple[str, str], FigureFile] | None = None,
                provenance: Mapping[str, object] | None = None, origins: Mapping[str, str] | None = None) -> str:
    """The report page. figures: (lab name, figure key) -> its files (default: <lab>_<key>.png, 880x550);
    origins: lab name -> a line under its heading saying where a result made elsewhere came from."""
    figures = figures or {}
    origins = origins or {}
    shown = _Shown()
    ids: set[str] = set()

    def unique(candidate: str) -> str:
        name, n = candidate, 2
        while name in ids:
            name, n = f"{candidate}-{n}", n + 1
        ids.add(name)
        return name

    lab_ids = {r.name: unique(anchor("lab", r.name)) for r in results}
    table_ids = {(r.name, i): unique(anchor(r.name, t.key)) for r in results for i, t in enumerate(r.sections)}
    figure_ids = {(r.name, f.key): unique(anchor(r.name, "figure", f.key)) for r in results for f in r.figures}
    skip_ids = {(r.name, s.key): unique(anchor(r.name, "skipped", s.key)) for r in results for s in r.skipped}

    out = ["<!doctype html>", "<html lang='en'><head><meta charset='utf-8'>",
           "<meta name='viewport' content='width=device-width, initial-scale=1'>",
           "<title>precisionlab report</title>", f"<style>{CSS}</style></head><body><div class='page'>",
           "<header><h1>precisionlab report</h1>"]
    if provenance:
        out.append(_provenance(provenance))
    out.append("</header>")
    out.append(_summary(results, lab_ids, table_ids, skip_ids))
    out.append(_contents(results, lab_ids, table_ids, figure_ids))
    out.append("<main>")
    for result in results:
        out.append(f"<section class='lab' id='{lab_ids[result.name]}' aria-labelledby='{lab_ids[result.name]}-h'>")
        out.append(f"<h2 id='{lab_ids[result.name]}-h'>{_e(result.title)}</h2>")
        if result.name in origins:
            out.append(f"<p class='muted origin'>{_e(origins[result.name])}</p>")
        if result.summary:
            out.append(f"<p>{_e(result.summary)}</p>")
        for part in result.skipped:
            out.append(f"<p class='skipped' id='{skip_ids[(result.name, part.key)]}'><b>skipped:</b> "
                       f"{_e(part.message())}</p>")
        for index, table in enumerate(result.sections):
            where = table_ids[(result.name, index)]
            out.append(f"<section class='part' id='{where}'><h3>{_e(table.title)}</h3>")
            earlier = shown.earlier(table)
            if earlier is not None:
                link, title, lab_title = earlier
                subset = "" if len(table.rows) == len(shown.tables[(table.key, tuple(table.columns))][3]) else (
                    f" (here: the rows {_e(', '.join(format_cell(r[0]) for r in table.rows))})")
                out.append(f"<p class='ref'>The same table as <a href='#{link}'>{_e(title)}</a> in "
                           f"{_e(lab_title)}{subset}.</p>")
            else:
                body = _cards(table) if is_prose_table(table) else _table(table)
                if len(table.rows) > LONG_TABLE_ROWS:
                    body = (f"<details class='long'><summary>{len(table.rows)} rows: show the table</summary>{body}"
                            "</details>")
                out.append(body)
                if table.note:
                    out.append(f"<p class='note'>{_e(table.note)}</p>")
                shown.add(table, where, result.title)
            out.append("</section>")
        for fig in result.figures:
            out.append(_figure(result, fig, figure_ids[(result.name, fig.key)], figures.get((result.name, fig.key))))
        if result.findings:  # folded: a lab may have hundreds of keys
            out.append(f"<details><summary>findings ({len(result.findings)} keys)</summary>"
                       "<div class='scroll'><table><thead><tr><th scope='col'>key</th><th scope='col' class='num'>"
                       "value</th></tr></thead><tbody>")
            for key, value in result.findings.items():
                kind = "num" if isinstance(value, (int, float)) and not isinstance(value, bool) else "short"
                out.append(f"<tr><td class='short'><code>{_e(key)}</code></td>"
                           f"<td class='{kind}'>{_e(format_cell(value))}</td></tr>")
            out.append("</tbody></table></div></details>")
        out.append("</section>")
    out.append("</main></div></body></html>")
    return "\n".join(out)


def _e(text: object) -> str:
    return html.escape(str(text), quote=True)


def _provenance(provenance: Mapping[str, object]) -> str:
    rows = "".join(f"<div class='{'wide' if key in WIDE else ''}'><dt>{_e(key.replace('_', ' '))}</dt>"
                   f"<dd>{_code(key, value)}</dd></div>"
                   for key, value in provenance.items() if value not in (None, ""))
    return f"<section class='provenance' aria-label='How this report was made'><dl>{rows}</dl></section>"


def _code(key: str, value: object) -> str:
    if isinstance(value, Mapping) and key == "options":
        return ", ".join(f"<code>{_e(k)}={_e(v)}</code>" for k, v in value.items())
    if isinstance(value, Mapping):
        return " · ".join(f"{_e(k)} {_e(v)}" for k, v in value.items())
    if key in ("command", "git_commit"):
        return f"<code>{_e(value)}</code>"
    return _e(value)


def _contents(results: Sequence[LabResult], lab_ids: Mapping[str, str], table_ids: Mapping[tuple[str, int], str],
              figure_ids: Mapping[tuple[str, str], str]) -> str:
    out = ["<nav aria-label='Contents'><h2>Contents</h2><ol>"]
    for result in results:
        out.append(f"<li><a href='#{lab_ids[result.name]}'>{_e(result.title)}</a><ol>")
        for index, table in enumerate(result.sections):
            out.append(f"<li><a href='#{table_ids[(result.name, index)]}'>{_e(table.title)}</a></li>")
        for fig in result.figures:
            out.append(f"<li><a href='#{figure_ids[(result.name, fig.key)]}'>Figure: {_e(fig.title)}</a></li>")
        out.append("</ol></li>")
    out.append("</ol></nav>")
    return "".join(out)


def _summary(results: Sequence[LabResult], lab_ids: Mapping[str, str], table_ids: Mapping[tuple[str, int], str],
             skip_ids: Mapping[tuple[str, str], str]) -> str:
    out = ["<section id='summary' aria-labelledby='summary-h'><h2 id='summary-h'>Summary</h2>",
           "<div class='scroll'><table class='summary'><thead><tr><th scope='col'>lab</th>"
           "<th scope='col'>headline</th><th scope='col'>checks</th></tr></thead><tbody>"]
    for result in results:
        marks = []
        for index, table in enumerate(result.sections):
            failed = fail_rows(table)
            if failed:
                marks.append(f"<a class='bad' href='#{table_ids[(result.name, index)]}'>FAIL</a> "
                             f"{_e(table.title)}: {_e(', '.join(failed))}")
        for part in result.skipped:
            target = skip_ids[(result.name, part.key)]
            if part.section is not None:
                for index, table in enumerate(result.sections):
                    if table.key == part.section:
                        target = table_ids[(result.name, index)]
            marks.append(f"<a class='warn' href='#{target}'>skipped</a> {_e(part.what)} ({_e(part.reason)})")
        checks = "<br>".join(marks) if marks else "<span class='muted'>all ran</span>"
        out.append(f"<tr><td><a href='#{lab_ids[result.name]}'>{_e(result.name)}</a></td>"
                   f"<td class='prose'>{_e(headline(result))}</td><td class='prose checks'>{checks}</td></tr>")
    out.append("</tbody></table></div></section>")
    return "".join(out)


def _table(table: Table) -> str:
    kinds = column_kinds(table)
    head = "".join(f"<th scope='col' class='{'num' if k == 'number' else ''}'>{_e(c)}</th>"
                   for c, k in zip(table.columns, kinds, strict=True))
    rows = []
    for row in table.rows:
        cells = []
        for column, kind, value in zip(table.columns, kinds, row, strict=True):
            text = format_cell(value, table.formats.get(column, ""))
            css = "num" if kind == "number" else "prose" if len(text) > SHORT_TEXT else "short"
            cells.append(f"<td class='{css}'>{_e(text)}</td>")
        rows.append("<tr>" + "".join(cells) + "</tr>")
    label = _e(table.title)
    compact = " class='compact'" if len(table.columns) >= COMPACT_COLUMNS else ""
    return (f"<div class='scroll' role='region' aria-label='{label}' tabindex='0'><table{compact}><thead><tr>"
            f"{head}</tr></thead><tbody>{''.join(rows)}</tbody></table></div>")


def _cards(table: Table) -> str:
    out = ["<div class='cards'>"]
    for row in table.rows:
        cells = [format_cell(v, table.formats.get(c, "")) for c, v in zip(table.columns, row, strict=True)]
        pairs = "".join(f"<dt>{_e(c)}</dt><dd>{_e(v)}</dd>" for c, v in zip(table.columns[1:], cells[1:], strict=True))
        out.append(f"<article class='card'><h4>{_e(cells[0])}</h4><dl>{pairs}</dl></article>")
    out.append("</div>")
    return "".join(out)


def _figure(result: LabResult, fig: Figure, where: str, files: FigureFile | None) -> str:
    files = files or FigureFile(f"{result.name}_{fig.key}.png", 880, 550)
    alt = describe_figure(fig, files.notes)
    caption = [f"<b>{_e(fig.title)}.</b>"]
    if fig.note:
        caption.append(_e(fig.note))
    caption += [_e(f"{n}.") for n in files.notes]
    if files.svg:
        caption.append(f"<a href='{_e(files.svg)}'>SVG</a>")
    least = round(FIGURE_MIN_SCALE * files.width)
    if files.narrow is None:  # a single drawing: never shown below FIGURE_MIN_SCALE, it scrolls in its box instead
        image = (f"<img src='{_e(files.png)}' width='{files.width}' height='{files.height}' "
                 f"style='min-width:{least}px' alt='{_e(alt)}'>")
    else:  # the narrow drawing wherever the wide one would be shown below FIGURE_MIN_SCALE of its width
        name, width, height = files.narrow
        image = (f"<picture><source media='(max-width: {least + PAGE_SIDE_PADDING_PX - 1}px)' "
                 f"srcset='{_e(name)}' width='{width}' height='{height}'><img src='{_e(files.png)}' "
                 f"width='{files.width}' height='{files.height}' alt='{_e(alt)}'></picture>")
    return (f"<figure id='{where}'><div class='figbox'><a href='{_e(files.png)}'>{image}</a></div>"
            f"<figcaption>{' '.join(caption)}</figcaption></figure>")
