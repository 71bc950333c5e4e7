"""The search's recipe as a ladder rung: placed after the uniform rungs, evaluated as the search evaluates it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.export_helpers import tiny_model_dir
from tests.model_helpers import require_peers


def _recipe(tmp_path: Path) -> Path:
    from precisionlab.search.recipes import save_recipe

    layers = {f"model.layers.1.self_attn.{p}_proj": "int8:row" for p in "qkv"}
    layers["model.layers.1.mlp.down_proj"] = "bf16"
    return save_recipe(tmp_path / "recipe.json", layers, model="tiny")


def test_the_recipe_rung_follows_the_uniform_rungs(run_cli: Any, tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[Any] = []

    def fake(*args: Any, **kwargs: Any) -> Any:
        seen.append((args, kwargs))
        raise KeyboardInterrupt

    monkeypatch.setattr("precisionlab.cli.ladder._climb", fake)
    monkeypatch.setattr("precisionlab.cli.ladder.block_count", lambda spec: 30)
    result = run_cli("ladder", "--model", "stub", "--recipe", str(_recipe(tmp_path)))
    assert result.exit_code == 130
    (args, kwargs), = seen
    names = [s.name for s in args[1]]
    assert names[:5] == ["per-tensor", "per-channel", "g128", "g64", "recipe"]
    assert args[1][4].scheme.startswith("mixed:") and "bf16 1, int8:row 3" in args[1][4].description
    assert kwargs["recipe"]["model.layers.1.mlp.down_proj"] == "bf16"


def test_a_file_that_is_not_a_recipe_is_refused_before_loading(run_cli: Any, tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text('{"lab": "eval", "findings": {}}')
    result = run_cli("ladder", "--model", "stub", "--recipe", str(bad))
    assert result.exit_code == 2 and "a saved eval result, not a recipe.json" in result.output


def test_the_recipe_rung_evaluates_the_recipes_bytes(tmp_path: Path) -> None:
    require_peers()
    import torch

    from precisionlab.eval.overlap import BUILTIN, calibration_data
    from precisionlab.models import load_model
    from precisionlab.models.weights import quantize_weights
    from precisionlab.ptq.calibration import token_batches
    from precisionlab.search.costs import format_bytes
    from precisionlab.search.ladder_step import RecipeStepEvaluator, recipe_step

    torch.set_num_threads(1)
    loaded = load_model(str(tiny_model_dir(tmp_path / "llama")))
    step, recipe = recipe_step(_recipe(tmp_path))
    batches = token_batches(loaded.tokenizer, calibration_data(BUILTIN), 128, 128)
    evaluator = RecipeStepEvaluator(loaded, ["ppl"], 1.0, batches, recipe=recipe, n_resamples=200)
    outcome = evaluator(step, 4)
    modules = dict(loaded.model.named_modules())
    quantized = sum(format_bytes(f, tuple(modules[n].weight.shape)) for n, f in recipe.items())
    before = sum(4 * modules[n].weight.numel() for n in recipe)
    assert outcome.bytes == loaded.nbytes - before + quantized
    elements = sum(modules[n].weight.numel() for n in recipe)
    assert outcome.bits_per_weight == pytest.approx(8 * quantized / elements, rel=1e-12)
    assert outcome.verdict in ("pass", "fail", "inconclusive") and outcome.ci_low <= outcome.ci_high
    # the plain rungs are the ladder's own: int8:row on the same q/k/v layers counts what models.weights counts
    report = quantize_weights(loaded.model, "int8:row", [f"model.layers.1.self_attn.{p}_proj" for p in "qkv"])
    report.restore()
    assert sum(r.nbytes for r in report.quantized) == sum(format_bytes("int8:row", tuple(modules[n].weight.shape))
                                                          for n in recipe if "self_attn" in n)
