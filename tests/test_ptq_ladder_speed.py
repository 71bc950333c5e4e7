"""`ladder --speed`: each tried step runs on its scheme's kernel for exactly the layers the step quantized,
a step without a kernel says why, and the step table carries the decode ratio (a tiny random Llama)."""

from __future__ import annotations

import fnmatch
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("torch")

from precisionlab.labs.ladder import ladder_lab
from precisionlab.ptq.ladder import Step, run_ladder
from tests.test_ptq_ladder import Stub

KERNEL8 = "int8:row:scale=bf16"
STEPS = [Step("per-channel", KERNEL8), Step("keep-sensitive", KERNEL8, keep_sensitive=True),
         Step("outliers", KERNEL8, method="outliers"), Step("gptq", "int4:g32", method="gptq"),
         Step("int8-fp16-scales", "int8:row"), Step("int4-fp32-scales", "int4:g32:scale=fp32")]


class Selection:
    """What step_candidate reads of the ladder's evaluator: the model, each step's selection, stored results."""

    def __init__(self, loaded: Any) -> None:
        self.loaded, self.step_results = loaded, {}

    def selection(self, step: Step) -> tuple[list[str], list[str]]:
        return ([], ["lm_head", "*embed*", "model.layers.0.*"]) if step.keep_sensitive else ([], ["lm_head",
                                                                                              "*embed*"])


@pytest.fixture(scope="module")
def loaded(tmp_path_factory: pytest.TempPathFactory) -> Any:
    from tests.model_helpers import require_peers

    require_peers("transformers", "tokenizers")
    from precisionlab.models import load_model
    from tests.export_helpers import tiny_model_dir

    return load_model(str(tiny_model_dir(tmp_path_factory.mktemp("tiny") / "m", "llama")))


def _linear_names(model: Any, exclude: list[str]) -> list[str]:
    import torch

    return [name for name, module in model.named_modules() if isinstance(module, torch.nn.Linear)
            and not any(fnmatch.fnmatch(name, pattern) for pattern in exclude)]


def test_each_step_runs_the_layers_it_quantized(loaded: Any) -> None:
    from precisionlab.ptq.ladder.speed import step_candidate
    from precisionlab.quant import quantize

    evaluator = Selection(loaded)
    for step, exclude in ((STEPS[0], ["lm_head", "*embed*"]), (STEPS[1], ["lm_head", "*embed*", "model.layers.0.*"])):
        candidate = step_candidate(evaluator, step)
        expected = _linear_names(loaded.model, exclude)
        assert sorted(candidate.quantized or {}) == sorted(expected), step.name
        modules = dict(loaded.model.named_modules())
        for name in expected:
            codes = quantize(modules[name].weight.detach().float().numpy(), KERNEL8).dequantize()
            assert np.array_equal(candidate.quantized[name].dequantize(), codes)  # type: ignore[index]
    assert "fp16 outlier columns" in step_candidate(evaluator, STEPS[2]).reason
    assert "resumed from the log" in step_candidate(evaluator, STEPS[3]).reason


def test_ladder_table_gains_the_decode_ratio(loaded: Any, tmp_path: Path) -> None:
    from precisionlab.ptq.ladder.speed import ladder_speed, step_ratios

    result = run_ladder(STEPS, Stub({}), examples=8, max_drop=1.0, target="int8")
    run = ladder_speed(Selection(loaded), result, threads=1, prompt_tokens=8, new_tokens=2, repetitions=2)
    rows = {row.label: row for row in run.rows}
    assert rows["per-channel"].layers == len(_linear_names(loaded.model, ["lm_head", "*embed*"]))
    assert rows["keep-sensitive"].layers == len(_linear_names(loaded.model, ["lm_head", "*embed*", "model.layers.0.*"]))
    assert rows["per-channel"].bound_fraction <= 1.0
    assert rows["outliers"].kernel is None and rows["int4-fp32-scales"].kernel is None
    assert "int4:g32:scale=bf16" in (rows["int4-fp32-scales"].runs or "")  # the twin that runs is named
    assert rows["int8-fp16-scales"].kernel == "torch _weight_int8pack_mm"  # its row scales on the output
    assert rows["int8-fp16-scales"].op_calls == rows["int8-fp16-scales"].layers > 0
    ratios = step_ratios(run)
    paired = [a / b for a, b in zip(rows["per-channel"].decode, run.reference_decode, strict=True)]
    assert ratios["per-channel"] == pytest.approx(float(np.median(paired)))
    assert math.isnan(ratios["outliers"])
    lab = ladder_lab(result, {}, {"name": "m"}, speed=run)
    table = lab.sections[0]
    column = table.columns.index("decode ratio")
    by_name = {row[1]: row[column] for row in table.rows}
    assert by_name["per-channel"] == ratios["per-channel"] and by_name["outliers"] == "no kernel"
    assert lab.findings["ladder.speed.per-channel.decode_ratio"] == ratios["per-channel"]
    assert lab.findings["ladder.speed.outliers.kernel"] == "none"
    assert any(section.key == "speed" for section in lab.sections)
