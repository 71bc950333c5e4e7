"""Write results to disk: JSON, PNG (and SVG) figures, CSV tables and the HTML report.

`write_run` and `write_lab` write a whole folder at a time (see `report.folders`): an interrupted
run never leaves old and new files mixed. The `*_files` functions write into a folder the caller
has already opened (the command line opens it before any work, so an unwritable --out fails at
once).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path

from precisionlab._atomic import atomic_write_text
from precisionlab.report.folders import files_folder, report_folder
from precisionlab.report.html import FigureFile, render_html
from precisionlab.report.saved import SavedLab
from precisionlab.results import LabResult, Table, jsonable

__all__ = ["atomic_write_text", "dumps", "render_html", "table_csv", "write_csv_files", "write_figures",
           "write_lab", "write_lab_files", "write_report_files", "write_run"]


def dumps(data: object) -> str:
    return json.dumps(data, indent=2, allow_nan=False)


def figure_stem(result: LabResult, key: str) -> str:
    return f"{result.name}_{key}"


def write_figures(result: LabResult, out_dir: Path, svg: bool = False,
                  narrow: bool = False) -> dict[tuple[str, str], FigureFile]:
    """Every figure of a lab as <lab>_<key>.png (and .svg; with `narrow`, also <lab>_<key>_narrow.png, the
    drawing the HTML report shows on a phone); returns what the HTML page needs of each."""
    from precisionlab.report.plots import draw_figure

    drawn: dict[tuple[str, str], FigureFile] = {}
    for fig in result.figures:
        stem = figure_stem(result, fig.key)
        png, vector = out_dir / f"{stem}.png", (out_dir / f"{stem}.svg" if svg else None)
        done = draw_figure(fig, png, vector)
        phone = None
        if narrow:
            small = out_dir / f"{stem}_narrow.png"
            phone = (small.name, *draw_figure(fig, small, narrow=True).size)
        drawn[(result.name, fig.key)] = FigureFile(png.name, *done.size, svg=vector.name if vector else None,
                                                   notes=done.notes, narrow=phone)
    return drawn


def lab_document(result: LabResult, provenance: Mapping[str, object] | None = None) -> dict[str, object]:
    data = result.to_dict()
    if provenance is not None:
        data["provenance"] = jsonable(dict(provenance))
    return data


def write_lab_files(result: LabResult, folder: Path, provenance: Mapping[str, object] | None = None,
                    svg: bool = False) -> list[Path]:
    """One lab's JSON (<lab>.json) and figures, into an open folder."""
    drawn = write_figures(result, folder, svg)
    paths = [folder / f.png for f in drawn.values()] + [folder / f.svg for f in drawn.values() if f.svg]
    paths.append(atomic_write_text(folder / f"{result.name}.json", dumps(lab_document(result, provenance))))
    return paths


def write_lab(result: LabResult, out_dir: str | os.PathLike[str], provenance: Mapping[str, object] | None = None,
              svg: bool = False) -> list[Path]:
    """One lab's JSON and figures into out_dir, all of them or none (other files there are left alone)."""
    target = Path(out_dir)
    with files_folder(target) as folder:
        names = [p.name for p in write_lab_files(result, folder, provenance, svg)]
    return [target / name for name in names]


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


def csv_name(result: LabResult, table: Table) -> str:
    return f"{result.name}_{table.key}.csv"


def write_csv_files(results: Sequence[LabResult], folder: Path) -> list[Path]:
    """Every table of every result as <lab>_<table key>.csv, into an open folder."""
    return [atomic_write_text(folder / csv_name(r, t), table_csv(t)) for r in results for t in r.sections]


def write_report_files(results: Sequence[LabResult], folder: Path, provenance: Mapping[str, object] | None = None,
                       svg: bool = False, included: Sequence[SavedLab] = ()) -> list[Path]:
    """results.json, index.html and every figure of every lab, into an open folder.

    included: saved results (report.saved) that follow the labs, each section saying where it came from;
    results.json lists them under "included" (lab, file, the provenance saved with it)."""
    everything = [*results, *(saved.result for saved in included)]
    figures: dict[tuple[str, str], FigureFile] = {}
    for result in everything:
        figures.update(write_figures(result, folder, svg, narrow=True))
    paths = [folder / f.png for f in figures.values()] + [folder / f.svg for f in figures.values() if f.svg]
    paths += [folder / f.narrow[0] for f in figures.values() if f.narrow]
    payload: dict[str, object] = {"labs": [r.to_dict() for r in everything]}
    if provenance is not None:
        payload = {"provenance": jsonable(dict(provenance)), **payload}
    if included:
        payload["included"] = jsonable([{"lab": s.result.name, "file": str(s.path), "provenance": s.provenance}
                                        for s in included])
    origins = {saved.result.name: saved.origin() for saved in included}
    paths.append(atomic_write_text(folder / "results.json", dumps(payload)))
    paths.append(atomic_write_text(folder / "index.html", render_html(everything, figures, provenance, origins)))
    return paths


def write_run(results: Sequence[LabResult], out_dir: str | os.PathLike[str],
              provenance: Mapping[str, object] | None = None, svg: bool = False) -> list[Path]:
    """The whole report folder, swapped in at the end (see report.folders.report_folder)."""
    target = Path(out_dir)
    with report_folder(target) as folder:
        names = [p.name for p in write_report_files(results, folder, provenance, svg)]
    return [target / name for name in names]
