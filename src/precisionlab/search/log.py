"""The direct sensitivities a search has measured, saved as they finish, so that an interrupted or a longer-than-
one-sitting search resumes where it stopped.

    log = SensitivityLog(out_dir / LOG_NAME, identity)   # identity: everything a sensitivity depends on
    done = log.open()                                     # {(unit, format): (KL, seconds)} of an earlier run
    log.append(unit, fmt, kl, seconds)                    # one measure, fsync'd
    log.close()

The file is `interop.results_log.ResultsLog`'s append-only JSON Lines (what `audit` and `ladder` resume from): a
header line, then one line per finished (unit, format). A torn last line is dropped and measured again; a file
whose header differs (another model, other formats or units, other calibration tokens) is refused rather than
mixed in (errors.ResultsLogMismatch), and one another search is writing right now too (errors.ResultsLogBusy).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

LOG_NAME = "search-sensitivities.jsonl"
VERSION = 1


class SensitivityLog:
    def __init__(self, path: Path, identity: dict[str, Any]) -> None:
        from precisionlab.interop.results_log import ResultsLog

        self.path = Path(path)
        self.header = json.loads(json.dumps({"kind": "search-sensitivities", "version": VERSION, **identity}))
        self._log = ResultsLog(self.path, self.header, noun="search", records="sensitivities")

    def open(self) -> dict[tuple[str, str], tuple[float, float]]:
        done: dict[tuple[str, str], tuple[float, float]] = {}
        for data in self._log.open():
            if data.get("kind") == "sensitivity":
                done[(str(data["unit"]), str(data["format"]))] = (float(data["kl"]), float(data["seconds"]))
        return done

    def append(self, unit: str, fmt: str, kl: float, seconds: float) -> None:
        self._log.append(json.dumps({"kind": "sensitivity", "unit": unit, "format": fmt, "kl": kl,
                                     "seconds": seconds}, separators=(",", ":"), allow_nan=False))

    def close(self) -> None:
        self._log.close()

