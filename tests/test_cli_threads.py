"""--threads applies to the command that was given it and to nothing after: export, ptq, ladder and qat run with
that many torch threads (through cli.progress.set_torch_threads, peers.torch_threads entered on the command's
context) and torch's own count is back when the command returns. Each command is stopped where it would load the
model, so no model is needed."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")


def _config_dir(tmp_path: Path) -> Path:
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"model_type": "llama", "hidden_size": 64,
                                                    "intermediate_size": 128}))
    return folder


COMMANDS = {
    "export": lambda tmp: ["export", "--model", str(_config_dir(tmp)), "--scheme", "int8:row", "--to",
                           "compressed-tensors", "--out", str(tmp / "out")],
    "ptq": lambda tmp: ["ptq", "--model", "stub", "--method", "rtn", "--scheme", "int8:row", "--no-eval"],
    "ladder": lambda tmp: ["ladder", "--model", "stub", "--examples", "8"],
    "qat": lambda tmp: ["qat", "--model", "stub", "--scheme", "int4:g32", "--steps", "2"],
}


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_threads_apply_for_the_command_and_are_restored_after(command: str, run_cli: Any, tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    before = torch.get_num_threads()
    wanted = 1 if before != 1 else 2
    seen: list[int] = []

    def stop(*_args: Any, **_kwargs: Any) -> Any:
        seen.append(torch.get_num_threads())
        raise ValueError("stopped where the model loads")

    monkeypatch.setattr("precisionlab.cli.ptq.load_causal_lm", stop)
    monkeypatch.setattr("precisionlab.cli.ladder.block_count", lambda spec: 30)
    result = run_cli(*COMMANDS[command](tmp_path), "--threads", str(wanted))
    assert result.exit_code == 2 and "stopped where the model loads" in result.output, result.output
    assert seen == [wanted]  # the command ran with --threads
    assert torch.get_num_threads() == before  # and left torch's own count behind it


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_threads_below_one_are_refused(command: str, run_cli: Any, tmp_path: Path) -> None:
    result = run_cli(*COMMANDS[command](tmp_path), "--threads", "0")
    assert result.exit_code == 2 and "--threads must be a positive integer, got 0" in result.output, result.output
