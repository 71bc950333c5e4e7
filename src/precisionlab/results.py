"""The records every lab returns and every layer above `results` may build: data only, no rendering
(renderers live in `report`; this module imports nothing from precisionlab, so any layer can use it).

A LabResult holds sections (each one table with a short note), figures (series of
points described as data; `report.plots` draws them) and `findings`: the headline
numbers under stable dotted keys, which users and scripts check. A part that could not
run because an optional peer is missing is listed in `skipped` (with the reason and how
to install the peer) and under the finding `skipped.<key>`; the rest of the lab runs.

`LabResult.to_dict()` is the JSON every command writes; `LabResult.from_dict(data)` reads it back
(`from_dict(r.to_dict()).to_dict() == r.to_dict()`), so a saved result can become a section of a
report. JSON has no non-finite floats: to_dict writes them as "inf", "-inf", "nan" and from_dict reads
those three strings back as floats, wherever a value may be a number.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

Scalar = float | int | bool | str | None
T = TypeVar("T")


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

    def to_dict(self) -> dict[str, Any]:
        return {"key": self.key, "title": self.title, "note": self.note, "columns": self.columns, "rows": self.rows,
                "formats": self.formats}

    @classmethod
    def from_dict(cls, data: object, where: str = "table") -> Table:
        """The table to_dict wrote; ValueError naming the first problem (where: its place in the file)."""
        d = _object(data, where, ("key", "title", "columns", "rows"))
        columns = [_text(c, f"{where}.columns[{i}]") for i, c in enumerate(_array(d["columns"], f"{where}.columns"))]
        rows = []
        for i, row in enumerate(_array(d["rows"], f"{where}.rows")):
            cells = _array(row, f"{where}.rows[{i}]")
            if len(cells) != len(columns):
                raise _refused(f"{where}.rows[{i}] has {len(cells)} cells for {len(columns)} columns")
            rows.append([_value(v) for v in cells])
        formats = _object(d.get("formats", {}), f"{where}.formats")
        return cls(key=_name(d["key"], f"{where}.key"), title=_text(d["title"], f"{where}.title"), columns=columns,
                   rows=rows, note=_text(d.get("note", ""), f"{where}.note"),
                   formats={k: _text(v, f"{where}.formats[{k!r}]") for k, v in formats.items()})


@dataclass
class Series:
    label: str
    x: Sequence[float]
    y: Sequence[float]
    kind: str = "line"  # line | scatter | step | bar
    style: str = ""  # optional matplotlib format string, e.g. "--"; INTERVAL_STYLE: an error bar (see below)

    def to_dict(self) -> dict[str, Any]:
        return {"label": self.label, "x": list(self.x), "y": list(self.y), "kind": self.kind, "style": self.style}

    @classmethod
    def from_dict(cls, data: object, where: str = "series") -> Series:
        d = _object(data, where, ("label", "x", "y"))
        x, y = _numbers(d["x"], f"{where}.x"), _numbers(d["y"], f"{where}.y")
        if len(x) != len(y):
            raise _refused(f"{where} has {len(x)} x values for {len(y)} y values")
        kind = _text(d.get("kind", "line"), f"{where}.kind")
        if kind not in SERIES_KINDS:
            raise _refused(f"{where}.kind is {kind!r}; expected one of {', '.join(SERIES_KINDS)}")
        return cls(label=_text(d["label"], f"{where}.label"), x=x, y=y, kind=kind,
                   style=_text(d.get("style", ""), f"{where}.style"))


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

    def to_dict(self) -> dict[str, Any]:
        return {"key": self.key, "title": self.title, "xlabel": self.xlabel, "ylabel": self.ylabel, "note": self.note,
                "series": [s.to_dict() for s in self.series], "xscale": self.xscale, "yscale": self.yscale,
                "hlines": [list(line) for line in self.hlines], "vlines": [list(line) for line in self.vlines]}

    @classmethod
    def from_dict(cls, data: object, where: str = "figure") -> Figure:
        d = _object(data, where, ("key", "title", "xlabel", "ylabel", "series"))
        series = _each(d["series"], f"{where}.series", Series.from_dict)
        scales = {}
        for axis in ("xscale", "yscale"):
            scales[axis] = _text(d.get(axis, "linear"), f"{where}.{axis}")
            if scales[axis] not in AXIS_SCALES:
                raise _refused(f"{where}.{axis} is {scales[axis]!r}; expected one of {', '.join(AXIS_SCALES)}")
        return cls(key=_name(d["key"], f"{where}.key"), title=_text(d["title"], f"{where}.title"),
                   xlabel=_text(d["xlabel"], f"{where}.xlabel"), ylabel=_text(d["ylabel"], f"{where}.ylabel"),
                   series=series, xscale=scales["xscale"], yscale=scales["yscale"],
                   hlines=_lines(d.get("hlines", []), f"{where}.hlines"),
                   vlines=_lines(d.get("vlines", []), f"{where}.vlines"),
                   note=_text(d.get("note", ""), f"{where}.note"))


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
        """'<what>: <reason> (install: <command>)', for a line that says 'skipped' once before it."""
        return f"{self.what}: {self.reason} (install: {self.install})"

    def to_dict(self) -> dict[str, Any]:
        return {"key": self.key, "what": self.what, "reason": self.reason, "install": self.install,
                "section": self.section}

    @classmethod
    def from_dict(cls, data: object, where: str = "skipped") -> Skipped:
        d = _object(data, where, ("key", "what", "reason", "install"))
        section = d.get("section")
        return cls(key=_text(d["key"], f"{where}.key"), what=_text(d["what"], f"{where}.what"),
                   reason=_text(d["reason"], f"{where}.reason"), install=_text(d["install"], f"{where}.install"),
                   section=None if section is None else _text(section, f"{where}.section"))


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
                "skipped": [s.to_dict() for s in self.skipped],
                "sections": [t.to_dict() for t in self.sections],
                "figures": [f.to_dict() for f in self.figures],
            }
        )

    @classmethod
    def from_dict(cls, data: object) -> LabResult:
        """The result `to_dict` wrote (other top-level keys, such as a saved file's "provenance", are ignored).

        ValueError with a one-line message naming the first problem (a missing key, a value of the wrong
        type) for a dict that is not a lab result; the caller adds where the data came from. Keys added to
        to_dict later (table formats, series kinds and styles, axis scales, reference lines) are optional,
        so files written before them still read, with the defaults."""
        if isinstance(data, Mapping) and "labs" in data and "lab" not in data:
            raise ValueError("a report's results.json (several labs), not one lab's result: include the lab's "
                             "own <name>.json")
        d = _object(data, "the lab result", ("lab", "title"))
        sections = _each(d.get("sections", []), "sections", Table.from_dict)
        figures = _each(d.get("figures", []), "figures", Figure.from_dict)
        skipped = _each(d.get("skipped", []), "skipped", Skipped.from_dict)
        return cls(name=_name(d["lab"], "lab"), title=_text(d["title"], "title"), sections=sections, figures=figures,
                   findings=_values(d.get("findings", {}), "findings"), params=_values(d.get("params", {}), "params"),
                   summary=_text(d.get("summary", ""), "summary"), skipped=skipped)


SERIES_KINDS = ("line", "scatter", "step", "bar")
INTERVAL_STYLE = "interval"
"""Series.style of a confidence interval: y = [low, estimate, high] at one x; the plots draw an error bar with
one marker at the estimate (a plain line and three markers otherwise)."""
AXIS_SCALES = ("linear", "log", "symlog", "logit")
NON_FINITE = {"inf": math.inf, "-inf": -math.inf, "nan": math.nan}
"""How to_dict spells the non-finite floats, and the float each spelling reads back as."""
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")
"""A lab name or a table / figure key: it becomes part of file names (<lab>_<key>.png), so no path separators."""


def _refused(problem: str) -> ValueError:
    return ValueError(f"not a lab result: {problem}")


def _kind(value: object) -> str:
    names = {dict: "an object", list: "a list", str: "a string", bool: "a boolean", int: "a number",
             float: "a number", type(None): "null"}
    return names.get(type(value), type(value).__name__)


def _object(value: object, where: str, required: Sequence[str] = ()) -> dict[str, Any]:
    if not isinstance(value, Mapping):
        raise _refused(f"{where} is {_kind(value)}, expected an object")
    missing = [key for key in required if key not in value]
    if missing:
        raise _refused(f"{where} has no {', '.join(repr(k) for k in missing)}")
    return dict(value)


def _array(value: object, where: str) -> list[Any]:
    if not isinstance(value, list):
        raise _refused(f"{where} is {_kind(value)}, expected a list")
    return value


def _each(value: object, where: str, read: Callable[[object, str], T]) -> list[T]:
    """read(item, "where[i]") for every item of a list."""
    return [read(item, f"{where}[{i}]") for i, item in enumerate(_array(value, where))]


def _text(value: object, where: str) -> str:
    if not isinstance(value, str):
        raise _refused(f"{where} is {_kind(value)}, expected a string")
    return value


def _name(value: object, where: str) -> str:
    text = _text(value, where)
    if not NAME.fullmatch(text):
        raise _refused(f"{where} {text!r} is not a name (letters, digits, '_', '.', '-')")
    return text


def _value(value: object) -> Any:
    """A JSON value as to_dict found it: "inf", "-inf", "nan" as floats, containers element by element."""
    if isinstance(value, str):
        return NON_FINITE.get(value, value)
    if isinstance(value, list):
        return [_value(v) for v in value]
    if isinstance(value, Mapping):
        return {k: _value(v) for k, v in value.items()}
    return value


def _numbers(value: object, where: str) -> list[float]:
    """A list of numbers (the non-finite spellings read as floats): what a figure can draw."""
    numbers = [_value(v) for v in _array(value, where)]
    for i, v in enumerate(numbers):
        if not isinstance(v, (int, float)) or isinstance(v, bool):
            raise _refused(f"{where}[{i}] is {_kind(v)}, expected a number")
    return numbers


def _values(value: object, where: str) -> dict[str, Any]:
    return {key: _value(v) for key, v in _object(value, where).items()}


def _lines(value: object, where: str) -> list[tuple[float, str]]:
    lines = []
    for i, item in enumerate(_array(value, where)):
        pair = _array(item, f"{where}[{i}]")
        position = _value(pair[0]) if len(pair) == 2 else None
        if not isinstance(position, (int, float)) or isinstance(position, bool) or not isinstance(pair[1], str):
            raise _refused(f"{where}[{i}] is not a [value, label] pair")
        lines.append((position, pair[1]))
    return lines


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
