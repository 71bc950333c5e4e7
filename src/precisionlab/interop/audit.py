"""The checkpoint auditor: per-tensor records of layout, bytes, statistics, checks and re-quantization error.

One record per tensor, a JSON object (strict JSON: non-finite numbers are the strings "inf", "-inf",
"nan"):

    name, source_file, layout, scheme, shape, elements, stored_bytes
    bits_per_weight   8 * stored_bytes / elements (payload, scales, zero points and indices)
    stats             amax        max |w| over the finite dequantized values
                      rms         sqrt(sum w^2 / finite count)
                      sumsq       sum w^2 (float64), kept so checkpoint totals can be summed exactly
                      nonfinite   count of NaN / inf values
                      channels    rows of the tensor read as [channels, rest] (None for 0-D and 1-D)
                      outlier_ratio  max over channels of channel amax / median channel amax
                                  (None for 0-D and 1-D tensors; inf when the median is 0 and the max is not;
                                  nan when every channel is 0)
    checks            {check name: {flagged, message, evidence}}   (`interop.checks.run_checks`)
    requant           {scheme: {rel_err, sqnr_db, max_err, bytes, bits_per_weight} | {skipped: reason}}:
                      the dequantized weights quantized again with each scheme (`quant.quantize`,
                      `quant.error_metrics`, the dequantized weights as the reference)
    note              a per-tensor remark that does not stop the audit (an unknown layout)
    error             the tensor could not be audited (the message); retried on a rerun

A tensor is read, decoded and measured on its own (memory-mapped parts, statistics over row
chunks), so memory is bounded by the largest tensor, never by the checkpoint.

`plan_audit` opens the checkpoint and the results log; `run_audit` audits what is not done yet
(serially a task per tensor; on a process pool or a Dask cluster in tasks of similar cost,
`plan_tasks`; see `interop.distribute`), appending each record to the log as it arrives, and on an
interrupt the records of every finished task; `totals` sums the records. The lab in `labs.audit`
turns them into a report.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from precisionlab.interop.distribute import connect_scheduler, distribute_tasks
from precisionlab.interop.results_log import ResultsLog
from precisionlab.quant import error_metrics, parse_scheme, quantize
from precisionlab.quant.scheme import Granularity
from precisionlab.results import NON_FINITE, jsonable

RECORD_VERSION = 1
"""Version of the record layout in the results log; a log of another version is not resumed."""

RESULTS_NAME = "audit-tensors.jsonl"
"""The results log's file name inside --out."""

CHUNK = 1 << 20
"""Elements per statistics chunk: the float64 temporaries stay a few MiB whatever the tensor."""



# --------------------------------------------------------------------------- opening a checkpoint
def open_checkpoint(path: str | os.PathLike[str]) -> Any:
    """`interop.reading.read_checkpoint(path)`: a Mapping of name -> tensor, indexed lazily. The path is made
    absolute, so the tensors' parts can be mapped from other working directories (pool and Dask workers)."""
    from precisionlab.interop.reading import read_checkpoint

    return read_checkpoint(Path(path).absolute())


def checks_for(tensor: Any, checkpoint: Any, values: np.ndarray | None = None) -> list[Any]:
    """The convention checks of one tensor (`interop.checks.run_checks`; values: its dequantized values)."""
    from precisionlab.interop.checks import run_checks

    return list(run_checks(tensor, checkpoint, values))


@dataclass(frozen=True)
class CheckpointContext:
    """What the checks and the records need of a checkpoint besides its tensors (sent with every task, so a
    worker never indexes the checkpoint again: the GGUF reader takes seconds on a vocabulary)."""

    metadata: dict[str, Any]
    notes: tuple[str, ...]


def context_of(checkpoint: Any) -> CheckpointContext:
    metadata = getattr(checkpoint, "metadata", None) or {}
    kept = {k: v for k, v in metadata.items() if k != "file_metadata"}
    return CheckpointContext(kept, tuple(str(n) for n in getattr(checkpoint, "notes", [])))


# --------------------------------------------------------------------------- statistics
def tensor_stats(values: np.ndarray) -> dict[str, Any]:
    """amax, rms, sum of squares, non-finite count and the per-channel outlier ratio (see the module doc).

    Channels are the rows of the tensor read as [shape[0], rest]: the output channels of a
    [out, in] weight. Computed over row chunks: amax in the stored float32 (exact), squares in float64.
    """
    arr = np.asarray(values)
    rows = arr.reshape(arr.shape[0], -1) if arr.ndim >= 2 else arr.reshape(1, -1)
    width = max(rows.shape[1], 1)
    step = max(1, CHUNK // width)
    channel_amax = np.zeros(rows.shape[0], dtype=np.float64)
    sumsq = 0.0
    nonfinite = 0
    for r0 in range(0, rows.shape[0], step):
        chunk = np.asarray(rows[r0 : r0 + step])
        if chunk.size == 0:
            continue
        mags = np.abs(chunk)
        amax = mags.max(axis=1)
        if not np.all(np.isfinite(amax)):  # rare: redo this chunk over its finite values only
            finite = np.isfinite(chunk)
            nonfinite += int(chunk.size - np.count_nonzero(finite))
            mags = np.where(finite, mags, 0)
            amax = mags.max(axis=1)
        channel_amax[r0 : r0 + chunk.shape[0]] = amax
        wide = mags.astype(np.float64)
        sumsq += float(np.einsum("ij,ij->", wide, wide))
    count = arr.size - nonfinite
    channels = rows.shape[0] if arr.ndim >= 2 else None
    ratio: float | None = None
    if channels is not None and channels > 0 and rows.shape[1] > 0:
        top, median = float(channel_amax.max()), float(np.median(channel_amax))
        ratio = top / median if median > 0 else (math.inf if top > 0 else math.nan)
    return {
        "amax": float(channel_amax.max()) if arr.size else None,
        "rms": math.sqrt(sumsq / count) if count else None,
        "sumsq": sumsq,
        "nonfinite": nonfinite,
        "channels": channels,
        "outlier_ratio": ratio,
    }


def requant_errors(values: np.ndarray, schemes: Sequence[str]) -> dict[str, dict[str, Any]]:
    """Each scheme applied to the dequantized weights: error against them, bytes and bits per weight."""
    out: dict[str, dict[str, Any]] = {}
    arr = np.asarray(values)
    for scheme in schemes:
        if arr.size == 0 or arr.ndim == 0:
            out[scheme] = {"skipped": "empty or 0-D tensor"}
        elif arr.ndim < 2 and parse_scheme(scheme).granularity is Granularity.BLOCK:
            out[scheme] = {"skipped": "a 2-D block scheme needs a 2-D tensor"}
        elif not np.all(np.isfinite(arr)):
            out[scheme] = {"skipped": "the tensor holds NaN or inf values"}
        else:
            try:
                q = quantize(arr, scheme)
            except (ValueError, TypeError) as exc:
                out[scheme] = {"skipped": str(exc)}
                continue
            m = error_metrics(arr, q)
            out[scheme] = {"rel_err": m.rel_err, "sqnr_db": m.sqnr_db, "max_err": m.max_err, "bytes": q.nbytes,
                           "bits_per_weight": q.bits_per_element}
    return out


def _check_record(result: Any) -> dict[str, Any]:
    return {"flagged": bool(result.flagged), "message": str(result.message), "evidence": dict(result.evidence)}


def audit_tensor(tensor: Any, checkpoint: Any = None, schemes: Sequence[str] = ()) -> dict[str, Any]:
    """The record of one tensor (see the module doc); an exception while auditing becomes its `error`."""
    shape = [int(d) for d in tensor.shape]
    elements = math.prod(shape)
    stored = int(tensor.stored_nbytes)
    record: dict[str, Any] = {
        "kind": "tensor", "name": str(tensor.name), "source_file": Path(str(tensor.source_file)).name,
        "layout": str(tensor.layout), "scheme": None if tensor.scheme is None else str(tensor.scheme),
        "shape": shape, "elements": elements, "stored_bytes": stored,
        "bits_per_weight": 8 * stored / elements if elements else None,
        "stats": None, "checks": {}, "requant": {}, "note": None, "error": None,
    }
    if record["layout"] == "unknown":
        own = str(getattr(tensor, "note", "") or "")
        notes = [own] if own else [str(n) for n in getattr(checkpoint, "notes", []) if str(tensor.name) in str(n)]
        record["note"] = "unknown layout, not decoded: " + ("; ".join(notes) or "no reader recognised it")
        return record
    try:
        values = tensor.dequantize()
        record["stats"] = tensor_stats(values)
        record["requant"] = requant_errors(values, schemes)
        record["checks"] = {r.name: _check_record(r) for r in checks_for(tensor, checkpoint, values)}
        del values
    except Exception as exc:  # one tensor's failure is a per-tensor error; the audit goes on
        record["error"] = f"{type(exc).__name__}: {exc}"
    return record


def audit_record_line(tensor: Any, context: CheckpointContext, schemes: Sequence[str]) -> str:
    """One tensor's record as a line of strict JSON (so every backend hands back identical data)."""
    try:
        record = audit_tensor(tensor, context, schemes)
    except Exception as exc:  # a record must come back whatever went wrong
        record = {"kind": "tensor", "name": str(tensor.name), "error": f"{type(exc).__name__}: {exc}"}
    return dumps_record(record)


MIN_TASK_ELEMENTS = 4 << 20
"""Weights a pool or Dask task audits at least (hand-offs cost milliseconds; 4M weights take a second or so)."""
TASKS_PER_WORKER = 4
"""Tasks per worker aimed at, so that a worker that finishes early takes another and none waits on a long one."""


def audit_batch(tensors: Sequence[Any], context: CheckpointContext, schemes: Sequence[str]) -> list[str]:
    """Task body (this process, a pool worker or a Dask worker): the record line of each tensor, in order.
    The tensors are the parent's index entries (a few hundred bytes each: where their parts lie), so the
    worker maps their bytes without opening the checkpoint."""
    return [audit_record_line(tensor, context, schemes) for tensor in tensors]


def plan_tasks(names: Sequence[str], elements: Mapping[str, int], workers: int,
               min_elements: int | None = None) -> list[tuple[str, ...]]:
    """Consecutive tensors grouped into tasks of similar cost (weights audited), largest first.

    The target is total / (TASKS_PER_WORKER * workers) weights, at least `min_elements`
    (MIN_TASK_ELEMENTS) and at most total / workers, so N workers get N or more tasks; a task is closed
    before a tensor that would take it past the target, so a tensor larger than the target is a task of
    its own. Sorting by size sends the largest out first, so the last
    task to finish is a small one."""
    floor = MIN_TASK_ELEMENTS if min_elements is None else min_elements
    total = sum(max(1, int(elements[n])) for n in names)
    target = min(max(floor, -(-total // (TASKS_PER_WORKER * workers))), max(1, total // max(workers, 1)))
    tasks: list[tuple[str, ...]] = []
    group: list[str] = []
    size = 0
    for name in names:
        weight = max(1, int(elements[name]))
        if group and size + weight > target:  # closing first keeps a task from overshooting the target
            tasks.append(tuple(group))
            group, size = [], 0
        group.append(name)
        size += weight
        if size >= target:
            tasks.append(tuple(group))
            group, size = [], 0
    if group:
        tasks.append(tuple(group))
    cost = {task: sum(max(1, int(elements[n])) for n in task) for task in tasks}
    return sorted(tasks, key=lambda task: -cost[task])


# --------------------------------------------------------------------------- records as JSON
def dumps_record(record: Mapping[str, Any]) -> str:
    """One line of strict JSON (non-finite numbers as "inf" / "-inf" / "nan")."""
    return json.dumps(jsonable(record), separators=(",", ":"), allow_nan=False)


def number(value: Any) -> float | None:
    """A numeric record field back as a float: the strings "inf", "-inf", "nan" included; None stays None."""
    if value is None:
        return None
    if isinstance(value, str):
        return NON_FINITE[value]
    return float(value)


# --------------------------------------------------------------------------- the run
@dataclass
class AuditPlan:
    """What an audit will do: the checkpoint's tensors, those already done, and where records go."""

    path: Path
    checkpoint: Any
    names: list[str]
    files: dict[str, str]
    """tensor name -> source file name"""
    schemes: list[str]
    done: dict[str, dict[str, Any]] = field(default_factory=dict)
    log: ResultsLog | None = None

    @property
    def todo(self) -> list[str]:
        return [n for n in self.names if n not in self.done]

    @property
    def source_files(self) -> list[str]:
        return list(dict.fromkeys(self.files.values()))


@dataclass
class AuditRun:
    """A finished audit: one record per tensor in checkpoint order, and the checkpoint's notes."""

    path: Path
    schemes: list[str]
    records: list[dict[str, Any]]
    source_files: list[str]
    file_bytes: int
    notes: list[str]
    resumed: int
    """records taken from the results log instead of being computed again"""
    results_path: Path | None


def normalise_schemes(schemes: Sequence[str]) -> list[str]:
    """Canonical scheme strings, first occurrence kept; a bad scheme is a ValueError now, not per tensor."""
    return list(dict.fromkeys(str(parse_scheme(s)) for s in schemes))


def _file_identity(checkpoint: Any) -> dict[str, list[int]]:
    out = {}
    for f in getattr(checkpoint, "source_files", []):
        st = Path(f).stat()
        out[Path(f).name] = [st.st_size, st.st_mtime_ns]
    return out


def _identity_path(path: Path) -> str:
    """The checkpoint as the results log names it: a directory with an index is that index."""
    index = path / "model.safetensors.index.json"
    return str((index if path.is_dir() and index.is_file() else path).resolve())


def _log_difference(old: dict[str, Any], new: dict[str, Any]) -> str:
    """How an audit's results log differs from this run's header, in the audit's options."""
    if old.get("kind") != new.get("kind") or old.get("version") != new.get("version"):
        return f"record version {old.get('version')!r}, this run writes {new.get('version')!r}"
    if old.get("checkpoint") != new.get("checkpoint"):
        return f"it audited {old.get('checkpoint')}"
    if old.get("schemes") != new.get("schemes"):
        return f"it was run with --schemes {','.join(old.get('schemes') or []) or '(none)'}"
    return "the checkpoint's files changed since (size or modification time)"


def plan_audit(path: str | os.PathLike[str], schemes: Sequence[str] = (),
               results_dir: str | os.PathLike[str] | None = None, checkpoint: Any = None) -> AuditPlan:
    """Open the checkpoint (a ValueError / OSError for a missing or unreadable one; or take the one given,
    opened from path) and, with results_dir, the results log: records already there for the same
    checkpoint and schemes are done."""
    chosen = normalise_schemes(schemes)
    if checkpoint is None:
        checkpoint = open_checkpoint(path)
    names = [str(n) for n in checkpoint]
    files = {n: Path(str(checkpoint[n].source_file)).name for n in names}
    plan = AuditPlan(Path(path), checkpoint, names, files, chosen)
    if results_dir is not None:
        header = {"kind": "audit", "version": RECORD_VERSION, "checkpoint": _identity_path(Path(path)),
                  "schemes": chosen, "files": _file_identity(checkpoint)}
        plan.log = ResultsLog(Path(results_dir) / RESULTS_NAME, header, noun="audit", describe=_log_difference)
        latest = {str(r.get("name")): r for r in plan.log.open() if r.get("kind") == "tensor"}  # last one wins
        known = set(names)
        plan.done = {n: r for n, r in latest.items() if n in known and not r.get("error")}
    return plan


def run_audit(plan: AuditPlan, workers: int = 1, scheduler: str | None = None,
              on_record: Callable[[dict[str, Any]], None] | None = None, client: Any = None) -> AuditRun:
    """Audit every tensor not yet done; each record is appended to the log (if any) as it arrives,
    then passed to on_record. workers > 1: a process pool; scheduler (an address) or client (connected
    with `distribute.connect_scheduler`, left open): a Dask cluster. On an interrupt (KeyboardInterrupt)
    the records of every task that had finished are logged before it propagates."""
    serial = workers == 1 and scheduler is None and client is None
    fresh: dict[str, dict[str, Any]] = {}
    owned = None
    if scheduler is not None and client is None:
        client = owned = connect_scheduler(scheduler)
    elements = {name: int(plan.checkpoint[name].size) for name in plan.todo}
    groups: list[tuple[str, ...]]
    if serial:
        groups = [(name,) for name in plan.todo]
    else:
        slots = workers if client is None else sum(client.nthreads().values())
        groups = plan_tasks(plan.todo, elements, max(slots, 2))
    context = context_of(plan.checkpoint)
    tasks = [(tuple(plan.checkpoint[name] for name in group), context, tuple(plan.schemes)) for group in groups]

    def take(lines: list[str], notify: bool = True) -> None:
        records = [json.loads(line) for line in lines]
        for line, record in zip(lines, records, strict=True):  # every record logged before any callback
            if plan.log is not None:
                plan.log.append(line)
            fresh[record["name"]] = record
        if on_record is not None and notify:
            for record in records:
                on_record(record)

    try:
        with distribute_tasks(audit_batch, tasks, workers=workers, client=client) as stream:
            try:
                for lines in stream:
                    take(lines)
            except KeyboardInterrupt:
                for lines in stream.finished():  # finished tasks whose records had not been taken yet
                    take(lines, notify=False)
                raise
    finally:
        if plan.log is not None:
            plan.log.close()
        if owned is not None:
            owned.close()
    by_name = {**plan.done, **fresh}
    records = [_complete(by_name[n], plan.files[n]) for n in plan.names]
    file_bytes = sum(Path(f).stat().st_size for f in getattr(plan.checkpoint, "source_files", []))
    notes = [str(n) for n in getattr(plan.checkpoint, "notes", [])]
    return AuditRun(plan.path, plan.schemes, records, plan.source_files, file_bytes, notes, len(plan.done),
                    plan.log.path if plan.log is not None else None)


def _complete(record: dict[str, Any], source_file: str) -> dict[str, Any]:
    """Fill the fields a worker that could not open the checkpoint left out."""
    base: dict[str, Any] = {"source_file": source_file, "layout": None, "scheme": None, "shape": None,
                            "elements": None, "stored_bytes": None, "bits_per_weight": None, "stats": None,
                            "checks": {}, "requant": {}, "note": None, "error": None}
    return {**base, **record}


def audit(path: str | os.PathLike[str], schemes: Sequence[str] = (), workers: int = 1, scheduler: str | None = None,
          results_dir: str | os.PathLike[str] | None = None) -> AuditRun:
    """plan_audit then run_audit: the whole audit of one checkpoint."""
    return run_audit(plan_audit(path, schemes, results_dir), workers=workers, scheduler=scheduler)


# --------------------------------------------------------------------------- totals
def _stat(record: dict[str, Any], key: str) -> float | None:
    stats = record.get("stats") or {}
    return number(stats.get(key))


def totals(run: AuditRun) -> dict[str, Any]:
    """Checkpoint totals (keys as in `audit.totals.*`).

    bits_per_weight = 8 * sum stored bytes / sum elements over audited tensors; requant.<scheme>.rel_err
    = sqrt(sum_t rel_t^2 sumsq_t / sum_t sumsq_t): the relative error of the whole checkpoint (each
    tensor's error energy is rel_t^2 times its signal energy sumsq_t).
    """
    records = run.records
    sized = [r for r in records if r.get("elements")]
    elements = sum(int(r["elements"]) for r in sized)
    stored = sum(int(r["stored_bytes"]) for r in sized)
    out: dict[str, Any] = {
        "tensors": len(records), "elements": elements, "stored_bytes": stored,
        "bits_per_weight": 8 * stored / elements if elements else None,
        "file_bytes": run.file_bytes, "source_files": len(run.source_files),
        "notes": sum(1 for r in records if r.get("note")), "errors": sum(1 for r in records if r.get("error")),
        "reading_notes": len(run.notes),
    }
    flags: dict[str, int] = {}
    for r in records:
        for check, result in (r.get("checks") or {}).items():
            flags[check] = flags.get(check, 0) + int(bool(result["flagged"]))
    out["checks_flagged"] = sum(flags.values())
    out["tensors_flagged"] = sum(1 for r in records if any(c["flagged"] for c in (r.get("checks") or {}).values()))
    for check in sorted(flags):
        out[f"checks.{check}"] = flags[check]
    amaxes = [_stat(r, "amax") for r in records]
    out["amax"] = max((v for v in amaxes if v is not None), default=None)
    ratios = [_stat(r, "outlier_ratio") for r in records]
    out["outlier_ratio_max"] = max((v for v in ratios if v is not None and not math.isnan(v)), default=None)
    out["nonfinite"] = sum(int((r.get("stats") or {}).get("nonfinite") or 0) for r in records)
    layouts: dict[str, list[int]] = {}
    for r in sized:
        entry = layouts.setdefault(str(r["layout"]), [0, 0, 0])
        entry[0] += 1
        entry[1] += int(r["elements"])
        entry[2] += int(r["stored_bytes"])
    for layout, (count, n, b) in sorted(layouts.items()):
        out[f"layouts.{layout}.tensors"] = count
        out[f"layouts.{layout}.bits_per_weight"] = 8 * b / n
    for scheme in run.schemes:
        signal = noise = 0.0
        n = b = count = 0
        for r in records:
            m = (r.get("requant") or {}).get(scheme)
            if not m or "rel_err" not in m:
                continue
            energy = float(r["stats"]["sumsq"])
            rel = number(m["rel_err"]) or 0.0
            signal += energy
            noise += rel * rel * energy if math.isfinite(rel) else math.inf
            n += int(r["elements"])
            b += int(m["bytes"])
            count += 1
        out[f"requant.{scheme}.tensors"] = count
        out[f"requant.{scheme}.rel_err"] = (math.sqrt(noise / signal) if signal > 0 else None) if count else None
        out[f"requant.{scheme}.bits_per_weight"] = 8 * b / n if n else None
    return out

