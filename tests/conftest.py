"""Shared fixtures: the CLI runner with output isolated in a temporary folder."""

from __future__ import annotations

import pytest
from click.testing import CliRunner


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
