"""The shared chunk-parallel helper: fork safety, sizing from CPU affinity, the thread override.

The fork tests run in a subprocess with a timeout so that a regression fails instead of
hanging the suite: the parent does one large round_to and one large quantize (which start
the thread pool), then forks a child that does the same work and must finish.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import numpy as np
import pytest

import precisionlab as pl
from precisionlab import parallel

SRC = Path(__file__).resolve().parents[1] / "src"
LARGE = 1 << 21  # above quant's PARALLEL_MIN (2^20) and the rounding threshold the scripts below set
ROUNDING_ON_THREADS = """
from precisionlab.rounding import chunks, engine
chunks.PARALLEL_MIN = engine.PARALLEL_MIN = 1 << 18  # put round_to on the pool (2^26 by default)
"""
CHILD_TIMEOUT_S = 60

FORK_SCRIPT = """
import multiprocessing as mp
import sys

import numpy as np
import precisionlab as pl
{threads}
x = np.random.default_rng(0).standard_normal({n}).astype(np.float32)
pl.round_to(x, "e4m3")                     # the general path
expected = pl.round_to(x, "e4m3")          # the fast path; both start the pool in the parent
expected_q = pl.quantize(x, "int8:g128").dequantize()

def child(queue):
    y = pl.round_to(x, "e4m3")
    q = pl.quantize(x, "int8:g128").dequantize()
    queue.put(bool(np.array_equal(y, expected, equal_nan=True) and np.array_equal(q, expected_q)))

ctx = mp.get_context("fork")
queue = ctx.Queue()
proc = ctx.Process(target=child, args=(queue,))
proc.start()
proc.join({timeout})
if proc.is_alive():
    proc.kill()
    print("child hung")
    sys.exit(3)
print("child exit", proc.exitcode, "equal", queue.get(timeout=5))
sys.exit(0 if proc.exitcode == 0 else 4)
"""


def _python(script: str, threads: str | None, timeout: float) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != parallel.THREADS_ENV}
    env["PYTHONPATH"] = str(SRC)
    if threads is not None:
        env[parallel.THREADS_ENV] = threads
    return subprocess.run([sys.executable, "-c", textwrap.dedent(script)], env=env, capture_output=True, text=True,
                          timeout=timeout)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_forked_child_after_large_round_to_and_quantize_finishes() -> None:
    # two threads even on a one-core runner, so the parent really starts a pool before the fork
    script = FORK_SCRIPT.format(n=LARGE, timeout=CHILD_TIMEOUT_S, threads=ROUNDING_ON_THREADS)
    done = _python(script, threads="2", timeout=CHILD_TIMEOUT_S + 60)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "child exit 0 equal True" in done.stdout


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_dataloader_workers_after_large_round_to_finish() -> None:
    pytest.importorskip("torch", reason="the DataLoader case needs torch")
    script = f"""
    import numpy as np, torch
    import precisionlab as pl
    from torch.utils.data import DataLoader, Dataset
    from precisionlab.rounding import chunks, engine
    chunks.PARALLEL_MIN = engine.PARALLEL_MIN = 1 << 18

    x = np.random.default_rng(0).standard_normal({LARGE}).astype(np.float32)
    pl.round_to(x, "bf16")
    pl.round_to(x, "bf16")

    class Rounded(Dataset):
        def __len__(self):
            return 2
        def __getitem__(self, i):
            return torch.from_numpy(pl.round_to(x, "e4m3")[:4])

    loader = DataLoader(Rounded(), batch_size=1, num_workers=2, multiprocessing_context="fork",
                        timeout={CHILD_TIMEOUT_S})
    print("batches", len(list(loader)))
    """
    done = _python(script, threads="2", timeout=CHILD_TIMEOUT_S + 90)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "batches 2" in done.stdout


def test_worker_count_comes_from_cpu_affinity(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(parallel.THREADS_ENV, raising=False)
    if hasattr(os, "sched_getaffinity"):
        monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 3, 5})
        monkeypatch.setattr(os, "cpu_count", lambda: 64)
        assert parallel.worker_count() == 3
        monkeypatch.delattr(os, "sched_getaffinity")
    monkeypatch.setattr(os, "cpu_count", lambda: 6)
    assert parallel.worker_count() == 6
    monkeypatch.setattr(os, "cpu_count", lambda: None)
    assert parallel.worker_count() == 1


@pytest.mark.parametrize(("value", "expected"), [("1", 1), ("3", 3), (" 8 ", 8)])
def test_threads_environment_variable_overrides(monkeypatch: pytest.MonkeyPatch, value: str, expected: int) -> None:
    monkeypatch.setenv(parallel.THREADS_ENV, value)
    assert parallel.worker_count() == expected


@pytest.mark.parametrize("value", ["0", "-2", "two", "1.5"])
def test_threads_environment_variable_rejects_nonsense(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv(parallel.THREADS_ENV, value)
    with pytest.raises(ValueError, match=parallel.THREADS_ENV):
        parallel.worker_count()


def test_one_thread_starts_no_threads() -> None:
    script = f"""
    import threading
    import numpy as np
    import precisionlab as pl
    from precisionlab.rounding import chunks, engine
    chunks.PARALLEL_MIN = engine.PARALLEL_MIN = 1 << 18

    x = np.random.default_rng(0).standard_normal({LARGE}).astype(np.float32)
    pl.round_to(x, "e4m3"); pl.round_to(x, "e4m3"); pl.quantize(x, "int4:g128")
    print("threads", sorted(t.name for t in threading.enumerate()))
    """
    one = _python(script, threads="1", timeout=120)
    assert one.returncode == 0, one.stderr
    assert "threads ['MainThread']" in one.stdout
    two = _python(script, threads="2", timeout=120)
    assert two.returncode == 0, two.stderr
    assert "precisionlab" in two.stdout  # the pool's threads are named, and there are some


def test_map_keeps_order_and_runs_nested_calls_inline(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(parallel.THREADS_ENV, "2")
    parallel.reset()
    try:
        outer_threads: set[str] = set()

        def inner(i: int) -> int:
            return i * i

        def outer(i: int) -> int:
            outer_threads.add(threading.current_thread().name)
            # a task that fans out again must not wait on the pool it occupies (it would deadlock)
            return sum(parallel.map_tasks(inner, list(range(i)), parallel=True))

        items = list(range(40))
        assert parallel.map_tasks(outer, items, parallel=True) == [sum(j * j for j in range(i)) for i in items]
        assert all(name.startswith("precisionlab") for name in outer_threads)
    finally:
        parallel.reset()


def test_exceptions_in_a_task_reach_the_caller(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(parallel.THREADS_ENV, "2")
    parallel.reset()

    def fail(i: int) -> int:
        if i == 3:
            raise ZeroDivisionError("task 3")
        return i

    try:
        with pytest.raises(ZeroDivisionError, match="task 3"):
            parallel.map_tasks(fail, list(range(8)), parallel=True)
    finally:
        parallel.reset()


def test_round_to_and_quantize_use_the_shared_helper(monkeypatch: pytest.MonkeyPatch) -> None:
    from precisionlab.rounding import chunks, engine

    calls: list[str] = []
    real_map, real_spread = parallel.map_tasks, parallel.spread

    def counting_map(fn, items, parallel=True):  # type: ignore[no-untyped-def]
        calls.append("map_tasks")
        return real_map(fn, items, parallel=parallel)

    def counting_spread(fn):  # type: ignore[no-untyped-def]
        calls.append("spread")
        return real_spread(fn)

    monkeypatch.setattr(parallel, "map_tasks", counting_map)
    monkeypatch.setattr(parallel, "spread", counting_spread)
    monkeypatch.setattr(chunks, "PARALLEL_MIN", LARGE // 2)
    monkeypatch.setattr(engine, "PARALLEL_MIN", LARGE // 2)
    x = np.random.default_rng(1).standard_normal(LARGE).astype(np.float32)
    pl.round_to(x, "e5m2", overflow="saturate")  # a key no other test has cached: the general path
    assert calls and set(calls) == {"map_tasks"}
    del calls[:]
    pl.round_to(x, "e5m2", overflow="saturate")  # its cached fast kernel
    assert calls == ["spread"]
    pl.quantize(x, "int8:row")
    assert calls[1:] and set(calls[1:]) == {"map_tasks"}
