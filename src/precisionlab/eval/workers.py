"""An evaluation's candidates scored on worker processes or a Dask cluster (through interop.distribute).

    run = evaluate(loaded, candidates, tasks, max_drop, workers=2)                     # a local process pool
    run = evaluate(loaded, candidates, tasks, max_drop, scheduler="tcp://host:8786")   # a Dask cluster
    precisionlab eval --workers 2 ...          precisionlab eval --scheduler tcp://host:8786 ...

The parent computes (or reads from the cache) each task's reference and the layer-output probe, as a serial run
does. Every worker then receives once (distribute's `shared`) what scoring a candidate needs: the model's spec
(what `load_model` takes there), its dtype and fingerprint, the torch thread count and runtime of the reference
(eval.reference.runtime_identity), the tasks with the reference's arrays, the probe and the scoring settings.
One task is one candidate. A worker loads the model once and keeps it for its later candidates (Dask workers let
go of it at the end) and scores one candidate at a time, even with several threads. It refuses, in one line, a model
whose fingerprint, or a runtime (library versions, attention, device) that differs from the parent's, runs
`runner.score_candidate` with the parent's thread count and returns the candidate's record and outcomes; the
parent puts them in the candidates' order. So the EvalRun is the serial one, bit for bit: the same code on the
same inputs with the same threads.

A candidate parsed from a scheme travels as it is; a prepared one (a saved result, `--from`) as its `rebuild`
(the result's path: the worker reads the file itself). A prepared candidate built in Python without a rebuild
cannot be sent (ValueError, before the reference pass). On a cluster the model and the `--from` files must load
on the workers under the same name or path. Each worker holds its own copy of the model beside the parent's.
"""

from __future__ import annotations

import dataclasses
import socket
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class WorkerContext:
    """What every worker receives once (see the module docstring)."""

    model: str
    dtype: str
    fingerprint: str
    runtime: dict[str, str]
    threads: int
    runs: tuple[Any, ...]
    """The tasks' runner.TaskRun, with the reference's arrays and no outcomes."""
    probe: Any
    options: Any
    """runner.CandidateScoring."""
    score: Callable[..., tuple[Any, list[Any]]]
    """runner.score_candidate, handed in by the runner (this module sits below it; sent by reference)."""


_LOADED: dict[tuple[str, str, str], Any] = {}
"""In a worker: the model it loaded, by (spec, dtype, fingerprint); one at a time."""
_ONE_AT_A_TIME = threading.Lock()
"""A worker process scores one candidate at a time, whatever its thread count (a Dask worker with several threads,
a cluster of threads): a candidate changes the model's weights in place, and transformers creates a model's
tensors on the meta device process-wide while it loads one, which would reach another thread's tensors."""


def check_distributable(candidates: Sequence[Any], workers: int, scheduler: str | None, client: Any) -> None:
    """ValueError for a worker count below 1, a count together with a cluster, or a candidate that cannot be sent."""
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise ValueError(f"workers must be a positive integer, got {workers!r}")
    if (scheduler is not None or client is not None) and workers != 1:
        raise ValueError("give either a worker count or a Dask scheduler, not both")
    for candidate in candidates:
        portable(candidate)


def portable(candidate: Any) -> Any:
    """The candidate as it is sent to a worker: itself, or for a prepared one its rebuild (ValueError without)."""
    if candidate.prepare is None:
        return candidate
    if candidate.rebuild is None:
        raise ValueError(f"candidate {candidate.label} was prepared in Python and has no `rebuild`, so it cannot be "
                         "sent to worker processes; evaluate it with workers=1")
    return dataclasses.replace(candidate, prepare=None)


def worker_model_spec(spec: str) -> str:
    """What a worker loads: an existing local path made absolute (a worker may start elsewhere), else the spec."""
    path = Path(spec).expanduser()
    return str(path.resolve()) if path.exists() else spec


def _model(context: WorkerContext) -> Any:
    key = (context.model, context.dtype, context.fingerprint)
    loaded = _LOADED.get(key)
    if loaded is None:
        from precisionlab.models import load_model

        _LOADED.clear()
        loaded = load_model(context.model, dtype=context.dtype)
        if loaded.fingerprint != context.fingerprint:
            raise ValueError(f"the worker on {socket.gethostname()} loaded another model from {context.model} "
                             f"(fingerprint {loaded.fingerprint[:12]}, the parent's {context.fingerprint[:12]}): "
                             "give the workers the same files")
        _LOADED[key] = loaded
    return loaded


def candidate_task(context: WorkerContext, index: int, candidate: Any) -> tuple[int, Any, list[Any]]:
    """(index, CandidateRun, outcomes) of one candidate on this worker (module-level: sent by reference)."""
    from precisionlab import peers
    from precisionlab.eval.reference import runtime_changes, runtime_identity

    with _ONE_AT_A_TIME, peers.torch_threads(context.threads):
        loaded = _model(context)
        changes = runtime_changes(context.runtime, runtime_identity(loaded.model, context.threads))
        if changes:
            raise ValueError(f"the worker on {socket.gethostname()} runs another runtime than the reference "
                             f"({changes}): its scores would differ in their last bits; give the workers the "
                             "parent's versions")
        installed = candidate.rebuild[0](*candidate.rebuild[1]) if candidate.rebuild is not None else candidate
        run, outcomes = context.score(loaded, installed, context.runs, context.probe, context.options, _Silent())
    return index, dataclasses.replace(run, candidate=candidate), outcomes


class _Silent:
    """A worker's progress: its parent prints each candidate's lines when it finishes."""

    def start(self, description: str, total: int) -> None:
        return None

    def advance(self, n: int) -> None:
        return None

    def done(self, description: str) -> None:
        return None


def release() -> None:
    """Let go of the worker's model (run on every Dask worker at the end)."""
    _LOADED.clear()


def where(workers: int, scheduler: str | None, client: Any, count: int) -> str:
    """Where the candidates run, for the progress lines."""
    if client is not None:
        address = getattr(getattr(client, "scheduler", None), "address", None)
        return f"the Dask cluster at {address}" if address else "the Dask cluster"
    if scheduler is not None:
        return f"the Dask cluster at {scheduler}"
    processes = min(workers, count)
    return f"{processes} worker process{'es' if processes > 1 else ''}"


def score_distributed(loaded: Any, candidates: Sequence[Any], runs: Sequence[Any], probe: Any, options: Any,
                      runtime: dict[str, str], progress: Any, score: Callable[..., tuple[Any, list[Any]]],
                      task_line: Callable[[str, Any, Any], str], workers: int = 1, scheduler: str | None = None,
                      client: Any = None, model_spec: str | None = None) -> list[tuple[Any, list[Any]]]:
    """[(CandidateRun, outcomes)] in the candidates' order, scored elsewhere by `score` (runner.score_candidate; see
    the module docstring); the progress gets each candidate's `task_line`s as it finishes."""
    from precisionlab.interop.distribute import WorkerDied, distribute_tasks

    context = WorkerContext(worker_model_spec(model_spec or loaded.source), loaded.dtype, loaded.fingerprint, runtime,
                            int(runtime["threads"]), tuple(dataclasses.replace(run, outcomes=[]) for run in runs),
                            probe, options, score)
    tasks = [(index, portable(candidate)) for index, candidate in enumerate(candidates)]
    place = where(workers, scheduler, client, len(tasks))
    results: dict[int, tuple[Any, list[Any]]] = {}
    began = time.perf_counter()
    progress.start(f"scoring {len(tasks)} candidate{'s' if len(tasks) > 1 else ''} on {place}", 0)
    try:
        with distribute_tasks(candidate_task, tasks, workers=workers, scheduler=scheduler, client=client,
                              cleanup=release, shared=(context,)) as stream:
            for index, run, outcomes in stream:
                candidate = candidates[index]
                results[index] = (dataclasses.replace(run, candidate=candidate), outcomes)
                for task, outcome in zip(runs, outcomes, strict=True):
                    progress.done(task_line(candidate.label, task, outcome))
                left = len(tasks) - len(results)
                if left:
                    progress.start(f"scoring {left} more candidate{'s' if left > 1 else ''} on {place}", 0)
    except WorkerDied as exc:
        raise OSError(f"a worker process died while scoring the candidates on {place} (killed for memory, say; "
                      f"each holds a copy of the model): {exc.reason}") from None
    progress.done(f"scored {len(tasks)} candidate{'s' if len(tasks) > 1 else ''} on {place} "
                  f"({time.perf_counter() - began:.1f} s)")
    return [results[index] for index in range(len(tasks))]
