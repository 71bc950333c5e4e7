"""interop.distribute's `shared` arguments: every task receives them first, and each worker gets them once (the
pool through its initializer, Dask scattered), not once per task; a worker that dies is a WorkerDied (a pool's,
and a Dask task's, where Dask says KilledWorker)."""

from __future__ import annotations

import os
from typing import Any

import pytest

from precisionlab.interop.distribute import WorkerDied, distribute_tasks


def _tagged(table: dict[str, int], offset: int, x: int) -> tuple[int, int, int, int]:
    """(x, its value, the process, the shared table's identity there)."""
    return x, table["scale"] * x + offset, os.getpid(), id(table)


def _die(x: int) -> int:
    os._exit(3)


def _check(results: list[tuple[int, int, int, int]], n: int) -> None:
    assert sorted(r[:2] for r in results) == [(x, 10 * x + 1) for x in range(n)]
    by_process: dict[int, set[int]] = {}
    for _, _, pid, table in results:
        by_process.setdefault(pid, set()).add(table)
    assert all(len(tables) == 1 for tables in by_process.values())  # one copy per worker, kept for its tasks


def test_shared_arguments_serially_on_a_pool_and_on_dask() -> None:
    table = {"scale": 10}
    tasks = [(x,) for x in range(6)]
    serial = list(distribute_tasks(_tagged, tasks, shared=(table, 1)))
    assert [r[:2] for r in serial] == [(x, 10 * x + 1) for x in range(6)]  # in order, the object itself
    assert {r[3] for r in serial} == {id(table)}
    _check(list(distribute_tasks(_tagged, tasks, workers=2, shared=(table, 1))), 6)
    distributed = pytest.importorskip("distributed", reason="needs dask[distributed]")
    with (distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=False, dashboard_address=None)
          as cluster, distributed.Client(cluster) as client):
        results: list[Any] = list(distribute_tasks(_tagged, tasks, client=client, shared=(table, 1)))
    _check(results, 6)


def test_a_dead_pool_worker_is_a_worker_died() -> None:
    with pytest.raises(WorkerDied, match="a worker process died") as caught:
        list(distribute_tasks(_die, [(1,), (2,)], workers=2))
    assert isinstance(caught.value, RuntimeError) and caught.value.reason


@pytest.mark.slow  # 10 s under load: a Dask worker process started and killed
def test_a_dask_task_whose_worker_dies_is_a_worker_died() -> None:
    distributed = pytest.importorskip("distributed", reason="needs dask[distributed]")
    import dask

    with (dask.config.set({"distributed.scheduler.allowed-failures": 0}),
          distributed.LocalCluster(n_workers=1, threads_per_worker=1, processes=True, dashboard_address=None)
          as cluster, distributed.Client(cluster) as client,
          pytest.raises(WorkerDied, match="a worker process died \\(on the Dask cluster: ")):
        list(distribute_tasks(_die, [(1,)], client=client))
