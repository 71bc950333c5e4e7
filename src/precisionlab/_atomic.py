"""Write a file whole or not at all: into a temporary sibling, then rename over the target.

Shared by the report writers and the quantized-tensor files; below every layer, it imports
nothing from precisionlab. A failure is an OSError that names the target (never the temporary
file), and leaves the target untouched and no temporary file behind.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path


def default_mode() -> int:
    """0666 less the process umask: the mode open() would give a new file (mkstemp gives 0600)."""
    umask = os.umask(0)
    os.umask(umask)
    return 0o666 & ~umask


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
