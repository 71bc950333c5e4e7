"""Exit codes of the command line: bad input is one line and exit 2; an internal error (a bug) says
so, names the exception, hints at --debug / PRECISIONLAB_DEBUG=1, and exits 1."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from precisionlab.cli.main import DEBUG_ENV
from precisionlab.training.census import from_values


def _break_axpy(monkeypatch: pytest.MonkeyPatch, exc: BaseException) -> None:
    from precisionlab.labs import axpy

    def broken(**_kwargs: object) -> None:
        raise exc

    monkeypatch.setattr(axpy, "run", broken)


@pytest.mark.parametrize("exc", [TypeError("unsupported operand type(s)"), KeyError("fp16"),
                                 AttributeError("'NoneType' object has no attribute 'shape'"),
                                 IndexError("list index out of range"), ZeroDivisionError("division by zero")])
def test_an_internal_error_is_reported_as_a_bug_with_exit_1(run_cli, monkeypatch, exc) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.delenv(DEBUG_ENV, raising=False)
    _break_axpy(monkeypatch, exc)
    result = run_cli("axpy", "--n", "16")
    assert result.exit_code == 1, result.output
    text = result.stderr
    assert text.startswith(f"internal error: {type(exc).__name__}: "), text
    assert str(exc) in text
    assert "bug" in text and "--debug" in text and DEBUG_ENV in text
    assert "Traceback" not in text
    assert len(text.strip().splitlines()) == 2


def test_debug_flag_prints_the_traceback(run_cli, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.delenv(DEBUG_ENV, raising=False)
    _break_axpy(monkeypatch, TypeError("boom"))
    result = run_cli("--debug", "axpy", "--n", "16")
    assert result.exit_code == 1
    assert "Traceback (most recent call last)" in result.stderr and "TypeError: boom" in result.stderr
    assert "internal error: TypeError: boom" in result.stderr


@pytest.mark.parametrize("value", ["1", "true"])
def test_debug_environment_variable_prints_the_traceback(run_cli, monkeypatch, value: str) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv(DEBUG_ENV, value)
    _break_axpy(monkeypatch, KeyError("fp16"))
    result = run_cli("axpy", "--n", "16")
    assert result.exit_code == 1
    assert "Traceback (most recent call last)" in result.stderr and "KeyError" in result.stderr


def test_debug_shows_the_traceback_of_bad_input_too_and_keeps_exit_2(run_cli, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.delenv(DEBUG_ENV, raising=False)
    plain = run_cli("axpy", "--backend", "cpu", "--time-budget", "nan")
    assert plain.exit_code == 2 and plain.stderr.startswith("error: ") and "Traceback" not in plain.stderr
    debug = run_cli("--debug", "axpy", "--time-budget", "nan")
    assert debug.exit_code == 2 and "Traceback" in debug.stderr
    assert debug.stderr.strip().splitlines()[-1].startswith("error: time_budget")


@pytest.mark.parametrize("exc", [ValueError("n must be positive"), FileNotFoundError(2, "No such file", "x.npy")])
def test_validation_errors_stay_one_line_with_exit_2(run_cli, monkeypatch, exc) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.delenv(DEBUG_ENV, raising=False)
    _break_axpy(monkeypatch, exc)
    result = run_cli("axpy", "--n", "16")
    assert result.exit_code == 2
    assert result.stderr.startswith("error: ") and len(result.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("array", [np.arange(10), np.ones(3, dtype=bool), np.ones(3, dtype=complex)])
def test_a_gradient_file_of_the_wrong_dtype_is_bad_input(run_cli, tmp_path: Path, array: np.ndarray) -> None:  # type: ignore[no-untyped-def]
    # census raised a plain TypeError here, which only the old catch-all turned into exit 2
    path = tmp_path / "grads.npy"
    np.save(path, array)
    result = run_cli("lossscale", "census", str(path))
    assert result.exit_code == 2, result.output
    assert result.stderr.startswith("error: ") and "floating point" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_the_python_api_still_raises_type_error_for_integer_gradients() -> None:
    with pytest.raises(TypeError, match="floating point"):
        from_values(np.arange(4))


def test_the_installed_entry_point_exits_1_on_an_internal_error(tmp_path: Path) -> None:
    import os
    import subprocess
    import sys

    src = Path(__file__).resolve().parents[1] / "src"
    code = ("import sys; import precisionlab.labs.axpy as a\n"
            "def broken(**k): raise TypeError('boom')\n"
            "a.run = broken\n"
            "from precisionlab.cli.main import main\n"
            "sys.argv = ['precisionlab', 'axpy', '--n', '16']\n"
            "main()\n")
    env = {**os.environ, "PYTHONPATH": str(src)}
    env.pop(DEBUG_ENV, None)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=tmp_path,
                          timeout=120)
    assert done.returncode == 1, done.stderr
    assert done.stderr.startswith("internal error: TypeError: boom")


def test_an_escaped_missing_module_is_a_bug_that_names_the_install(run_cli, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.delenv(DEBUG_ENV, raising=False)
    _break_axpy(monkeypatch, ModuleNotFoundError("No module named 'ml_dtypes'", name="ml_dtypes"))
    result = run_cli("axpy", "--n", "16")
    assert result.exit_code == 1
    assert result.stderr.startswith("internal error: ModuleNotFoundError: No module named 'ml_dtypes'")
    assert "pip install ml_dtypes" in result.stderr and "bug" in result.stderr
