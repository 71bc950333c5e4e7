"""The steps a ladder run has finished, saved as they finish so that an interrupted run resumes.

    log = StepLog(out_dir / STEPS_NAME, header)   # header: everything the steps' results depend on
    done = log.open()                              # StepRecords of an earlier run with the same header
    log.append(record)                             # one finished step, fsync'd
    log.close()

The file is `interop.results_log.ResultsLog`'s append-only JSON Lines (the layout `precisionlab
audit` resumes from): a header line, then one line per finished step with every attempt. A torn last
line is dropped and its step evaluated again; a file whose header differs (another model, target,
threshold, plan, size, seed, alpha ...) is refused rather than mixed in (errors.ResultsLogMismatch), and one
another ladder run is writing right now too (errors.ResultsLogBusy).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from precisionlab.ptq.ladder.climb import StepOutcome, StepRecord
from precisionlab.ptq.ladder.steps import Step

STEPS_NAME = "ladder-steps.jsonl"
RECORD_VERSION = 1
"""Version of the step records; a log of another version is not resumed."""

_FLOAT_FIELDS = ("difference", "ci_low", "ci_high", "bits_per_weight", "seconds", "confidence")
_TASK_FLOATS = ("difference", "ci_low", "ci_high", "value", "reference")


def record_to_dict(record: StepRecord) -> dict[str, Any]:
    """A finished step as a strict-JSON object (non-finite floats as the strings "nan", "inf", "-inf")."""
    s = record.step
    return _safe({"kind": "step", "index": record.index, "seconds": record.seconds,
                  "step": {"name": s.name, "scheme": s.scheme, "method": s.method, "keep_sensitive": s.keep_sensitive,
                           "description": s.description, "remedy": s.remedy, "groups_of": s.groups_of},
                  "attempts": [_outcome_dict(a) for a in record.attempts]})


def record_from_dict(data: dict[str, Any]) -> StepRecord:
    """The inverse of record_to_dict; ValueError on a record of another layout."""
    try:
        step = Step(**data["step"])
        attempts = [_outcome(a) for a in data["attempts"]]
        return StepRecord(int(data["index"]), step, attempts, float(data["seconds"]))
    except (KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"a ladder step record of another layout ({exc})") from None


class StepLog:
    """The finished steps of one ladder run (module docstring)."""

    def __init__(self, path: Path, header: dict[str, Any]) -> None:
        from precisionlab.interop.results_log import ResultsLog

        self.path = Path(path)
        self.header = {"kind": "ladder", "version": RECORD_VERSION, **_safe(header)}
        self._log = ResultsLog(self.path, self.header, noun="ladder run", records="steps")

    def open(self) -> list[StepRecord]:
        """Open (or create) the log; the steps an earlier run with the same header finished, in order."""
        records = self._log.open()
        done: list[StepRecord] = []
        for data in records:
            if data.get("kind") == "step":
                record = record_from_dict(data)
                if record.index == len(done):
                    done.append(record)
        return done

    def append(self, record: StepRecord) -> None:
        self._log.append(json.dumps(record_to_dict(record), separators=(",", ":"), allow_nan=False))

    def close(self) -> None:
        self._log.close()


def _outcome_dict(o: StepOutcome) -> dict[str, Any]:
    return {"verdict": o.verdict, "difference": o.difference, "ci_low": o.ci_low, "ci_high": o.ci_high,
            "bytes": o.bytes, "examples": o.examples, "examples_needed": o.examples_needed,
            "grid_aligned": o.grid_aligned, "alignment": o.alignment, "tasks": o.tasks,
            "bits_per_weight": o.bits_per_weight, "notes": list(o.notes), "seconds": o.seconds,
            "confidence": o.confidence}


def _outcome(data: dict[str, Any]) -> StepOutcome:
    values = dict(data)
    for key in _FLOAT_FIELDS:
        values[key] = _number(values[key])
    values["tasks"] = {name: {k: (_number(v) if k in _TASK_FLOATS else v) for k, v in task.items()}
                       for name, task in values["tasks"].items()}
    return StepOutcome(**values)


def _safe(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")
    if isinstance(value, dict):
        return {str(k): _safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_safe(v) for v in value]
    return value


def _number(value: Any) -> Any:
    return float(value) if value in ("nan", "inf", "-inf") else value
