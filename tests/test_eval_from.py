"""`eval --from`: a saved result evaluated as `export --from` ships it. A recipe that gives every default layer
one scheme reproduces `--schemes` with that scheme exactly (two install paths, one model); a per-layer recipe
installs each layer's own grid (checked against quant.quantize); bad files are one line and exit 2."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from tests.test_eval_cli import one_line_error


def test_step_without_from(run_cli) -> None:  # type: ignore[no-untyped-def]
    one_line_error(run_cli("eval", "--model", "nope", "--step", "2"), "give --from")


def test_missing_and_foreign_files_fail_before_loading(run_cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    one_line_error(run_cli("eval", "--model", "nope", "--from", str(tmp_path / "none.json")), "no such file")
    other = tmp_path / "other.json"
    other.write_text('{"hello": 1}')
    one_line_error(run_cli("eval", "--model", "nope", "--from", str(other)), "not a result export reads")


def test_two_results_with_one_stem(run_cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    from precisionlab.export import write_recipe

    for folder in ("a", "b"):
        (tmp_path / folder).mkdir()
        write_recipe(tmp_path / folder / "recipe.json", {"model.layers.0.mlp.up_proj": "int8:row"})
    result = run_cli("eval", "--model", "nope", "--from", str(tmp_path / "a" / "recipe.json"),
                     "--from", str(tmp_path / "b" / "recipe.json"))
    one_line_error(result, "two results share the label from:recipe")


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pytest.importorskip("torch")
    from tests.model_helpers import require_peers

    require_peers("transformers", "tokenizers")
    from tests.export_helpers import tiny_model_dir

    return tiny_model_dir(tmp_path_factory.mktemp("tiny") / "m", "llama")


def _linears(folder: Path) -> list[str]:
    from precisionlab.models import load_model
    from precisionlab.models.weights import linear_layers

    return list(linear_layers(load_model(str(folder)).model, (), None))


def test_uniform_recipe_equals_the_scheme(run_cli, tiny: Path, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    from precisionlab.export import write_recipe

    recipe = write_recipe(tmp_path / "int4.json", {name: "int4:g32" for name in _linears(tiny)})
    common = ["eval", "--model", str(tiny), "--tasks", "ppl", "--size", "0.1", "--resamples", "200", "--json",
              "--no-cache"]
    by_scheme = json.loads(run_cli(*common, "--schemes", "int4:g32").stdout)["findings"]
    by_recipe = run_cli(*common, "--from", str(recipe))
    assert by_recipe.exit_code == 0, by_recipe.output
    found = json.loads(by_recipe.stdout)["findings"]
    for part in ("difference", "ci_low", "ci_high", "verdict", "kl"):
        assert found[f"eval.ppl.from:int4.{part}"] == by_scheme[f"eval.ppl.int4:g32.{part}"], part
    assert "eval.ppl.int8:row.difference" not in found  # with --from and no --schemes, only the result


def test_per_layer_recipe_installs_each_layers_grid(tiny: Path, tmp_path: Path) -> None:
    import torch

    from precisionlab.export import result_candidate, write_recipe
    from precisionlab.models import load_model
    from precisionlab.quant import quantize

    names = _linears(tiny)
    layers = {name: ("int8:row" if i % 2 else "e4m3:row") for i, name in enumerate(names)}
    candidate = result_candidate(write_recipe(tmp_path / "mixed.json", layers))
    assert candidate.label == "from:mixed"
    loaded = load_model(str(tiny))
    modules = dict(loaded.model.named_modules())
    before = {n: modules[n].weight.detach().float().numpy().copy() for n in names}
    report = candidate.prepare(loaded.model, (), None)
    for name, scheme in layers.items():
        expected = quantize(before[name], scheme).dequantize()
        assert np.array_equal(modules[name].weight.detach().float().numpy(), expected.astype(np.float32)), name
    report.restore()
    with torch.no_grad():
        for name in names:
            assert np.array_equal(modules[name].weight.float().numpy(), before[name])
