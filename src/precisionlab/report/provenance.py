"""Where a report came from: version, commit, date, machine, library versions and the exact command.

Nothing here imports an optional peer: installed versions come from the package metadata
(importlib.metadata reads them without importing the package), the GPU from `nvidia-smi` or
`rocm-smi` when one is on PATH, or from torch only when torch is already imported.
"""

from __future__ import annotations

import datetime as _dt
import importlib.metadata
import os
import platform
import shlex
import shutil
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

LIBRARIES = ("numpy", "torch", "triton", "ml_dtypes", "safetensors", "matplotlib")
"""Libraries whose installed version the provenance lists ('not installed' when absent)."""
PROBE_TIMEOUT_S = 3.0
"""Longest wait for git or a GPU tool; past it the field reads 'unknown'."""


def installed_version(name: str) -> str:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def _run(args: Sequence[str], cwd: Path | None = None) -> str | None:
    try:
        done = subprocess.run(list(args), cwd=cwd, capture_output=True, text=True, timeout=PROBE_TIMEOUT_S,
                              check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def git_commit(source: Path | None = None) -> str | None:
    """The commit of the checkout precisionlab runs from ('<sha> (modified)' with local changes), or None
    for an installed copy outside git or without git."""
    here = source or Path(__file__).resolve().parent
    if shutil.which("git") is None:
        return None
    top = _run(["git", "rev-parse", "--show-toplevel"], cwd=here)
    if not top or not (Path(top) / "src" / "precisionlab").is_dir():
        return None  # an installed copy that happens to sit inside some other repository
    sha = _run(["git", "rev-parse", "HEAD"], cwd=here)
    if not sha:
        return None
    dirty = _run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=here)
    return f"{sha} (modified)" if dirty else sha


def cpu_name() -> str:
    """The CPU model (from /proc/cpuinfo on Linux, else platform.processor()) and the CPUs this process may use."""
    name = ""
    try:
        for line in Path("/proc/cpuinfo").read_text(errors="replace").splitlines():
            if line.lower().startswith(("model name", "hardware", "cpu model")):
                name = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    name = name or platform.processor() or platform.machine() or "unknown"
    try:
        count = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        count = os.cpu_count() or 0
    return f"{name}, {count} CPUs available" if count else name


def gpu_names() -> str:
    """The accelerators present: from torch if it is already imported, else nvidia-smi / rocm-smi."""
    torch = sys.modules.get("torch")
    if torch is not None:
        try:
            if torch.cuda.is_available():
                return ", ".join(torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count()))
        except Exception:  # a broken driver must not break the report
            pass
    if shutil.which("nvidia-smi"):
        names = _run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"])
        if names:
            return ", ".join(line.strip() for line in names.splitlines() if line.strip())
    if shutil.which("rocm-smi"):
        names = _run(["rocm-smi", "--showproductname"])
        if names:
            cards = [line.split(":", 2)[-1].strip() for line in names.splitlines() if "Card series" in line]
            if cards:
                return ", ".join(cards)
    return "none found"


def command_line(argv: Sequence[str]) -> str:
    return shlex.join(["precisionlab", *argv])


def collect(argv: Sequence[str] | None = None, options: Mapping[str, object] | None = None,
            now: _dt.datetime | None = None) -> dict[str, object]:
    """The provenance record written into results.json and shown at the top of the report:
    precisionlab, git_commit (None outside a checkout), date (UTC, ISO 8601), host {cpu, gpu, os},
    python, versions {library: installed version or 'not installed'}, command, options.

    argv: the arguments after `precisionlab` as typed; options: the command's resolved options
    (defaults included)."""
    from precisionlab import __version__

    stamp = (now or _dt.datetime.now(_dt.timezone.utc)).astimezone(_dt.timezone.utc)
    record: dict[str, object] = {
        "precisionlab": __version__,
        "git_commit": git_commit(),
        "date": stamp.isoformat(timespec="seconds"),
        "host": {"cpu": cpu_name(), "gpu": gpu_names(), "os": platform.platform()},
        "python": f"{platform.python_implementation()} {platform.python_version()}",
        "versions": {name: installed_version(name) for name in LIBRARIES},
    }
    if argv is not None:
        record["command"] = command_line(argv)
    if options is not None:
        record["options"] = {key: _plain(value) for key, value in options.items()}
    return record


def _plain(value: object) -> object:
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return str(value)
