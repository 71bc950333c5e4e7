"""Write results to disk: JSON, PNG figures and an HTML index.

Files are written to a temporary name and renamed into place, so an interrupted run
never leaves a half-written file behind.
"""

from __future__ import annotations

import functools
import html
import json
from collections.abc import Sequence
from pathlib import Path

from precisionlab._atomic import atomic_write_text, atomic_write_with
from precisionlab.labs.result import LabResult, Table, jsonable
from precisionlab.report.plots import save_figure
from precisionlab.report.terminal import format_cell


def dumps(data: object) -> str:
    return json.dumps(data, indent=2, allow_nan=False)


def write_figures(result: LabResult, out_dir: Path) -> list[Path]:
    paths = []
    for fig in result.figures:
        final = out_dir / f"{result.name}_{fig.key}.png"
        paths.append(atomic_write_with(final, functools.partial(save_figure, fig), suffix=".png"))
    return paths


def write_lab(result: LabResult, out_dir: Path) -> list[Path]:
    """One lab's JSON (<lab>.json) and PNGs."""
    paths = write_figures(result, out_dir)
    paths.append(atomic_write_text(out_dir / f"{result.name}.json", dumps(result.to_dict())))
    return paths


def write_run(results: Sequence[LabResult], out_dir: Path) -> list[Path]:
    """results.json, index.html and every figure of every lab."""
    paths: list[Path] = []
    for result in results:
        paths += write_figures(result, out_dir)
    payload = {"labs": [r.to_dict() for r in results]}
    paths.append(atomic_write_text(out_dir / "results.json", dumps(payload)))
    paths.append(atomic_write_text(out_dir / "index.html", render_html(results)))
    return paths


def render_html(results: Sequence[LabResult]) -> str:
    parts = [
        "<!doctype html><html><head><meta charset='utf-8'><title>precisionlab report</title>",
        "<style>body{font-family:system-ui,sans-serif;max-width:1100px;margin:2em auto;padding:0 1em}"
        "table{border-collapse:collapse;margin:.5em 0 1.5em}td,th{border:1px solid #ccc;padding:2px 8px;"
        "text-align:right}th{background:#eef}td:first-child{text-align:left}.note{color:#555}"
        "img{max-width:100%}</style></head><body><h1>precisionlab report</h1>",
        "<ul>" + "".join(f"<li><a href='#{r.name}'>{html.escape(r.title)}</a></li>" for r in results) + "</ul>",
    ]
    for result in results:
        parts.append(f"<h2 id='{result.name}'>{html.escape(result.title)}</h2>")
        if result.summary:
            parts.append(f"<p>{html.escape(result.summary)}</p>")
        for part in result.skipped:
            parts.append(f"<p class='skipped'><b>skipped</b> {html.escape(part.message())}</p>")
        for table in result.sections:
            parts.append(f"<h3>{html.escape(table.title)}</h3><table><tr>")
            parts.append("".join(f"<th>{html.escape(c)}</th>" for c in table.columns) + "</tr>")
            for row in table.rows:
                cells = (format_cell(v, table.formats.get(c, "")) for c, v in zip(table.columns, row, strict=True))
                parts.append("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in cells) + "</tr>")
            parts.append("</table>")
            if table.note:
                parts.append(f"<p class='note'>{html.escape(table.note)}</p>")
        for fig in result.figures:
            parts.append(f"<h3>{html.escape(fig.title)}</h3><img src='{result.name}_{fig.key}.png' alt=''>")
        if result.findings:  # folded: a lab may have hundreds of keys
            parts.append(f"<details><summary>findings ({len(result.findings)} keys)</summary>"
                         "<table><tr><th>key</th><th>value</th></tr>")
            for key, value in result.findings.items():
                parts.append(f"<tr><td>{html.escape(key)}</td><td>{html.escape(format_cell(value))}</td></tr>")
            parts.append("</table></details>")
    parts.append("</body></html>")
    return "\n".join(parts)


def table_csv(table: Table) -> str:
    """A table as CSV text, raw values (non-finite floats as inf / -inf / nan)."""
    import csv
    import io

    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(table.columns)
    for row in table.rows:
        writer.writerow(["" if v is None else jsonable(v) for v in row])
    return buffer.getvalue()
