"""`eval --speed` from the command line on the tiny random Llama: int8:row is timed on the int8 kernel itself
(no twin), and int4 with fp16 scales gains its bf16-scale twin with the one line that says why."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from precisionlab.eval import speed

pytest.importorskip("torch")


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from tests.model_helpers import require_peers

    require_peers("transformers", "tokenizers")
    from tests.export_helpers import tiny_model_dir

    return tiny_model_dir(tmp_path_factory.mktemp("tiny") / "m", "llama")


@pytest.mark.slow  # 11 s at load 10 (two evaluations and the speed runs); the fast tests cover the parts
def test_eval_speed_times_int8_row_itself_and_explains_int4s_twin(  # type: ignore[no-untyped-def]
        run_cli, tiny: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in {"PROMPT_TOKENS": 8, "NEW_TOKENS": 2, "REPETITIONS": 2}.items():
        monkeypatch.setattr(speed, name, value)
    result = run_cli("eval", "--model", str(tiny), "--schemes", "int8:row,int4:g32", "--tasks", "ppl", "--size",
                     "0.05", "--resamples", "200", "--no-cache", "--threads", "1", "--speed", "--json")
    assert result.exit_code == 0, result.output
    line = ("int4:g32 keeps fp16 scales, which no kernel here takes; its bf16-scale twin int4:g32:scale=bf16 runs on "
            "the int4 kernel and is evaluated too, so the model timed is the model judged")
    assert line in result.stderr  # said while it runs, before the extra candidate's minutes
    f = json.loads(result.stdout)["findings"]
    assert f["eval.speed.int8:row.kernel"] == "torch _weight_int8pack_mm" and f["eval.speed.int8:row.decode_ratio"] > 0
    assert f["eval.speed.int8:row.op_calls"] == 2 * 7  # two blocks of q, k, v, o, gate, up, down: one call each
    assert "eval.ppl.int8:row:scale=bf16.verdict" not in f  # no twin for int8:row
    assert "eval.ppl.int4:g32:scale=bf16.verdict" in f and f["eval.speed.int4:g32:scale=bf16.twin_of"] == "int4:g32"
    assert f["eval.speed.int4:g32.kernel"] == "none" and line in f["eval.speed.int4:g32.note"]
    assert f["eval.speed.threads"] == 1 and f["eval.speed.cpu_capability"]
