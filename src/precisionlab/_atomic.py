"""Write a file or a folder whole or not at all: into a temporary sibling, then renamed over the target.

    atomic_path(path) / atomic_write_with / _bytes / _text   one file (the report writers, tensor files, recipes)
    atomic_directory(path)                                    one folder (a report, an export, a model cache entry)

Below every layer, it imports nothing from precisionlab. A failure is an OSError that names the target
(never the temporary file or folder), and leaves the target as it was and nothing temporary behind. New
files and folders get the mode open() / mkdir() would give them (0666 / 0777 less the umask), not
mkstemp's 0600 or mkdtemp's 0700.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path


def _umask() -> int:
    """The process umask (read by setting it and putting it back: POSIX has no call that only reads it)."""
    umask = os.umask(0)
    os.umask(umask)
    return umask


def default_mode() -> int:
    """0666 less the process umask: the mode open() would give a new file (mkstemp gives 0600)."""
    return 0o666 & ~_umask()


def default_directory_mode() -> int:
    """0777 less the process umask: the mode mkdir() would give a new folder (mkdtemp gives 0700)."""
    return 0o777 & ~_umask()


def _cannot_write(target: Path, exc: OSError) -> OSError:
    reason = exc.strerror or str(exc)
    return OSError(exc.errno, f"cannot write {target}: {reason}")


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike[str], suffix: str = ".tmp") -> Iterator[Path]:
    """Yield a temporary sibling of path to write; on success it is renamed over path.

    suffix ends the temporary name (a writer that infers the format from the name, such as
    matplotlib's savefig, needs '.png'). On any error the target is untouched, the temporary
    file is removed, and an OSError names the target.
    """
    target = Path(path)
    if target.is_dir():
        raise IsADirectoryError(21, f"cannot write {target}: it is a directory")
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, name = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=suffix)
    except OSError as exc:
        raise _cannot_write(target, exc) from None
    os.close(fd)
    tmp = Path(name)
    try:
        yield tmp
        os.chmod(tmp, default_mode())
        os.replace(tmp, target)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise _cannot_write(target, exc) from None
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def atomic_write_with(path: str | os.PathLike[str], write: Callable[[Path], object], suffix: str = ".tmp") -> Path:
    """Call write(temporary path), then rename the result over path (see atomic_path)."""
    with atomic_path(path, suffix) as tmp:
        write(tmp)
    return Path(path)


def atomic_write_bytes(path: str | os.PathLike[str], chunks: Iterable[bytes]) -> Path:
    """Write the chunks to path atomically; on any error the target is untouched and no temp is left."""
    with atomic_path(path) as tmp, open(tmp, "wb") as handle:
        for chunk in chunks:
            handle.write(chunk)
    return Path(path)


def atomic_write_text(path: str | os.PathLike[str], text: str) -> Path:
    return atomic_write_bytes(path, [text.encode("utf-8")])


def _cannot_write_to(target: Path, exc: OSError) -> OSError:
    return OSError(exc.errno, f"cannot write to {target}: {exc.strerror or exc}")


@contextlib.contextmanager
def atomic_directory(path: str | os.PathLike[str]) -> Iterator[Path]:
    """Yield a new, empty staging folder beside `path` to fill; on success it becomes `path`.

    The stage is `.<name>.staging-XXXX` in the target's parent (created with it; the same file system, so the
    swap is a rename), with the mode a new folder gets. The swap: an existing `path` is renamed aside
    (`.<name>.old-XXXX/previous`), the stage renamed to `path`, then the previous removed; when renaming the stage
    in fails, the previous is renamed back. On any error (KeyboardInterrupt included) the stage is removed and
    `path` is as it was. Creating the stage or swapping it in fails with an OSError "cannot write to <path>:
    <reason>"; an exception raised inside the block propagates as it is.
    """
    target = Path(path)
    stage: Path | None = None
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        stage = Path(tempfile.mkdtemp(dir=target.parent, prefix=f".{target.name}.staging-"))
        os.chmod(stage, default_directory_mode())
    except OSError as exc:
        if stage is not None:
            shutil.rmtree(stage, ignore_errors=True)
        raise _cannot_write_to(target, exc) from None
    try:
        yield stage
        _swap_in(stage, target)
    except BaseException:
        shutil.rmtree(stage, ignore_errors=True)
        raise


def _swap_in(stage: Path, target: Path) -> None:
    """Rename `stage` to `target`, an existing target renamed aside first and removed after (atomic_directory)."""
    aside: Path | None = None
    try:
        if os.path.lexists(target):
            aside = Path(tempfile.mkdtemp(dir=target.parent, prefix=f".{target.name}.old-"))
            os.rename(target, aside / "previous")
        os.rename(stage, target)
    except OSError as exc:
        if aside is not None:
            if os.path.lexists(aside / "previous") and not os.path.lexists(target):
                with contextlib.suppress(OSError):
                    os.rename(aside / "previous", target)  # put the previous one back
            with contextlib.suppress(OSError):
                aside.rmdir()  # only when empty: a previous one that could not go back stays there
        raise _cannot_write_to(target, exc) from None
    if aside is not None:
        shutil.rmtree(aside, ignore_errors=True)
