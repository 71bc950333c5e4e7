"""The reference model's outputs, computed once per model, data and runtime, and cached.

An entry is found by two parts, both in its file name `cache_root()/eval/reference-<key>-<runtime>.npz`:

- the key: sha256 of (REFERENCE_FORMAT, the model's fingerprint — its files' hashes and dtype — the task kind,
  the data's fingerprint — every example's fields — and the scoring settings such as KL_TOP_K, the token
  limits and the batching);
- the runtime (`runtime_identity`): the torch, transformers and numpy versions, the torch thread count, the
  attention implementation, the dtype and the device. Each can change the logits in their last bits (a kernel
  that changed, a reduction split over more threads), and the paired differences would then hold that offset.

The runtime is also stored beside the arrays, so when an entry for the key exists under another runtime, the
run says what changed (`stale_reason`: "torch 2.13.0 -> 2.14.0") and computes the reference again; it never
serves an entry computed under another runtime. Entries of other runtimes stay (a machine whose thread count
follows its load alternates between two) until the cache is cleared. A candidate then costs one forward pass
per batch: nothing of the reference is recomputed. Entries are `.npz` files (no pickles), written whole or not
at all; a damaged entry is recomputed.
"""

from __future__ import annotations

import hashlib
import json
import zipfile
from pathlib import Path
from typing import Any

import numpy as np

from precisionlab import peers
from precisionlab._atomic import atomic_write_with
from precisionlab.models.loading import cache_root

REFERENCE_FORMAT = 3
"""Bumped whenever what a reference entry holds, or how it is computed, changes (3: the runtime identity)."""
RUNTIME_FIELDS = ("torch", "transformers", "numpy", "threads", "attention", "dtype", "device")
"""What `runtime_identity` records, in the order a stale entry's reason names them."""


def reference_key(model_fingerprint: str, task_kind: str, data_fingerprint: str, settings: dict[str, Any]) -> str:
    payload = json.dumps([REFERENCE_FORMAT, model_fingerprint, task_kind, data_fingerprint, settings],
                         sort_keys=True)
    return hashlib.sha256(payload.encode()).hexdigest()


def attention_implementation(model: Any) -> str:
    """The attention kernel transformers runs ("sdpa", "eager", ...): config._attn_implementation ("default"
    for a model without one)."""
    config = getattr(model, "config", None)
    for name in ("_attn_implementation", "attn_implementation"):
        value = getattr(config, name, None)
        if value:
            return str(value)
    return "default"


def runtime_identity(model: Any, threads: int) -> dict[str, str]:
    """The runtime a reference is computed in (the fields of RUNTIME_FIELDS; see the module docstring)."""
    torch, transformers = peers.torch(), peers.transformers()
    first = next(iter(model.parameters()), None)
    return {"torch": str(torch.__version__), "transformers": str(transformers.__version__),
            "numpy": str(np.__version__), "threads": str(int(threads)), "attention": attention_implementation(model),
            "dtype": str(first.dtype).removeprefix("torch.") if first is not None else "none",
            "device": str(first.device) if first is not None else "none"}


def _changed(old: dict[str, str], new: dict[str, str]) -> list[str]:
    names = [*RUNTIME_FIELDS, *sorted((set(old) | set(new)) - set(RUNTIME_FIELDS))]
    return [f"{name} {old.get(name, '?')} -> {new.get(name, '?')}" for name in names if old.get(name) != new.get(name)]


def runtime_changes(old: dict[str, str], new: dict[str, str]) -> str:
    """What differs, in RUNTIME_FIELDS order: "torch 2.13.0 -> 2.14.0, threads 2 -> 1" ("" when nothing does)."""
    return ", ".join(_changed(old, new))


def _runtime_digest(runtime: dict[str, str]) -> str:
    return hashlib.sha256(json.dumps(runtime, sort_keys=True).encode()).hexdigest()


def reference_path(key: str, runtime: dict[str, str], root: Path | None = None) -> Path:
    return (root or cache_root()) / "eval" / f"reference-{key[:32]}-{_runtime_digest(runtime)[:12]}.npz"


def _read(path: Path, with_arrays: bool = True) -> tuple[str, dict[str, str], dict[str, np.ndarray]] | None:
    """(stored key, stored runtime, arrays: none unless with_arrays) of an entry, or None when it cannot be read."""
    try:
        with np.load(path, allow_pickle=False) as archive:
            key = str(archive["__key__"])
            runtime = json.loads(str(archive["__runtime__"]))
            names = [name for name in archive.files if name not in ("__key__", "__runtime__")] if with_arrays else []
            arrays = {name: archive[name] for name in names}
    except (OSError, ValueError, KeyError, zipfile.BadZipFile, EOFError):
        return None
    if not isinstance(runtime, dict):
        return None
    return key, {str(k): str(v) for k, v in runtime.items()}, arrays


def load_reference(key: str, runtime: dict[str, str], root: Path | None = None) -> dict[str, np.ndarray] | None:
    """The cached arrays computed under exactly this runtime, or None (missing, unreadable or another key or
    runtime inside: the caller recomputes)."""
    path = reference_path(key, runtime, root)
    if not path.is_file():
        return None
    entry = _read(path)
    if entry is None or entry[0] != key or entry[1] != runtime:
        return None
    return entry[2]


def stale_reason(key: str, runtime: dict[str, str], root: Path | None = None) -> str:
    """Why no entry serves (key, runtime) although one for the key exists: what changed against the closest entry
    ("torch 2.13.0 -> 2.14.0"), or that the entry is unreadable; "" when the key has no entry at all."""
    folder = (root or cache_root()) / "eval"
    mine = reference_path(key, runtime, root)
    if mine.is_file():
        return "its cache entry was unreadable"
    try:
        siblings = sorted(folder.glob(f"reference-{key[:32]}-*.npz"), key=lambda p: p.stat().st_mtime, reverse=True)
    except OSError:
        return ""
    found = [entry[1] for entry in (_read(p, with_arrays=False) for p in siblings)
             if entry is not None and entry[0] == key]
    if not found:
        return ""
    closest = min(found, key=lambda old: len(_changed(old, runtime)))  # the newest among equals
    return runtime_changes(closest, runtime)


def save_reference(key: str, runtime: dict[str, str], arrays: dict[str, np.ndarray],
                   root: Path | None = None) -> Path | None:
    """Write the arrays and their runtime (None when the cache is not writable: the run goes on without it)."""
    path = reference_path(key, runtime, root)

    def write(tmp: Path) -> None:
        payload: dict[str, Any] = {"__key__": np.asarray(key), "__runtime__": np.asarray(json.dumps(runtime)),
                                   **arrays}
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
