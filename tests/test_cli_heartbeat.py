"""Every command's heartbeat (cli.progress.Heartbeat, started by cli.main): off a terminal no command is silent
on stderr for longer than HEARTBEAT_S, whatever it does, and the line says what it does.

Issue 36 measured, off a terminal: 13-18 s of silence at the start of axpy and lossscale (no progress at all),
76.3 s in `run`'s eval lab, and 85.6 s during the first model load, where the StepProgress heartbeat was
running but its lines went into the StringIO the loader puts in place of sys.stderr to hide transformers'
tqdm bar. The lines are timed by wrapping `progress_line`, the one function every progress line goes through
(the real one still prints, so result.stderr is what a user would see).
"""

from __future__ import annotations

import contextlib
import io
import itertools
import json
import time
from pathlib import Path

import pytest

from precisionlab.cli import progress as module

BEAT = 0.1
"""The heartbeat interval in these tests (5 s in use)."""


@pytest.fixture
def lines(monkeypatch: pytest.MonkeyPatch) -> list[tuple[float, str]]:
    """(time, text) of every progress line, printed as well; the heartbeat shortened to BEAT."""
    recorded: list[tuple[float, str]] = []
    real = module.progress_line

    def record(text: str) -> None:
        recorded.append((time.perf_counter(), text))
        real(text)

    monkeypatch.setattr(module, "progress_line", record)
    monkeypatch.setattr(module, "HEARTBEAT_S", BEAT)
    return recorded


@pytest.fixture
def slow_axpy(monkeypatch: pytest.MonkeyPatch) -> float:
    """Each of axpy's four timings takes 0.4 s and moves little: the command takes 1.6 s, 16 heartbeats."""
    from precisionlab.labs import axpy

    pytest.importorskip("torch")  # imported here: its import holds the interpreter's lock for seconds under load
    real_copy, real_axpy = axpy.copy_bandwidth, axpy.axpy_timing

    def copy(*args: object) -> object:
        time.sleep(0.4)
        return real_copy(4096, 0.001)

    def timing(precision: str, *args: object) -> object:
        time.sleep(0.4)
        return real_axpy(precision, 4096, 0.001)

    monkeypatch.setattr(axpy, "copy_bandwidth", copy)
    monkeypatch.setattr(axpy, "axpy_timing", timing)
    return 1.6


def gaps(recorded: list[tuple[float, str]], began: float, ended: float) -> list[float]:
    times = [began, *(t for t, _ in recorded), ended]
    return [b - a for a, b in itertools.pairwise(times)]


def test_a_command_without_progress_of_its_own_says_what_it_times(run_cli, lines, slow_axpy) -> None:  # type: ignore[no-untyped-def]
    began = time.perf_counter()
    result = run_cli("axpy")
    ended = time.perf_counter()
    assert result.exit_code == 0, result.output
    texts = [text for _, text in lines]
    assert len(texts) >= 8, texts
    spans = gaps(lines, began, ended)
    # without the heartbeat the command is silent for all of its 1.6 s; with it a line comes every BEAT (0.1 s),
    # late by the machine's scheduling under load
    assert max(spans) < 10 * BEAT, list(zip(spans, [*texts, "(the end)"], strict=True))
    for what in ("the copy ceiling", "the fp32 axpy", "the fp16 axpy", "the bf16 axpy"):
        assert any(t.startswith(f"timing {what} (4096 elements): ") or t.startswith(f"timing {what} (")
                   for t in texts), (what, texts)
    assert all(t in result.stderr for t in texts)  # on the command's stderr, as printed
    assert "timing" not in result.stdout


def test_the_heartbeat_goes_to_stderr_only_under_json(run_cli, lines, slow_axpy) -> None:  # type: ignore[no-untyped-def]
    result = run_cli("axpy", "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["lab"] == "axpy"  # stdout is the JSON document and nothing else
    assert sum("timing the " in line for line in result.stderr.splitlines()) >= 8, result.stderr


def test_no_heartbeat_on_a_terminal(run_cli, lines, slow_axpy, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    """On a terminal the bars and spinners show the work: the watch does not start."""
    monkeypatch.setattr(module, "stderr_is_terminal", lambda: True)
    result = run_cli("axpy", "--json")
    assert result.exit_code == 0, result.output
    assert lines == [] and result.stderr == ""


def test_a_quick_command_prints_only_its_result(run_cli) -> None:  # type: ignore[no-untyped-def]
    run_cli("explain", "0.1", "--format", "bf16")  # its first call imports a peer, which may take 5 s under load
    result = run_cli("explain", "0.1", "--format", "bf16")
    assert result.exit_code == 0 and result.stderr == "", result.stderr


def test_a_busy_step_and_the_time_without_one_are_named(run_cli, lines, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    """lossscale's training runs under `busy`: the heartbeat names it; after it, `working: ... since "..."`."""
    import precisionlab.cli.lossscale as lossscale_cli

    real = lossscale_cli.run

    def slow(**kwargs: object) -> object:
        time.sleep(0.5)
        return real(parts=("bill",))

    monkeypatch.setattr(lossscale_cli, "run", slow)
    result = run_cli("lossscale", "--steps", "1")
    assert result.exit_code == 0, result.output
    texts = [text for _, text in lines]
    assert any(t.startswith("training every variant in emulated precision: ") for t in texts), texts


def test_run_names_the_lab_it_runs(run_cli, lines, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """`run`'s eval lab went 76 s without a line: each lab now has its heartbeat, naming the lab."""
    import dataclasses

    from precisionlab.labs import all_labs

    formats = next(lab for lab in all_labs() if lab.name == "formats")

    def slow(**kwargs: object) -> object:
        time.sleep(0.5)
        return formats.run(**kwargs)

    import precisionlab.cli.run as run_module

    monkeypatch.setattr(run_module, "select_labs", lambda names: [dataclasses.replace(formats, run=slow)])
    result = run_cli("run", "--only", "formats", "--out", str(tmp_path / "report"))
    assert result.exit_code == 0, result.output
    texts = [text for _, text in lines]
    assert any(t.startswith("running the formats lab (1/1): ") for t in texts), texts


def test_a_model_load_that_hides_stderr_still_beats(run_cli, lines, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    """The first load of a GGUF model converts it with sys.stderr redirected into a StringIO (transformers' tqdm
    bar kept off the output): the progress lines printed meanwhile must still reach the command's stderr. Before,
    they went into the StringIO: 85.6 s (113 s here, at load 5-9) without a line. The load here notes its
    conversion as models.loading does, then stops with a one-line error (no model is needed to show it)."""
    import precisionlab.models as models

    def converting(spec: str, dtype: str = "float32", cache: bool = True, progress=None):  # type: ignore[no-untyped-def]
        progress("converting model.gguf to float32 (about 20 s; cached for later loads)")
        with contextlib.redirect_stderr(io.StringIO()):  # what models.loading does around the conversion
            time.sleep(1.0)
        raise ValueError("model.gguf: stopped here")

    monkeypatch.setattr(models, "load_model", converting)
    result = run_cli("eval", "--model", "model.gguf", "--schemes", "int8:row", "--tasks", "ppl")
    assert result.exit_code == 2, result.output
    printed = result.stderr.splitlines()
    start = printed.index("converting model.gguf to float32 (about 20 s; cached for later loads)")
    assert printed[-1] == "error: model.gguf: stopped here"
    beats = printed[start + 1:-1]
    assert len(beats) >= 5, printed  # 1.0 s of conversion at a heartbeat of 0.1 s
    assert all(line.startswith("loading model.gguf: ") for line in beats), beats


LEAVE_SCRIPT = """
import atexit, sys, threading, time, types
sys.modules.setdefault("torch", types.ModuleType("torch"))  # a heavy peer "imported": main() takes leave()'s path
atexit.register(lambda: print("atexit ran", flush=True))
def late():
    time.sleep(0.3)
    print("thread finished")  # buffered: flushed by leave() before the process ends
threading.Thread(target=late).start()
sys.argv = ["precisionlab", *sys.argv[1:]]
from precisionlab.cli.main import main
main()
"""


@pytest.mark.parametrize(("args", "code"), [(["capacity", "--model", "llama3_8b", "--json"], 0),
                                            (["capacity", "--model", "llama9"], 2)])
def test_leaving_without_the_teardown_keeps_what_exit_does(args: list[str], code: int) -> None:
    """After a model command the interpreter's teardown of torch and transformers took 7-19 s at load 9-12 with
    nothing printed; main() skips it (cli.main.leave) but keeps the exit code, the threads' work, the atexit
    handlers and every buffered line."""
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", LEAVE_SCRIPT, *args], capture_output=True, text=True, timeout=120)
    assert done.returncode == code, done.stderr
    assert "thread finished" in done.stdout and done.stdout.rstrip().endswith("atexit ran"), done.stdout
    if code == 0:
        assert '"lab": "capacity"' in done.stdout  # the command's own output, flushed
    else:
        assert done.stderr.startswith("error: ") and "llama9" in done.stderr, done.stderr
