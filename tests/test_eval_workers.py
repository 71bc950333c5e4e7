"""`eval --workers N` / `--scheduler ADDR`: the candidates scored on a process pool or a Dask cluster give the
single-process run bit for bit (every finding, every per-example and per-layer record), a saved result (--from)
included; bad input is one line before the model loads."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from click.testing import CliRunner

from tests.test_eval_cli import one_line_error

pytest.importorskip("torch")

COMMON = ("eval", "--schemes", "int4:g32", "--tasks", "ppl,choice", "--size", "0.1", "--resamples", "200",
          "--threads", "1", "--json")


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The tiny model, a per-layer recipe for it (a prepared candidate) and the single-process run of both."""
    from tests.model_helpers import require_peers

    require_peers("transformers", "tokenizers")
    from precisionlab.export import write_recipe
    from tests.export_helpers import tiny_model_dir

    root = tmp_path_factory.mktemp("eval-workers")
    model = tiny_model_dir(root / "m", "llama")
    layers = {f"model.layers.{i}.mlp.{name}": scheme for i in (0, 1)
              for name, scheme in (("up_proj", "int8:row"), ("down_proj", "e4m3:row"), ("gate_proj", "int4:g32"))}
    recipe = write_recipe(root / "mixed.json", layers)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("PRECISIONLAB_CACHE", str(root / "cache"))
        serial = _eval(CliRunner(), model, recipe, root / "serial")
    return {"model": model, "recipe": recipe, "serial": serial, "cache": root / "cache"}


def _eval(runner: Any, model: Path, recipe: Path, out: Path, *extra: str) -> dict[str, Any]:
    from precisionlab.cli.main import cli

    result = runner.invoke(cli, [*COMMON, "--model", str(model), "--from", str(recipe), "--out", str(out), *extra],
                           catch_exceptions=False)
    assert result.exit_code == 0, result.output
    files = {path.name: path.read_bytes() for path in sorted(out.glob("*.jsonl"))}
    assert sorted(files) == ["eval_choice_examples.jsonl", "eval_layers.jsonl", "eval_ppl_examples.jsonl"]
    return {"result": json.loads(result.stdout), "files": files, "stderr": result.stderr}


def _same_as_serial(tiny: dict[str, Any], other: dict[str, Any]) -> None:
    serial = tiny["serial"]
    findings, found = serial["result"]["findings"], dict(other["result"]["findings"])
    for task in ("ppl", "choice"):  # whether this run read the reference from its cache: not a score
        key = f"eval.{task}.reference.cached"
        assert findings[key] is False and found.pop(key) is other["cached"]
    assert found == {k: v for k, v in findings.items() if not k.endswith(".reference.cached")}  # exactly
    assert other["files"] == serial["files"]  # per-example scores and per-layer records, byte for byte
    assert {"eval.ppl.int4:g32.kl", "eval.ppl.from:mixed.kl", "eval.choice.from:mixed.acc"} <= set(findings)
    assert findings["eval.ppl.from:mixed.kl"] > 0  # the recipe was installed on the workers
    for label in ("int4:g32", "from:mixed"):  # one line per finished candidate and task
        for task in ("ppl", "choice"):
            assert f"{label}: {task} (" in other["stderr"]


def test_two_worker_processes_equal_one(tiny: dict[str, Any], tmp_path: Path,
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PRECISIONLAB_CACHE", str(tiny["cache"]))
    pooled = _eval(CliRunner(), tiny["model"], tiny["recipe"], tmp_path / "out", "--workers", "2")
    pooled["cached"] = True
    _same_as_serial(tiny, pooled)
    assert "scored 2 candidates on 2 worker processes (" in pooled["stderr"]
    assert "examples, from the cache)" in pooled["stderr"]  # the parent read its reference; the workers got it
    params = pooled["result"]["params"]
    assert params["workers"] == 2 and params["torch_threads"] == 1


def test_a_dask_cluster_equals_one_process(tiny: dict[str, Any], tmp_path: Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    distributed = pytest.importorskip("distributed", reason="needs dask[distributed]")
    from precisionlab.eval import workers

    monkeypatch.setenv("PRECISIONLAB_CACHE", str(tiny["cache"]))
    with (distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=False, dashboard_address=None)
          as cluster, distributed.Client(cluster) as client, distributed.get_task_stream(client) as stream):
        on_dask = _eval(CliRunner(), tiny["model"], tiny["recipe"], tmp_path / "out", "--scheduler",
                        cluster.scheduler_address, "--no-cache")
        on_dask["cached"] = False
    _same_as_serial(tiny, on_dask)
    assert f"scored 2 candidates on the Dask cluster at {cluster.scheduler_address} (" in on_dask["stderr"]
    assert "reference: ppl (" in on_dask["stderr"] and "from the cache" not in on_dask["stderr"]
    assert len([t for t in stream.data if str(t["key"]).startswith("_with_scattered")]) == 2  # one per candidate
    assert not workers._LOADED  # the workers let go of their models


def test_bad_worker_options_are_one_line_before_the_model_loads(run_cli: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    one_line_error(run_cli("eval", "--model", "nope", "--workers", "0"), "--workers: must be a positive integer")
    one_line_error(run_cli("eval", "--model", "nope", "--workers", "2", "--scheduler", "tcp://127.0.0.1:9"),
                   "give --workers or --scheduler, not both")
    monkeypatch.setitem(sys.modules, "distributed", None)  # dask missing
    one_line_error(run_cli("eval", "--model", "nope", "--scheduler", "tcp://127.0.0.1:9"),
                   "--scheduler needs Dask's distributed scheduler: pip install 'dask[distributed]'")


def test_an_unreachable_scheduler_is_one_line_before_the_model_loads(run_cli: Any,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("distributed", reason="needs dask[distributed]")
    from precisionlab.interop import distribute

    monkeypatch.setattr(distribute, "CONNECT_TIMEOUT_S", 1)
    result = run_cli("eval", "--model", "nope", "--scheduler", "tcp://127.0.0.1:9")  # "nope" would fail next
    one_line_error(result, "cannot reach the Dask scheduler at tcp://127.0.0.1:9")


def test_a_prepared_candidate_without_rebuild_is_refused_before_any_work() -> None:
    from precisionlab.eval import runner
    from precisionlab.eval.candidates import Candidate

    prepared = Candidate("int4", name="mine", prepare=lambda model, include, exclude: None)
    with pytest.raises(ValueError, match="candidate mine was prepared in Python and has no `rebuild`"):
        runner.evaluate(SimpleNamespace(kind="causal-lm"), [prepared], [], 1.0, workers=2)
    with pytest.raises(ValueError, match="workers must be a positive integer"):
        runner.evaluate(SimpleNamespace(kind="causal-lm"), [prepared], [], 1.0, workers=0)
