"""The audit on a process pool and on a Dask LocalCluster equals the single-process audit exactly."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("ml_dtypes", reason="bf16 test tensors need ml_dtypes")
pytest.importorskip("safetensors", reason="test checkpoints are written with safetensors")

from precisionlab.interop import audit as audit_module
from precisionlab.interop.audit import RESULTS_NAME, batches, held_checkpoints
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


def test_batches_group_consecutive_tensors_up_to_the_byte_limit() -> None:
    sizes = {"a": 10, "b": 30, "c": 70, "d": 5, "e": 5}
    assert batches(list(sizes), sizes, 40) == [("a", "b"), ("c",), ("d", "e")]  # 40, 70 (alone), 10 (the rest)
    assert batches(list(sizes), sizes, 0) == [(name,) for name in sizes]
    assert batches([], sizes, 40) == []


@pytest.mark.parametrize("batch_bytes", [1, 3000, 1 << 30])  # a tensor a task, a few a task, one task
def test_two_workers_equal_one(run_cli: Any, checkpoint: Path, tmp_path: Path, batch_bytes: int,
                               monkeypatch: pytest.MonkeyPatch) -> None:
    serial = _audit(run_cli, str(checkpoint), "-s", SCHEMES)
    monkeypatch.setattr(audit_module, "BATCH_BYTES", batch_bytes)
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


def test_an_unreachable_scheduler_is_a_one_line_error() -> None:
    pytest.importorskip("distributed", reason="needs dask[distributed]")
    with pytest.raises(OSError, match=r"cannot reach the Dask scheduler at tcp://127\.0\.0\.1:9"):
        list(distribute_tasks(_square, [(1,)], scheduler="tcp://127.0.0.1:9", connect_timeout=1))


def test_dask_local_cluster_equals_the_single_process_audit(run_cli: Any, checkpoint: Path, tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    distributed = pytest.importorskip("distributed", reason="needs dask[distributed]")
    serial = _audit(run_cli, str(checkpoint), "-s", SCHEMES)
    monkeypatch.setattr(audit_module, "BATCH_BYTES", 1)  # a tensor a task, so that both workers get some
    with (distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, memory_limit="1GiB",
                                   dashboard_address=None, death_timeout=20) as cluster,
          distributed.Client(cluster) as client, distributed.get_task_stream(client) as stream):
        on_dask = _audit(run_cli, str(checkpoint), "-s", SCHEMES, "--scheduler", cluster.scheduler_address,
                         "--out", str(tmp_path / "out"))
        cached = client.run(held_checkpoints)
    assert on_dask == serial
    tasks = [t for t in stream.data if str(t["key"]).startswith("audit_batch")]
    assert len(tasks) == 10 and len({t["worker"] for t in tasks}) == 2  # both workers took tasks
    assert set(cached.values()) == {0}  # and let go of the checkpoint afterwards
    records = [json.loads(line) for line in (tmp_path / "out" / RESULTS_NAME).read_text().splitlines()[1:]]
    assert len(records) == 10 and all(r["error"] is None for r in records)
