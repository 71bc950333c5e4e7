"""The reference model's outputs, computed once per model and data and cached.

Key: sha256 of (REFERENCE_FORMAT, the model's fingerprint — its files' hashes and dtype — the
task kind, the data's fingerprint — every example's fields — and the scoring settings such as
KL_TOP_K and the token limits). A candidate then costs one forward pass per batch: nothing of
the reference is recomputed. Entries are `.npz` files (no pickles) under
`cache_root()/eval/`, written whole or not at all; a damaged entry is recomputed.
"""

from __future__ import annotations

import hashlib
import json
import zipfile
from pathlib import Path
from typing import Any

import numpy as np

from precisionlab._atomic import atomic_write_with
from precisionlab.models.loading import cache_root

REFERENCE_FORMAT = 2
"""Bumped whenever what a reference entry holds, or how it is computed, changes."""


def reference_key(model_fingerprint: str, task_kind: str, data_fingerprint: str, settings: dict[str, Any]) -> str:
    payload = json.dumps([REFERENCE_FORMAT, model_fingerprint, task_kind, data_fingerprint, settings],
                         sort_keys=True)
    return hashlib.sha256(payload.encode()).hexdigest()


def reference_path(key: str, root: Path | None = None) -> Path:
    return (root or cache_root()) / "eval" / f"reference-{key[:32]}.npz"


def load_reference(key: str, root: Path | None = None) -> dict[str, np.ndarray] | None:
    """The cached arrays, or None (missing or unreadable: the caller recomputes)."""
    path = reference_path(key, root)
    if not path.is_file():
        return None
    try:
        with np.load(path, allow_pickle=False) as archive:
            arrays = {name: archive[name] for name in archive.files}
    except (OSError, ValueError, zipfile.BadZipFile, EOFError):
        return None
    stored = arrays.pop("__key__", None)
    if stored is None or str(stored) != key:
        return None
    return arrays


def save_reference(key: str, arrays: dict[str, np.ndarray], root: Path | None = None) -> Path | None:
    """Write the arrays (None when the cache is not writable: the run goes on without it)."""
    path = reference_path(key, root)

    def write(tmp: Path) -> None:
        payload: dict[str, Any] = {"__key__": np.asarray(key), **arrays}
        with tmp.open("wb") as handle:
            np.savez(handle, **payload)

    try:
        return atomic_write_with(path, write)
    except OSError:
        return None


def ragged(lists: list[list[float]] | list[list[int]], dtype: Any) -> dict[str, np.ndarray]:
    """values + offsets for a list of lists (a ragged array in two flat arrays)."""
    offsets = np.concatenate([[0], np.cumsum([len(x) for x in lists])]).astype(np.int64)
    values = np.asarray([v for x in lists for v in x], dtype=dtype)
    return {"values": values, "offsets": offsets}


def unragged(values: np.ndarray, offsets: np.ndarray) -> list[list[Any]]:
    return [values[offsets[i] : offsets[i + 1]].tolist() for i in range(len(offsets) - 1)]
