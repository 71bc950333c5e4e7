"""The records every lab returns and every layer above `results` may build: data only, no rendering
(renderers live in `report`; this module imports nothing from precisionlab, so any layer can use it).

A LabResult holds sections (each one table with a short note), figures (series of
points described as data; `report.plots` draws them) and `findings`: the headline
numbers under stable dotted keys, which users and scripts check. A part that could not
run because an optional peer is missing is listed in `skipped` (with the reason and how
to install the peer) and under the finding `skipped.<key>`; the rest of the lab runs.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

Scalar = float | int | bool | str | None


@dataclass
class Table:
    """One section of a lab: a titled table with a note that says what to read in it.

    formats: optional per-column Python format specs for the terminal and HTML
    (e.g. {"max finite": ".5g"}); JSON always carries the raw values.
    """

    key: str
    title: str
    columns: list[str]
    rows: list[list[Scalar]]
    note: str = ""
    formats: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for row in self.rows:
            if len(row) != len(self.columns):
                raise ValueError(
                    f"table {self.key!r}: row {row!r} has {len(row)} cells for {len(self.columns)} columns"
                )

    def column(self, name: str) -> list[Scalar]:
        index = self.columns.index(name)
        return [row[index] for row in self.rows]

    def records(self) -> list[dict[str, Scalar]]:
        return [dict(zip(self.columns, row, strict=True)) for row in self.rows]


@dataclass
class Series:
    label: str
    x: Sequence[float]
    y: Sequence[float]
    kind: str = "line"  # line | scatter | step | bar
    style: str = ""  # optional matplotlib format string, e.g. "--"


@dataclass
class Figure:
    """A plot described as data. hlines/vlines: (value, label) reference lines."""

    key: str
    title: str
    xlabel: str
    ylabel: str
    series: list[Series]
    xscale: str = "linear"
    yscale: str = "linear"
    hlines: list[tuple[float, str]] = field(default_factory=list)
    vlines: list[tuple[float, str]] = field(default_factory=list)
    note: str = ""


@dataclass(frozen=True)
class Skipped:
    """A part of a lab that did not run, and why.

    key: stable id (also the finding `skipped.<key>`); what: the part, in words;
    reason: e.g. 'torch is not installed'; install: the command that brings the peer;
    section: the key of the table the part belongs to, if any (the report links to it).
    """

    key: str
    what: str
    reason: str
    install: str
    section: str | None = None

    def message(self) -> str:
        return f"{self.what}: skipped, {self.reason} (install: {self.install})"


@dataclass
class Part:
    """What one section builder of a lab returns: its tables, its figures and the findings it measured.

    A lab assembles its parts in order with `LabResult.add`; no builder writes into another's findings.
    """

    tables: list[Table] = field(default_factory=list)
    figures: list[Figure] = field(default_factory=list)
    findings: dict[str, Scalar] = field(default_factory=dict)


@dataclass
class LabResult:
    name: str
    title: str
    sections: list[Table] = field(default_factory=list)
    figures: list[Figure] = field(default_factory=list)
    findings: dict[str, Scalar] = field(default_factory=dict)
    params: dict[str, Scalar] = field(default_factory=dict)
    summary: str = ""
    skipped: list[Skipped] = field(default_factory=list)

    def add(self, part: Part) -> None:
        """Append a part's tables and figures and take its findings, in order. ValueError when one of its
        finding keys is already taken: two builders must not claim the same key."""
        taken = sorted(part.findings.keys() & self.findings.keys())
        if taken:
            raise ValueError(f"{self.name}: findings {', '.join(taken)} are already set")
        self.sections.extend(part.tables)
        self.figures.extend(part.figures)
        self.findings.update(part.findings)

    def skip(self, key: str, what: str, reason: str, install: str, section: str | None = None) -> None:
        """Record a part that did not run: in `skipped`, as the finding `skipped.<key>` = reason, and,
        when it belongs to a table (section = its key), at the end of that table's note."""
        record = Skipped(key, what, reason, install, section)
        self.skipped.append(record)
        self.findings[f"skipped.{key}"] = reason
        if section is not None:
            table = self.section(section)
            table.note = f"{table.note} Skipped: {record.message()}.".strip()

    def section(self, key: str) -> Table:
        for table in self.sections:
            if table.key == key:
                return table
        raise KeyError(f"{self.name} has no section {key!r}")

    def to_dict(self) -> dict[str, Any]:
        """Strict-JSON-ready dict: non-finite floats become "inf", "-inf", "nan"."""
        return jsonable(
            {
                "lab": self.name,
                "title": self.title,
                "summary": self.summary,
                "params": self.params,
                "findings": self.findings,
                "skipped": [{"key": s.key, "what": s.what, "reason": s.reason, "install": s.install,
                             "section": s.section} for s in self.skipped],
                "sections": [
                    {"key": t.key, "title": t.title, "note": t.note, "columns": t.columns, "rows": t.rows}
                    for t in self.sections
                ],
                "figures": [
                    {
                        "key": f.key,
                        "title": f.title,
                        "xlabel": f.xlabel,
                        "ylabel": f.ylabel,
                        "note": f.note,
                        "series": [{"label": s.label, "x": list(s.x), "y": list(s.y)} for s in f.series],
                    }
                    for f in self.figures
                ],
            }
        )


def jsonable(value: Any) -> Any:
    """Convert numpy scalars and containers to plain JSON types, non-finite floats to strings."""
    if isinstance(value, Mapping):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return value
    if hasattr(value, "tolist") and not isinstance(value, (int, float)):
        return jsonable(value.tolist())
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        return float(value)
    return str(value)
