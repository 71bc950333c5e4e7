"""Output folders written whole or not at all.

    report_folder(target)   the folder IS the report (`precisionlab run --out DIR`): it is built in a
                            staging folder beside the target (.<name>.staging-XXXX) and swapped in at
                            the end (_atomic.atomic_directory), so a reader sees the old report or the
                            new one, never a mix.
                            An existing target must be a report (it holds results.json) or empty:
                            any other folder is refused rather than replaced.
    files_folder(target)    the folder receives some files (`precisionlab gemm --out DIR`, `--csv DIR`):
                            they are written into a staging folder inside the target and moved into
                            place at the end; other files in the target are left alone.

Both create their staging folder on entry, so a target that cannot be written fails there, before
any work starts. On any exception (KeyboardInterrupt included) the staging folder is removed and
the target is left as it was. Failures are OSErrors that name the target.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

from precisionlab._atomic import atomic_directory

REPORT_MARKER = "results.json"
"""A folder holding this file is a report that `run` may replace."""
STAGING = ".staging-"
"""Prefix of the staging folder files_folder makes inside its target."""


def _cannot(target: Path, exc: OSError) -> OSError:
    if (exc.strerror or "").startswith("cannot write"):
        return exc  # already names the file
    reason = exc.strerror or str(exc)
    return OSError(exc.errno, f"cannot write to {target}: {reason}")


def check_report_target(target: Path) -> None:
    """OSError unless target is absent, an empty folder, or a report folder whose parent can take a sibling."""
    if target.exists() and not target.is_dir():
        raise NotADirectoryError(20, f"cannot write to {target}: it is a file, not a folder")
    if target.is_dir():
        entries = [p.name for p in target.iterdir()]
        if entries and REPORT_MARKER not in entries:
            raise OSError(17, f"cannot write to {target}: it holds files that are not a precisionlab report "
                              f"(no {REPORT_MARKER}); give a new or empty folder, or a previous report's")
        if not os.access(target, os.W_OK | os.X_OK):
            raise PermissionError(13, f"cannot write to {target}: permission denied")


@contextlib.contextmanager
def report_folder(target: str | os.PathLike[str]) -> Iterator[Path]:
    """Yield a staging folder for a whole report; on success it replaces target (see module doc; the swap is
    _atomic.atomic_directory's: a failed swap puts the previous report back)."""
    target = Path(target)
    check_report_target(target)
    with atomic_directory(target) as staging:
        yield staging


@contextlib.contextmanager
def files_folder(target: str | os.PathLike[str]) -> Iterator[Path]:
    """Yield a staging folder inside target; on success its files are moved into target (see module doc)."""
    target = Path(target)
    if target.exists() and not target.is_dir():
        raise NotADirectoryError(20, f"cannot write to {target}: it is a file, not a folder")
    created = not target.exists()
    try:
        target.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=STAGING, dir=target))
    except OSError as exc:
        if created:
            with contextlib.suppress(OSError):
                target.rmdir()
        raise _cannot(target, exc) from None
    try:
        yield staging
        names = sorted(p.name for p in staging.iterdir())
        for name in names:  # check every destination before moving any, so none is half-replaced
            if (target / name).is_dir():
                raise IsADirectoryError(21, f"cannot write {target / name}: a directory is in the way")
        for name in names:
            os.replace(staging / name, target / name)
        staging.rmdir()
    except BaseException as exc:
        shutil.rmtree(staging, ignore_errors=True)
        if created:
            with contextlib.suppress(OSError):
                target.rmdir()  # only when it is still empty
        if isinstance(exc, OSError):
            raise _cannot(target, exc) from None
        raise
