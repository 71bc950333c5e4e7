"""The audit on a process pool and on a Dask LocalCluster equals the single-process audit exactly."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("ml_dtypes", reason="bf16 test tensors need ml_dtypes")
pytest.importorskip("safetensors", reason="test checkpoints are written with safetensors")

from precisionlab.interop import audit as audit_module
from precisionlab.interop.audit import RESULTS_NAME, plan_tasks
from precisionlab.interop.distribute import distribute_tasks
from tests.test_interop_audit import make_tensors, write_sharded

SCHEMES = "int4:g32,nvfp4"


def _audit(run_cli: Any, *args: str) -> dict[str, Any]:
    result = run_cli("audit", *args, "--json")
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


@pytest.fixture
def checkpoint(tmp_path: Path) -> Path:
    tensors = {**make_tensors(0), **{k.replace("layers.", "layers.9"): v for k, v in make_tensors(1).items()}}
    return write_sharded(tmp_path / "ckpt", tensors, shards=3)


def test_tasks_are_of_similar_cost_and_at_least_one_per_worker() -> None:
    sizes = {"a": 10, "b": 30, "c": 70, "d": 5, "e": 5}
    # total 120, 2 workers, 4 tasks each aimed at: 15 weights a task (a tensor larger than that is its own)
    assert plan_tasks(list(sizes), sizes, 2, min_elements=1) == [("c",), ("b",), ("a",), ("d", "e")]
    # a floor above the total: the target is capped at total / workers (60), so two workers still get 3 tasks
    assert plan_tasks(list(sizes), sizes, 2, min_elements=1000) == [("c",), ("a", "b"), ("d", "e")]
    assert plan_tasks([], sizes, 2) == []
    # SmolLM2-135M's shape: one 28M embedding and 210 tensors of 0.1M to 0.9M; 2 workers get 8 tasks, none
    # more than the embedding and the rest within a factor of 2 of each other
    big = {"token_embd": 28_311_552, **{f"blk.{i}.{k}": n for i in range(30) for k, n in
                                        (("q", 331_776), ("k", 110_592), ("v", 110_592), ("o", 331_776),
                                         ("gate", 884_736), ("up", 884_736), ("down", 884_736))}}
    tasks = plan_tasks(list(big), big, 2)
    costs = [sum(big[n] for n in t) for t in tasks]
    assert len(tasks) >= 2 * 2 and costs == sorted(costs, reverse=True) and costs[0] == big["token_embd"]
    assert max(costs[1:-1]) < 2 * min(costs[1:-1])
    assert sorted(n for t in tasks for n in t) == sorted(big)


@pytest.mark.parametrize("floor", [1, 3000, 1 << 30])  # a tensor a task, a few a task, one task per worker
def test_two_workers_equal_one(run_cli: Any, checkpoint: Path, tmp_path: Path, floor: int,
                               monkeypatch: pytest.MonkeyPatch) -> None:
    serial = _audit(run_cli, str(checkpoint), "-s", SCHEMES)
    monkeypatch.setattr(audit_module, "MIN_TASK_ELEMENTS", floor)
    monkeypatch.setattr(audit_module, "TASKS_PER_WORKER", 8)
    pooled = _audit(run_cli, str(checkpoint), "-s", SCHEMES, "--workers", "2", "--out", str(tmp_path / "out"))
    assert pooled == serial
    assert serial["findings"]["audit.totals.tensors"] == 10
    lines = (tmp_path / "out" / RESULTS_NAME).read_text().splitlines()
    assert len(lines) == 1 + 10  # each tensor appended once, by the parent only


def _square(x: int) -> int:
    return x * x


def test_map_tasks_backends_agree() -> None:
    tasks = [(i,) for i in range(7)]
    assert list(distribute_tasks(_square, tasks)) == [i * i for i in range(7)]  # serial: in task order
    assert sorted(distribute_tasks(_square, tasks, workers=2)) == [i * i for i in range(7)]
    assert list(distribute_tasks(_square, [], workers=2)) == []
    with pytest.raises(ValueError, match="not both"):
        distribute_tasks(_square, tasks, workers=2, scheduler="tcp://127.0.0.1:1")


def test_an_unreachable_scheduler_is_a_one_line_error_before_out_is_created(
        run_cli: Any, checkpoint: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("distributed", reason="needs dask[distributed]")
    from precisionlab.interop import distribute

    with pytest.raises(OSError, match=r"cannot reach the Dask scheduler at tcp://127\.0\.0\.1:9"):
        list(distribute_tasks(_square, [(1,)], scheduler="tcp://127.0.0.1:9", connect_timeout=1))
    monkeypatch.setattr(distribute, "CONNECT_TIMEOUT_S", 1)
    out = tmp_path / "out"
    result = run_cli("audit", str(checkpoint), "--scheduler", "tcp://127.0.0.1:9", "--out", str(out))
    assert result.exit_code == 2 and result.stderr.count("\n") == 1, result.output
    assert result.stderr.startswith("error: cannot reach the Dask scheduler at tcp://127.0.0.1:9")
    assert not out.exists()


def test_dask_local_cluster_equals_the_single_process_audit(run_cli: Any, checkpoint: Path, tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    distributed = pytest.importorskip("distributed", reason="needs dask[distributed]")
    serial = _audit(run_cli, str(checkpoint), "-s", SCHEMES)
    monkeypatch.setattr(audit_module, "MIN_TASK_ELEMENTS", 1)  # a tensor a task, so that both workers get some
    monkeypatch.setattr(audit_module, "TASKS_PER_WORKER", 1000)
    with (distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, memory_limit="1GiB",
                                   dashboard_address=None, death_timeout=20) as cluster,
          distributed.Client(cluster) as client, distributed.get_task_stream(client) as stream):
        on_dask = _audit(run_cli, str(checkpoint), "-s", SCHEMES, "--scheduler", cluster.scheduler_address,
                         "--out", str(tmp_path / "out"))
    assert on_dask == serial
    tasks = [t for t in stream.data if str(t["key"]).startswith("audit_batch")]
    assert len(tasks) == 10 and len({t["worker"] for t in tasks}) == 2  # both workers took tasks
    records = [json.loads(line) for line in (tmp_path / "out" / RESULTS_NAME).read_text().splitlines()[1:]]
    assert len(records) == 10 and all(r["error"] is None for r in records)


def _interrupt_after_the_first(pause: float) -> Any:
    """An on_record that waits `pause` s at the first record (other tasks finish meanwhile), then is Ctrl-C."""
    import time

    def on_record(record: dict[str, Any]) -> None:
        time.sleep(pause)
        raise KeyboardInterrupt

    return on_record


def _logged(out: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (out / RESULTS_NAME).read_text().splitlines()[1:]]


@pytest.mark.slow  # 7-13 s; a sibling test covers the same path in the default suite
def test_an_interrupt_keeps_every_finished_task_on_a_pool(checkpoint: Path, tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """Two workers, a tensor a task, at most four in flight: when the first record arrives four tasks were sent;
    after the pause all four are done, and the interrupt logs the three not yet taken as well."""
    from precisionlab.interop.audit import plan_audit, run_audit

    monkeypatch.setattr(audit_module, "MIN_TASK_ELEMENTS", 1)
    monkeypatch.setattr(audit_module, "TASKS_PER_WORKER", 1000)
    out = tmp_path / "out"
    with pytest.raises(KeyboardInterrupt):
        run_audit(plan_audit(checkpoint, [], out), workers=2, on_record=_interrupt_after_the_first(8.0))
    records = _logged(out)
    assert len(records) == 4 and all(r["error"] is None for r in records)
    plan = plan_audit(checkpoint, [], out)  # a rerun resumes from them
    assert len(plan.done) == 4 and len(plan.todo) == 6


def test_an_interrupt_keeps_every_finished_task_on_dask(checkpoint: Path, tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    distributed = pytest.importorskip("distributed", reason="needs dask[distributed]")
    from precisionlab.interop.audit import plan_audit, run_audit

    monkeypatch.setattr(audit_module, "MIN_TASK_ELEMENTS", 1)
    monkeypatch.setattr(audit_module, "TASKS_PER_WORKER", 1000)
    out = tmp_path / "out"
    with (distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, memory_limit="1GiB",
                                   dashboard_address=None, death_timeout=20) as cluster,
          distributed.Client(cluster) as client):
        with pytest.raises(KeyboardInterrupt):
            run_audit(plan_audit(checkpoint, [], out), client=client, on_record=_interrupt_after_the_first(10.0))
        records = _logged(out)
    assert len(records) == 10 and all(r["error"] is None for r in records)  # all ten tasks had finished
