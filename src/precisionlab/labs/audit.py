"""`audit`: a checkpoint's per-tensor records (`interop.audit`) as a report.

Not a registered lab (it needs a checkpoint). Sections: totals, layouts, tensors, flagged checks,
re-quantization errors (with --schemes) and the checkpoint's notes, tensors in natural order of their
names (blk.2 before blk.10); a figure of bits per weight
against relative error, one series per scheme. Findings `audit.tensors.<name>.*` and
`audit.totals.*` (documented in docs/audit.md). Everything here is a function of the records
alone, so a serial, a process-pool and a Dask audit of one checkpoint give the same report.
"""

from __future__ import annotations

import math
import re
from typing import Any

from precisionlab.interop.audit import AuditRun, number, totals
from precisionlab.results import Figure, LabResult, Scalar, Series, Table


def natural_key(name: str) -> list[Any]:
    """Sort key that orders the numbers inside a name by value: blk.2 before blk.10 (text order puts blk.10 first)."""
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", name)]


def natural_order(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return sorted(records, key=lambda r: natural_key(str(r["name"])))


def _num(value: Any) -> float | None:
    return number(value)


def _evidence(evidence: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v:.6g}" if isinstance(v, float) else f"{k}={v}" for k, v in evidence.items())


def tensor_findings(record: dict[str, Any]) -> dict[str, Scalar]:
    """The findings of one tensor record under audit.tensors.<name>."""
    key = f"audit.tensors.{record['name']}"
    stats = record.get("stats") or {}
    out: dict[str, Scalar] = {
        f"{key}.layout": record.get("layout"),
        f"{key}.scheme": record.get("scheme"),
        f"{key}.bits_per_weight": _num(record.get("bits_per_weight")),
        f"{key}.stored_bytes": record.get("stored_bytes"),
        f"{key}.amax": _num(stats.get("amax")),
        f"{key}.rms": _num(stats.get("rms")),
        f"{key}.outlier_ratio": _num(stats.get("outlier_ratio")),
        f"{key}.nonfinite": stats.get("nonfinite"),
    }
    for check, result in (record.get("checks") or {}).items():
        out[f"{key}.checks.{check}"] = bool(result["flagged"])
    for scheme, m in (record.get("requant") or {}).items():
        if "rel_err" in m:
            out[f"{key}.requant.{scheme}.rel_err"] = _num(m["rel_err"])
            out[f"{key}.requant.{scheme}.bits_per_weight"] = _num(m["bits_per_weight"])
    if record.get("note"):
        out[f"{key}.note"] = record["note"]
    if record.get("error"):
        out[f"{key}.error"] = record["error"]
    return out


def build(run: AuditRun) -> LabResult:
    """The report of a finished audit."""
    records = run.records
    total = totals(run)
    findings: dict[str, Scalar] = {}
    for record in records:
        findings.update(tensor_findings(record))
    findings.update({f"audit.totals.{k}": v for k, v in total.items()})
    sections = [_totals_table(total), _layouts_table(records, total), _tensors_table(records)]
    flags = _flags_table(records)
    if flags.rows:
        sections.append(flags)
    figures = []
    if run.schemes:
        sections.append(_requant_table(records, run.schemes, total))
        figures.append(_figure(run, records, total))
    if run.notes:
        sections.append(Table(key="notes", title="Notes from reading the checkpoint", columns=["note"],
                              rows=[[n] for n in run.notes]))
    gib = total["stored_bytes"] / 2**30
    bits = total["bits_per_weight"]
    summary = (f"{total['tensors']} tensors in {total['source_files']} file(s), {gib:.3g} GiB stored"
               + (f", {bits:.4g} bits per weight" if bits is not None else "")
               + f"; {total['checks_flagged']} check(s) flagged on {total['tensors_flagged']} tensor(s); "
               f"{total['notes']} note(s), {total['errors']} tensor(s) not audited.")
    return LabResult(name="audit", title=f"Audit of {run.path.name}", sections=sections, figures=figures,
                     findings=findings, summary=summary,
                     params={"checkpoint": str(run.path), "schemes": ",".join(run.schemes)})


def _totals_table(total: dict[str, Any]) -> Table:
    rows: list[list[Scalar]] = [[k, v] for k, v in total.items()]
    return Table(key="totals", title="Checkpoint totals", columns=["total", "value"], rows=rows,
                 note="bits_per_weight = 8 x stored bytes (payload, scales, zero points, indices) / weights; "
                      "file_bytes also counts headers. checks.<name> = tensors that check flagged; "
                      "requant.<scheme>.rel_err = the whole checkpoint's relative error under that scheme.")


def _layouts_table(records: list[dict[str, Any]], total: dict[str, Any]) -> Table:
    per: dict[str, list[int]] = {}
    for r in records:
        if r.get("elements"):
            entry = per.setdefault(str(r["layout"]), [0, 0, 0])
            entry[0] += 1
            entry[1] += int(r["elements"])
            entry[2] += int(r["stored_bytes"])
    stored = total["stored_bytes"] or 1
    rows: list[list[Scalar]] = [[layout, c, n, b, 8 * b / n, b / stored] for layout, (c, n, b) in sorted(per.items())]
    return Table(key="layouts", title="Layouts", columns=["layout", "tensors", "weights", "bytes", "bits/weight",
                                                         "share of bytes"],
                 rows=rows, formats={"bits/weight": ".4g", "share of bytes": ".1%"})


def _tensors_table(records: list[dict[str, Any]]) -> Table:
    rows: list[list[Scalar]] = []
    for r in natural_order(records):
        stats = r.get("stats") or {}
        flagged = [c for c, result in (r.get("checks") or {}).items() if result["flagged"]]
        shape = r.get("shape")
        rows.append([r["name"], r.get("layout"), r.get("scheme"), None if shape is None else "x".join(map(str, shape)),
                     r.get("stored_bytes"), _num(r.get("bits_per_weight")), _num(stats.get("amax")),
                     _num(stats.get("rms")), _num(stats.get("outlier_ratio")), ", ".join(flagged) or None,
                     r.get("error") or r.get("note")])
    return Table(key="tensors", title="Tensors",
                 columns=["tensor", "layout", "scheme", "shape", "bytes", "bits/weight", "amax", "rms",
                          "outlier ratio", "flagged", "note"],
                 rows=rows, formats={"bits/weight": ".4g", "amax": ".4g", "rms": ".4g", "outlier ratio": ".3g"},
                 note="amax and rms over the dequantized values (non-finite ones left out); outlier ratio = max over "
                      "channels (rows) of the channel amax / the median channel amax (1-D tensors: none).")


def _flags_table(records: list[dict[str, Any]]) -> Table:
    rows: list[list[Scalar]] = []
    for r in natural_order(records):
        for check, result in (r.get("checks") or {}).items():
            if result["flagged"]:
                rows.append([r["name"], check, result["message"], _evidence(result.get("evidence") or {})])
    return Table(key="flags", title="Convention checks that flagged a tensor",
                 columns=["tensor", "check", "message", "evidence"], rows=rows)


def _requant_table(records: list[dict[str, Any]], schemes: list[str], total: dict[str, Any]) -> Table:
    rows: list[list[Scalar]] = []
    for r in natural_order(records):
        for scheme in schemes:
            m = (r.get("requant") or {}).get(scheme)
            if not m:
                continue
            if "rel_err" in m:
                rows.append([r["name"], scheme, _num(m["rel_err"]), _num(m["sqnr_db"]), _num(m["max_err"]),
                             m["bytes"], _num(m["bits_per_weight"]), None])
            else:
                rows.append([r["name"], scheme, None, None, None, None, None, m.get("skipped")])
    for scheme in schemes:
        rows.append(["(checkpoint)", scheme, total[f"requant.{scheme}.rel_err"], None, None, None,
                     total[f"requant.{scheme}.bits_per_weight"], f"{total[f'requant.{scheme}.tensors']} tensors"])
    return Table(key="requant", title="The dequantized weights quantized again",
                 columns=["tensor", "scheme", "rel err", "SQNR dB", "max err", "bytes", "bits/weight", "note"],
                 rows=rows, formats={"rel err": ".4g", "SQNR dB": ".2f", "max err": ".4g", "bits/weight": ".4g"},
                 note="error of quant.quantize(dequantized weights, scheme) against the dequantized weights "
                      "(quant.error_metrics): rel err = ||w_hat - w|| / ||w||; bytes include scales and zero points.")


def _figure(run: AuditRun, records: list[dict[str, Any]], total: dict[str, Any]) -> Figure:
    series = []
    for scheme in run.schemes:
        xs, ys = [], []
        for r in records:
            m = (r.get("requant") or {}).get(scheme) or {}
            rel, bits = _num(m.get("rel_err")), _num(m.get("bits_per_weight"))
            if rel is not None and bits is not None and math.isfinite(rel) and rel > 0:
                xs.append(bits)
                ys.append(rel)
        if xs:
            series.append(Series(scheme, xs, ys, kind="scatter"))
    whole = [(total[f"requant.{s}.bits_per_weight"], total[f"requant.{s}.rel_err"]) for s in run.schemes]
    whole = [(b, e) for b, e in whole if b is not None and e is not None and math.isfinite(e) and e > 0]
    if whole:
        series.append(Series("whole checkpoint", [b for b, _ in whole], [e for _, e in whole], kind="scatter"))
    vlines = []
    if total["bits_per_weight"] is not None:
        vlines.append((float(total["bits_per_weight"]), f"as stored: {total['bits_per_weight']:.3g} bits/weight"))
    return Figure(key="bits_vs_error", title=f"Bits per weight against error: {run.path.name}",
                  xlabel="bits per weight (scales included)", ylabel="relative error against the stored weights",
                  series=series, yscale="log", vlines=vlines,
                  note="one point per tensor and scheme, and one per scheme for the whole checkpoint; the dotted "
                       "line marks the checkpoint's own bits per weight")
