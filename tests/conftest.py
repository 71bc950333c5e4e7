"""Shared fixtures: the CLI runner with output isolated in a temporary folder."""

from __future__ import annotations

import os

import pytest

# Triton reads TRITON_INTERPRET when it is first imported, and any test may be the first to
# import it: the CPU suite runs Triton kernels in the interpreter. On a GPU machine, run the
# gpu-marked tests with TRITON_INTERPRET=0 set in the environment.
os.environ.setdefault("TRITON_INTERPRET", "1")
from click.testing import CliRunner


@pytest.fixture(autouse=True)
def quiet_heartbeat(monkeypatch: pytest.MonkeyPatch) -> None:
    """Off a terminal (the CLI runner's stderr is none) every command prints a line at least every
    cli.progress.HEARTBEAT_S = 5 s; under the suite's load a command checked for its one-line error could print
    such a line first. The tests of the heartbeat set the interval themselves; the others get an hour."""
    from precisionlab.cli import progress

    monkeypatch.setattr(progress, "HEARTBEAT_S", 3600.0)


@pytest.fixture
def cli_runner() -> CliRunner:
    return CliRunner()


@pytest.fixture
def run_cli(cli_runner: CliRunner, tmp_path, monkeypatch):  # type: ignore[no-untyped-def]
    """Invoke `precisionlab ARGS...` inside a temporary working directory; returns the click Result."""
    from precisionlab.cli.main import cli

    monkeypatch.chdir(tmp_path)

    def invoke(*args: str):  # type: ignore[no-untyped-def]
        return cli_runner.invoke(cli, list(args), catch_exceptions=False)

    return invoke
