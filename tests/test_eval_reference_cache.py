"""The reference cache cannot go stale: an entry is used only under the runtime it was computed in (library
versions, torch threads, attention, dtype, device); a change recomputes it with a line saying what changed, and
the reference and the candidates run with one recorded thread count."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from precisionlab.eval import data, runner  # noqa: E402
from precisionlab.eval.candidates import parse_candidates  # noqa: E402
from precisionlab.eval.reference import runtime_changes  # noqa: E402
from precisionlab.eval.tasks import TaskSpec  # noqa: E402

SHORT = runner.Limits(ppl_max_tokens=48, generate_new_tokens=4, probe_tokens=32)


@pytest.fixture(scope="module")
def loaded(tmp_path_factory: pytest.TempPathFactory) -> Any:
    from tests.model_helpers import require_peers

    require_peers("transformers", "tokenizers")
    from precisionlab.models import load_model
    from tests.export_helpers import tiny_model_dir

    return load_model(str(tiny_model_dir(tmp_path_factory.mktemp("tiny") / "m", "llama")))


class Lines:
    """The progress lines (each step's closing line)."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    def start(self, description: str, total: int) -> None:
        return None

    def advance(self, n: int) -> None:
        return None

    def done(self, description: str) -> None:
        self.lines.append(description)


def test_a_changed_runtime_recomputes_the_reference_and_says_why(loaded: Any, tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    import transformers

    tasks = [TaskSpec("ppl", "ppl", tuple(data.ppl_documents(data.builtin_split(), 2)), "builtin")]
    passes: list[int] = []  # torch's thread count during each reference pass
    scored: list[int] = []  # and while each candidate was scored
    real_pass, real_score = runner.reference_pass, runner.score_candidate

    def spy_pass(*args: Any) -> Any:
        passes.append(torch.get_num_threads())
        return real_pass(*args)

    def spy_score(*args: Any) -> Any:
        scored.append(torch.get_num_threads())
        return real_score(*args)

    monkeypatch.setattr(runner, "reference_pass", spy_pass)
    monkeypatch.setattr(runner, "score_candidate", spy_score)

    def run(threads: int) -> tuple[Any, list[str]]:
        progress = Lines()
        result = runner.evaluate(loaded, parse_candidates(["int8:row"]), tasks, 1.0, cache_dir=tmp_path,
                                 n_resamples=200, limits=SHORT, threads=threads, progress=progress)
        return result, [line for line in progress.lines if "recomputed" in line]

    before = torch.get_num_threads()
    first, said = run(1)
    assert passes == [1] and scored == [1] and not said and not first.tasks[0].reference_cached
    assert first.settings["torch_threads"] == 1 and torch.get_num_threads() == before  # restored afterwards
    (entry,) = (tmp_path / "eval").glob("reference-*.npz")
    with np.load(entry) as archive:
        stored = json.loads(str(archive["__runtime__"]))
    assert stored["torch"] == torch.__version__ and stored["transformers"] == transformers.__version__
    assert stored["numpy"] == np.__version__ and stored["threads"] == "1"
    assert stored["attention"] == loaded.model.config._attn_implementation and stored["device"] == "cpu"

    same, said = run(1)  # nothing changed: served from the cache
    assert passes == [1] and same.tasks[0].reference_cached and not said

    two, said = run(2)  # another thread count: recomputed, and the line says so
    assert passes == [1, 2] and scored[-1] == 2 and not two.tasks[0].reference_cached
    assert said == ["reference: ppl recomputed: threads 1 -> 2"] and two.tasks[0].recomputed == "threads 1 -> 2"
    assert two.settings["torch_threads"] == 2

    back, said = run(1)  # both entries stay: a machine whose threads follow its load alternates
    assert passes == [1, 2] and back.tasks[0].reference_cached and not said

    monkeypatch.setattr(transformers, "__version__", "99.0.0")  # an upgrade
    upgraded, said = run(1)
    assert passes == [1, 2, 1] and not upgraded.tasks[0].reference_cached
    assert said == [f"reference: ppl recomputed: transformers {stored['transformers']} -> 99.0.0"]
    assert len(list((tmp_path / "eval").glob("reference-*.npz"))) == 3


def test_runtime_changes_are_named_in_a_fixed_order() -> None:
    old = {"torch": "2.13.0", "transformers": "5.24.0", "numpy": "2.4.6", "threads": "2", "attention": "sdpa",
           "dtype": "float32", "device": "cpu"}
    new = {**old, "threads": "1", "torch": "2.14.0", "attention": "eager"}
    assert runtime_changes(old, new) == "torch 2.13.0 -> 2.14.0, threads 2 -> 1, attention sdpa -> eager"
    assert runtime_changes(old, dict(old)) == ""
