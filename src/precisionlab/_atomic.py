"""Write a file whole or not at all: into a temporary sibling, then rename over the target.

Shared by the report writers and the quantized-tensor files; below every layer, it imports
nothing from precisionlab.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterable
from pathlib import Path


def default_mode() -> int:
    """0666 less the process umask: the mode open() would give a new file (mkstemp gives 0600)."""
    umask = os.umask(0)
    os.umask(umask)
    return 0o666 & ~umask


def atomic_write_bytes(path: str | os.PathLike[str], chunks: Iterable[bytes]) -> Path:
    """Write the chunks to path atomically; on any error the target is untouched and no temp is left."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as handle:
            for chunk in chunks:
                handle.write(chunk)
        os.chmod(tmp, default_mode())
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return target


def atomic_write_text(path: str | os.PathLike[str], text: str) -> Path:
    return atomic_write_bytes(path, [text.encode("utf-8")])
