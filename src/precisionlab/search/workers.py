"""The direct sensitivity pass as independent tasks: one per (unit, format), in this process, on a local process
pool (`workers`) or on a Dask cluster (`scheduler`), through interop.distribute (what `audit` uses).

    results = direct_sensitivities(context, spec, units, formats, workers=2)   # {(unit, format): (kl, seconds)}

A worker builds its own `SensitivityContext` once (the model loaded from `spec.model`, the calibration token ids
carried in the spec) and keeps it for its later tasks; it runs torch with the parent's thread count, so every
task computes what the single-process pass computes, bit for bit. On a cluster the model must load on the
workers under the same name or path.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class WorkerSpec:
    """What a worker needs to rebuild the context: the model, its dtype, the calibration ids, torch threads."""

    model: str
    dtype: str
    batches: tuple[tuple[int, ...], ...]
    threads: int


_CONTEXTS: dict[WorkerSpec, Any] = {}


def worker_spec(model: str, dtype: str, batches: Sequence[Any], threads: int) -> WorkerSpec:
    return WorkerSpec(model, dtype, tuple(tuple(int(t) for t in b.reshape(-1).tolist()) for b in batches), threads)


def _context(spec: WorkerSpec) -> Any:
    if spec not in _CONTEXTS:
        from precisionlab import peers
        from precisionlab.models import load_model
        from precisionlab.search.sensitivity import SensitivityContext

        torch = peers.torch()
        loaded = load_model(spec.model, dtype=spec.dtype)
        batches = [torch.tensor([list(b)], dtype=torch.long) for b in spec.batches]
        _CONTEXTS.clear()
        _CONTEXTS[spec] = SensitivityContext(loaded.model, batches)
    return _CONTEXTS[spec]


def direct_task(spec: WorkerSpec, unit: str, layers: tuple[str, ...], fmt: str) -> tuple[str, str, float, float]:
    """(unit, format, KL, seconds) on this worker's context (module-level: sent by reference), with the parent's
    torch threads while it runs (peers.torch_threads: the worker's own count is restored after)."""
    from precisionlab import peers

    with peers.torch_threads(spec.threads):
        context = _context(spec)
        began = time.perf_counter()
        kl = context.direct(layers, fmt)
        return unit, fmt, kl, time.perf_counter() - began


def release() -> None:
    """Let go of the worker's cached context (run on every Dask worker at the end)."""
    _CONTEXTS.clear()


def direct_sensitivities(context: Any, spec: WorkerSpec | None, units: Sequence[Any], formats: Sequence[str],
                         costs: Sequence[Sequence[int | None]], workers: int = 1, scheduler: str | None = None,
                         client: Any = None, tick: Callable[[str], None] | None = None,
                         done: dict[tuple[str, str], tuple[float, float]] | None = None,
                         record: Callable[[str, str, float, float], None] | None = None
                         ) -> dict[tuple[str, str], tuple[float, float]]:
    """{(unit, format): (KL, seconds)} for every format a unit can take (a None cost is skipped); the pairs in
    `done` (an earlier run's) are taken as they are, each new one is handed to `record` as it finishes."""
    from precisionlab.interop.distribute import distribute_tasks

    out: dict[tuple[str, str], tuple[float, float]] = {}
    jobs = []
    for u, row in zip(units, costs, strict=True):
        for f, c in zip(formats, row, strict=True):
            if c is None:
                continue
            if done is not None and (u.name, f) in done:
                out[(u.name, f)] = done[(u.name, f)]
            else:
                jobs.append((u, f))

    def finished(name: str, fmt: str, kl: float, seconds: float) -> None:
        out[(name, fmt)] = (kl, seconds)
        if record is not None:
            record(name, fmt, kl, seconds)
        if tick is not None:
            tick(f"{name} {fmt}")

    if workers == 1 and scheduler is None and client is None:
        for unit, fmt in jobs:
            began = time.perf_counter()
            kl = context.direct(unit.layers, fmt)
            finished(unit.name, fmt, kl, time.perf_counter() - began)
        return out
    if spec is None:
        raise ValueError("a distributed sensitivity pass needs the model's name or path")
    tasks = [(spec, unit.name, unit.layers, fmt) for unit, fmt in jobs]
    with distribute_tasks(direct_task, tasks, workers=workers, scheduler=scheduler, client=client,
                          cleanup=release) as stream:
        for name, fmt, kl, seconds in stream:
            finished(name, fmt, kl, seconds)
    return out
