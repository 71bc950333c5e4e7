"""`precisionlab search` end to end on a tiny random llama: findings, the recipe.json that export reads, the
optimum checked by brute force on the reported numbers, and bad input refused with exit 2 before any work."""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

import pytest

from tests.export_helpers import tiny_model_dir
from tests.model_helpers import require_peers

require_peers()

FAST = ("--size", "0.2", "--resamples", "200", "--calib-size", "192")


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tiny_model_dir(tmp_path_factory.mktemp("search_cli") / "llama")


@pytest.fixture(scope="module")
def searched(model: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    from click.testing import CliRunner

    from precisionlab.cli.main import cli

    out = tmp_path_factory.mktemp("search_out") / "out"
    result = CliRunner().invoke(cli, ["search", "-m", str(model), "-f", "int4:g32,int8:row,bf16", "--budget", "6",
                                      "--frontier", "5,8", *FAST, "--threads", "1", "--json", "--out", str(out)],
                                catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return {"data": json.loads(result.stdout), "out": out}


def test_the_findings_carry_the_recipe_its_evidence_and_the_frontier(searched: dict[str, Any]) -> None:
    f = searched["data"]["findings"]
    assert f["search.budget"] == 6.0 and f["search.bits_per_weight"] <= 6.0
    assert f["search.verdict"] in ("pass", "fail", "inconclusive")
    assert f["search.ci_low"] <= f["search.difference"] <= f["search.ci_high"]
    assert f["search.model_bytes"] > 0 and f["search.measured_kl"] > 0 and f["search.predicted_kl"] > 0
    for i, budget in enumerate([5.0, 8.0]):
        base = f"search.frontier.{i}"
        assert f[f"{base}.bits_per_weight"] <= budget
        assert f[f"{base}.ci_low"] <= f[f"{base}.difference"] <= f[f"{base}.ci_high"]
        assert f[f"{base}.verdict"] in ("pass", "fail", "inconclusive")
        assert f[f"{base}.predicted_kl"] > 0 and f[f"{base}.measured_kl"] > 0
    for fmt in ("int4:g32", "int8:row", "bf16"):
        assert {"difference", "ci_low", "ci_high"} <= {k.rsplit(".", 1)[1] for k in f
                                                      if k.startswith(f"search.uniform.{fmt}.")}
    assert f["search.best_uniform"] == "int4:g32"  # 4.5 bits; int8:row stores 8.2
    assert len([k for k in f if k.startswith("search.recipe.")]) == 14


def test_the_recipe_minimises_the_reported_sensitivities(searched: dict[str, Any]) -> None:
    """Brute force over every choice of the reported units (3^10), from the findings alone."""
    f = searched["data"]["findings"]
    fmts = ["int4:g32", "int8:row", "bf16"]
    units = sorted({k[len("search.bytes."):].rsplit(".", 1)[0] for k in f if k.startswith("search.bytes.")
                    and k.endswith(".bf16")})
    assert len(units) == 10
    elements = {u: f[f"search.bytes.{u}.bf16"] // 2 for u in units}
    capacity = 6.0 * sum(elements.values()) / 8
    best = min(sum(f[f"search.sensitivity.{u}.{fmt}"] for u, fmt in zip(units, choice, strict=True))
               for choice in itertools.product(fmts, repeat=len(units))
               if sum(f[f"search.bytes.{u}.{fmt}"] for u, fmt in zip(units, choice, strict=True)) <= capacity)

    def fmt_of(unit: str) -> str:
        layer = unit.replace("qkv_proj", "q_proj")
        return str(f[f"search.recipe.{layer}"])

    chosen = sum(f[f"search.sensitivity.{u}.{fmt_of(u)}"] for u in units)
    assert chosen == pytest.approx(best, rel=1e-12)
    assert chosen == pytest.approx(f["search.predicted_kl"], rel=1e-12)


def test_recipe_json_reads_back_and_exports(searched: dict[str, Any], model: Path, run_cli: Any,
                                            tmp_path: Path) -> None:
    from precisionlab.export.results import read_result
    from precisionlab.search.recipes import load_recipe

    f = searched["data"]["findings"]
    path = searched["out"] / "recipe.json"
    recipe = read_result(path)
    assert recipe.kind == "recipe"
    expected = {k[len("search.recipe."):]: v for k, v in f.items() if k.startswith("search.recipe.")}
    assert {**recipe.layers, **recipe.metadata.get("float_layers", {})} == expected
    assert load_recipe(path) == expected
    assert (searched["out"] / "recipe_frontier_1.json").is_file()


def test_a_recipe_of_ggml_types_exports_to_gguf_unchanged(model: Path, run_cli: Any, tmp_path: Path) -> None:
    import gguf

    out = tmp_path / "s"
    result = run_cli("search", "-m", str(model), "-f", "gguf_q4_0,gguf_q8_0", "--budget", "6", "--uniform", "none",
                     "--sensitivity", "proxy", *FAST, "--json", "--out", str(out))
    assert result.exit_code == 0, result.output
    f = json.loads(result.stdout)["findings"]
    result = run_cli("export", "--model", str(model), "--from", str(out / "recipe.json"), "--to", "gguf", "--out",
                     str(tmp_path / "r.gguf"), "--tokenizer-pre", "gpt-2")
    assert result.exit_code == 0, result.output
    types = {t.name: t.tensor_type.name for t in gguf.GGUFReader(str(tmp_path / "r.gguf")).tensors}
    ggml = {"gguf_q4_0": "Q4_0", "gguf_q8_0": "Q8_0"}
    assert types["blk.1.ffn_down.weight"] == ggml[f["search.recipe.model.layers.1.mlp.down_proj"]]
    assert types["blk.0.attn_q.weight"] == ggml[f["search.recipe.model.layers.0.self_attn.q_proj"]]
    assert types["blk.0.attn_q.weight"] == types["blk.0.attn_k.weight"] == types["blk.0.attn_v.weight"]


@pytest.mark.parametrize(("args", "message"), [
    (("-f", "int4:g32,int3:g7", "--budget", "6"), "unknown format 'int3:g7'"),
    (("-f", "int4:g32,int8:row", "--budget", "2"), "below the smallest possible"),
    (("-f", "int4:g32,int8:row", "--budget", "60"), "--budget-unit MB"),
    (("-f", "int4:g32,int8:row", "--budget", "0.05", "--budget-unit", "MB"), "below the smallest possible"),
    (("-f", "int4:g32", "--budget", "6", "--frontier", "5,x"), "--frontier"),
    (("-f", "int4:g32", "--budget", "6", "--fuse", "qkvo"), "--fuse"),
    (("-f", "int4:g32", "--budget", "6", "--blocks", "7"), "block 7 does not exist"),
    (("-f", "int4:g32", "--budget", "6", "--workers", "2", "--scheduler", "tcp://127.0.0.1:1"), "not both"),
    (("-f", "int4:g32", "--budget", "0"), "--budget must be a positive number"),
])
def test_bad_input_is_one_line_and_exit_2(model: Path, run_cli: Any, args: tuple[str, ...], message: str) -> None:
    result = run_cli("search", "-m", str(model), *args, *FAST)
    assert result.exit_code == 2, result.output
    assert message in result.output
    assert "Traceback" not in result.output


def test_a_budget_in_mb_counts_the_whole_model(model: Path, run_cli: Any) -> None:
    result = run_cli("search", "-m", str(model), "-f", "int4:g32,int8:row", "--budget", "0.14", "--budget-unit",
                     "MB", "--uniform", "none", "--sensitivity", "proxy", *FAST, "--json")
    assert result.exit_code == 0, result.output
    f = json.loads(result.stdout)["findings"]
    assert f["search.model_bytes"] <= 140_000
    assert not any(k.startswith("search.uniform.") for k in f)
    assert not any(k.startswith("search.proxy.spearman") for k in f)  # no direct measure to compare with


def test_a_second_run_resumes_from_the_saved_sensitivities(model: Path, run_cli: Any, tmp_path: Path) -> None:
    args = ("search", "-m", str(model), "-f", "int4:g32,int8:row", "--budget", "6", "--uniform", "none", *FAST,
            "--json", "--out", str(tmp_path / "out"))
    first = run_cli(*args)
    assert first.exit_code == 0, first.output
    log = (tmp_path / "out" / "search-sensitivities.jsonl").read_text().splitlines()
    assert len(log) == 1 + 20 and json.loads(log[0])["kind"] == "search-sensitivities"
    second = run_cli(*args)
    assert second.exit_code == 0, second.output
    assert "resuming: 20 sensitivities measured earlier" in second.stderr
    a, b = json.loads(first.stdout)["findings"], json.loads(second.stdout)["findings"]
    assert {k: v for k, v in a.items() if not k.startswith("search.seconds")} == \
        {k: v for k, v in b.items() if not k.startswith("search.seconds")}
    other = run_cli("search", "-m", str(model), "-f", "int4:g32,bf16", "--budget", "6", *FAST, "--out",
                    str(tmp_path / "out"))
    assert other.exit_code == 2 and "holds the sensitivities of another search (its formats is " in other.output
