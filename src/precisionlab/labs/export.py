"""The export record as a LabResult: tensors by type, bytes (on disk beside the evaluation's count), verification."""

from __future__ import annotations

from typing import Any

from precisionlab.results import LabResult, Scalar, Table


def export_lab(result: Any, params: dict[str, Scalar]) -> LabResult:
    findings = result.findings()
    by_type: dict[tuple[str, str], list[Any]] = {}
    for r in result.records:
        by_type.setdefault((r.how, r.kind), []).append(r)
    rows: list[list[Scalar]] = [[how, kind, len(items), sum(r.nbytes for r in items)]
                                for (how, kind), items in sorted(by_type.items())]
    sections = [Table("tensors", "Tensors written", ["written as", "type", "tensors", "bytes"], rows,
                      note="quantized: the layer's own codes; float: kept in float (--float-dtype); copied: a GGUF "
                           "source's tensor, its bytes as they were")]
    v = result.verification
    if v is not None:
        sections.append(Table("bytes", "Bytes on disk beside the evaluation's count", ["part", "bytes"], [
            ["quantized tensors on disk", v.quantized_bytes],
            ["quantized tensors, the evaluation's count", v.predicted_quantized_bytes],
            ["all tensors on disk", v.tensor_bytes],
            ["metadata (header, key-value pairs, padding; config and tokenizer files)", v.metadata_bytes],
            ["file(s) on disk", v.file_bytes]], note="; ".join(result.notes)))
        sections.append(Table("verify", "Read back by the ecosystem's readers", ["reader", "tensors", "mismatched",
                                                                                 "first mismatch"],
                              [[c.reader, c.compared, len(c.mismatched), c.mismatched[0] if c.mismatched else ""]
                               for c in v.checks],
                              note="equal means bit for bit (float32 bit patterns) against the weights the "
                                   "evaluation used"))
    ok = "verified" if v is not None and v.ok else ("NOT verified" if v is not None else "not verified (--no-verify)")
    summary = f"{result.to} export of {result.recipe.description} to {result.path}: {ok}"
    return LabResult(name="export", title=f"Export to {result.to}", sections=sections, figures=[],
                     findings=findings, params=params, summary=summary)
