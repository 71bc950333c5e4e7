"""Progress of the model commands off a terminal (cli.progress.StepProgress, re-exported by cli.common).

Before the heartbeat, a step printed only its closing line: `eval` was silent for 24 minutes while the choice
reference ran under load. The lines here are recorded with their times by replacing `progress_line`, the one
function every progress line goes through.
"""

from __future__ import annotations

import itertools
import time

import pytest

from precisionlab.cli import progress as module
from precisionlab.cli.common import StepProgress, duration  # re-exported from cli.progress


@pytest.fixture
def lines(monkeypatch: pytest.MonkeyPatch) -> list[tuple[float, str]]:
    recorded: list[tuple[float, str]] = []
    monkeypatch.setattr(module, "progress_line", lambda text: recorded.append((time.perf_counter(), text)))
    return recorded


def gaps(recorded: list[tuple[float, str]], began: float, ended: float) -> list[float]:
    times = [began, *(t for t, _ in recorded), ended]
    return [b - a for a, b in itertools.pairwise(times)]


def test_duration_reads_as_a_person_writes_it() -> None:
    assert duration(8.24) == "8.2 s"
    assert duration(72) == "1 min 12 s"
    assert duration(3 * 3600 + 4 * 60 + 59) == "3 h 04 min"


def test_a_step_without_advances_still_prints_every_heartbeat(lines: list[tuple[float, str]]) -> None:
    """One item that takes long (an example under load): the step's line comes every heartbeat all the same."""
    began = time.perf_counter()
    with StepProgress(heartbeat=0.1, terminal=False) as progress:
        progress.start("reference: choice", 100)
        time.sleep(1.0)
        ended = time.perf_counter()
    assert len(lines) >= 5, lines
    assert max(gaps(lines, began, ended)) < 0.6, gaps(lines, began, ended)
    assert all(text.startswith("reference: choice: 0/100, ") and text.endswith("no estimate before the first one")
               for _, text in lines), lines


def test_the_estimate_is_the_time_per_item_times_the_items_left() -> None:
    progress = StepProgress(terminal=False)
    progress.start("int4:g128: choice", 10)
    progress.advance(3)
    began = progress.step_began
    # 3 items in 30 s: 10 s each, 7 left -> 70 s
    assert progress.status(began + 30) == "int4:g128: choice: 3/10, 30.0 s, about 1 min 10 s left"
    progress.advance(7)
    assert progress.status(began + 95) == "int4:g128: choice: 10/10, 1 min 35 s, finishing"  # the statistics


def test_phases_and_the_time_between_steps_have_their_own_lines(lines: list[tuple[float, str]]) -> None:
    with StepProgress(heartbeat=0.1, terminal=False) as progress:
        progress.start("quantizing the weights for int4:g128", 0)
        time.sleep(0.35)
        progress.done("reference: ppl (10 examples, 3.0 s)")
        time.sleep(0.35)
    texts = [text for _, text in lines]
    assert any(t.startswith("quantizing the weights for int4:g128: ") and t.endswith(" s") for t in texts), texts
    assert "reference: ppl (10 examples, 3.0 s)" in texts
    after = texts[texts.index("reference: ppl (10 examples, 3.0 s)") + 1:]
    assert after and all(t.startswith("working: ") and 'since "reference: ppl (10 examples, 3.0 s)"' in t
                         for t in after), after


def test_a_long_last_line_is_quoted_short() -> None:
    progress = StepProgress(terminal=False)
    progress.last_line = "the machine is busy (load average 7.6 on 2 CPUs): torch runs 1 thread, not its default 2"
    progress.last_line_at = progress.began = 0.0
    quoted = progress.last_line[:module.QUOTE_CHARS - 1]  # 59 characters, then the ellipsis
    assert quoted.endswith("torch run")
    assert progress.status(5.0) == f'working: 5.0 s since "{quoted}…" (5.0 s in all)'


def test_count_sets_an_absolute_count_and_restarts_on_a_new_step() -> None:
    progress = StepProgress(terminal=False)
    progress.count("gptq: layers", 4, 10)
    progress.count("gptq: layers", 6, 10)
    assert (progress.description, progress.count_done, progress.total) == ("gptq: layers", 6, 10)
    progress.count("gptq: evaluation", 1, 3)
    assert (progress.description, progress.count_done, progress.total) == ("gptq: evaluation", 1, 3)


def test_the_heartbeat_stops_with_the_command(lines: list[tuple[float, str]]) -> None:
    with StepProgress(heartbeat=0.05, terminal=False) as progress:
        progress.start("step", 2)
        time.sleep(0.2)
    assert progress._thread is not None and not progress._thread.is_alive()
    count = len(lines)
    time.sleep(0.2)
    assert len(lines) == count  # nothing printed after the command's own output begins


def test_quick_work_prints_only_its_own_lines(lines: list[tuple[float, str]]) -> None:
    with StepProgress(heartbeat=5.0, terminal=False) as progress:
        progress.start("reference: ppl", 2)
        progress.advance(2)
        progress.done("reference: ppl (2 examples, 0.0 s)")
    assert [text for _, text in lines] == ["reference: ppl (2 examples, 0.0 s)"]


def test_eval_through_the_cli_with_a_slow_model_never_goes_quiet(run_cli, monkeypatch: pytest.MonkeyPatch,  # type: ignore[no-untyped-def]
                                                                  lines: list[tuple[float, str]],
                                                                  torch_threads) -> None:
    """`precisionlab eval` off a terminal (the CLI runner's stderr is no terminal) on SmolLM2's first blocks, every
    forward slowed to 0.6 s: the heartbeat (0.2 s here, 5 s in use) keeps the gaps short through the load, the
    reference pass, the quantization and the candidate's pass, where the closing lines alone left gaps of
    several forwards."""
    import precisionlab.models as models
    from tests.model_helpers import smollm2_slice

    loaded = smollm2_slice()
    monkeypatch.setattr(module, "HEARTBEAT_S", 0.2)
    monkeypatch.setattr(models, "load_model", lambda *args, **kwargs: loaded)

    def slow(*_args: object) -> None:
        time.sleep(0.6)

    handle = loaded.model.register_forward_pre_hook(slow)
    try:
        began = time.perf_counter()
        result = run_cli("eval", "--model", "smollm2-135m", "--tasks", "choice", "--schemes", "int8:row", "--size",
                         "0.03", "--no-cache", "--resamples", "200")
        ended = time.perf_counter()
    finally:
        handle.remove()
    assert result.exit_code == 0, result.output
    texts = [text for _, text in lines]
    assert any(t.startswith("reference: choice: ") and "/3, " in t for t in texts), texts
    assert any(t.startswith("int8:row: choice: ") for t in texts), texts
    assert "reference: choice (3 examples" in " ".join(texts)
    spans = gaps(lines, lines[0][0], lines[-1][0])
    assert max(spans) < 1.5, list(zip(spans, texts, strict=False))
    assert ended - began > 3 * 0.6  # the slowing took effect
    assert "findings (every number above, by key)" in result.stdout  # the terminal view points to them


@pytest.fixture
def torch_threads():  # type: ignore[no-untyped-def]
    """torch's thread count, restored after the test (the commands set it for the whole process)."""
    torch = pytest.importorskip("torch")
    before = torch.get_num_threads()
    yield torch
    torch.set_num_threads(before)


@pytest.mark.parametrize(("default", "cpus", "load", "expected"), [
    (2, 2, 0.0, 2), (2, 2, 0.49, 2), (2, 2, 0.51, 1), (2, 2, 1.4, 1), (2, 2, 9.8, 1),
    (16, 16, 4.2, 12), (8, 16, 2.0, 8), (4, 4, 40.0, 1),
])
def test_busy_threads_leaves_the_cpus_others_use(default: int, cpus: int, load: float, expected: int) -> None:
    assert module.busy_threads(default, cpus, load) == expected


def test_a_busy_machine_gets_one_thread_and_says_so(torch_threads, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    torch_threads.set_num_threads(2)
    monkeypatch.setattr(module.os, "sched_getaffinity", lambda _pid: {0, 1}, raising=False)
    monkeypatch.setattr(module.os, "getloadavg", lambda: (9.8, 9.0, 6.0), raising=False)
    line = module.set_torch_threads(None)
    assert torch_threads.get_num_threads() == 1
    assert line is not None and "load average 9.8 on 2 CPUs" in line and "not its default 2" in line
    torch_threads.set_num_threads(2)
    monkeypatch.setattr(module.os, "getloadavg", lambda: (0.2, 0.3, 0.4), raising=False)
    assert module.set_torch_threads(None) is None and torch_threads.get_num_threads() == 2  # idle: torch's own
    assert module.set_torch_threads(3) is None and torch_threads.get_num_threads() == 3  # --threads wins
    with pytest.raises(ValueError, match="--threads must be a positive integer, got 0"):
        module.set_torch_threads(0)


def test_writing_the_files_keeps_the_heartbeat(run_cli, monkeypatch: pytest.MonkeyPatch, tmp_path,  # type: ignore[no-untyped-def]
                                               lines: list[tuple[float, str]]) -> None:
    """After a model command's last step its figures and JSON are written (12 s under load in a real eval, with
    no line): off a terminal that phase has its heartbeat too, saying so; a quick command prints nothing."""
    from precisionlab.report import outputs

    real = outputs.write_lab_files

    def slow(*args, **kwargs):  # type: ignore[no-untyped-def]
        time.sleep(0.5)
        return real(*args, **kwargs)

    monkeypatch.setattr(module, "HEARTBEAT_S", 0.1)
    monkeypatch.setattr(outputs, "write_lab_files", slow)
    result = run_cli("formats", "fp16", "--out", str(tmp_path / "out"))
    assert result.exit_code == 0, result.output
    texts = [text for _, text in lines]
    writing = [t for t in texts if t.startswith("writing the results: ")]
    assert len(writing) >= 3, texts  # 0.5 s of writing at a 0.1 s heartbeat
    assert all(t.startswith(("writing the results: ", "formats: working: ")) for t in texts), texts
    lines.clear()
    monkeypatch.setattr(module, "HEARTBEAT_S", 5.0)
    assert run_cli("formats", "fp16").exit_code == 0 and lines == []  # a quick command prints only its result
