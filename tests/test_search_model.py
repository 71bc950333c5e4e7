"""The search's model parts on a tiny random llama: the block-by-block path against the full forward, the bytes
against models.weights, the proxy's additivity, and the sensitivity pass on two processes against one."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.export_helpers import tiny_model_dir
from tests.model_helpers import require_peers

require_peers()

FORMATS = ["int4:g32", "int8:row", "bf16"]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    import torch

    from precisionlab.eval.overlap import BUILTIN, calibration_data
    from precisionlab.models import load_model
    from precisionlab.ptq.calibration import token_batches
    from precisionlab.search.sensitivity import SensitivityContext

    torch.set_num_threads(1)
    path = tiny_model_dir(tmp_path_factory.mktemp("search") / "llama")
    loaded = load_model(str(path))
    batches = token_batches(loaded.tokenizer, calibration_data(BUILTIN), 192, 96)
    return {"path": path, "loaded": loaded, "batches": batches, "context": SensitivityContext(loaded.model, batches)}


def test_units_group_qkv_and_keep_a_tied_weight_once(tiny: dict[str, Any]) -> None:
    from precisionlab.search.units import search_units

    model = tiny["loaded"].model
    fused = search_units(model)
    assert fused[0].name == "model.layers.0.self_attn.qkv_proj"
    assert fused[0].layers == tuple(f"model.layers.0.self_attn.{p}_proj" for p in "qkv")
    assert len(fused) == 10 and all(u.block in (0, 1) for u in fused)
    every = search_units(model, fuse=(), embeddings=True)
    names = [u.name for u in every]
    assert "model.embed_tokens" in names and "lm_head" not in names  # tied: one tensor, one unit
    assert all(u.name.startswith("model.layers.1.") for u in search_units(model, blocks=[1]))
    with pytest.raises(ValueError, match="block 5 does not exist"):
        search_units(model, blocks=[5])


def test_the_block_path_gives_the_full_forwards_kl(tiny: dict[str, Any]) -> None:
    from precisionlab.search.units import search_units

    context = tiny["context"]
    assert context.fast
    for unit in search_units(tiny["loaded"].model)[::3]:
        for fmt in ("int4:g32", "int8:row"):
            fast = context.direct(unit.layers, fmt)
            full = context.kl_of(dict.fromkeys(unit.layers, fmt))  # the whole model runs
            assert fast > 0 and fast == pytest.approx(full, rel=1e-5)
    assert context.kl_of({}) == 0.0  # nothing changed: no divergence


def test_the_weights_are_restored_after_a_measure(tiny: dict[str, Any]) -> None:
    model = tiny["loaded"].model
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    tiny["context"].direct(("model.layers.1.mlp.down_proj",), "int4:g32")
    assert all(bool((p.detach() == before[n]).all()) for n, p in model.named_parameters())


def test_recipe_bytes_are_what_models_weights_counts(tiny: dict[str, Any]) -> None:
    from precisionlab.models.weights import quantize_weights
    from precisionlab.search.recipes import recipe_prepare
    from precisionlab.search.units import search_units, unit_costs

    model = tiny["loaded"].model
    units = search_units(model)
    for fmt in ["int4:g32", "int8:row", "nvfp4"]:
        report = recipe_prepare({layer: fmt for u in units for layer in u.layers}, "uniform")(model)
        try:
            mine = report.model_bytes
        finally:
            report.restore()
        expected = quantize_weights(model, fmt)  # the evaluation's plain candidate, an independent count
        expected.restore()
        assert mine == expected.model_bytes
        costs = unit_costs(units, [fmt])
        assert sum(row[0] for row in costs) == sum(r.nbytes for r in expected.quantized), fmt


def test_bf16_is_rounded_to_nearest_even_once(tiny: dict[str, Any]) -> None:
    import precisionlab as pl
    from precisionlab.search.costs import layer_values

    w = np.random.default_rng(3).standard_normal((64, 48)).astype(np.float32) * 3
    values, nbytes = layer_values(w, "bf16")
    assert nbytes == 2 * w.size
    assert np.array_equal(values, np.asarray(pl.round_to(w.astype(np.float64), pl.get_format("bf16")),
                                             dtype=np.float32))


def test_the_proxy_adds_over_a_group_and_ranks_like_the_direct_measure(tiny: dict[str, Any]) -> None:
    from precisionlab.search.sensitivity import spearman
    from precisionlab.search.units import search_units

    model, context = tiny["loaded"].model, tiny["context"]
    fused, single = search_units(model), search_units(model, fuse=())
    grouped, apart = context.proxy(fused, FORMATS), context.proxy(single, FORMATS)
    qkv = "model.layers.0.self_attn."
    for fmt in FORMATS:
        parts = sum(apart[(f"{qkv}{p}_proj", fmt)] for p in "qkv")
        assert grouped[(f"{qkv}qkv_proj", fmt)] == pytest.approx(parts, rel=1e-9)
    keys = [(u.name, "int4:g32") for u in fused] + [(u.name, "int8:row") for u in fused]
    direct = [context.direct(next(u for u in fused if u.name == k[0]).layers, k[1]) for k in keys]
    assert spearman(direct, [grouped[k] for k in keys]) > 0.5



def test_forked_workers_give_the_single_process_sensitivities_bit_for_bit(tiny: dict[str, Any],
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """The default-suite sibling of the spawn test below: the same pool (interop.distribute) with forked workers,
    which start with the parent's imports instead of a fresh interpreter (seconds instead of a minute); each still
    rebuilds its context from the spec (the model loaded from its path, the calibration ids) in its own process."""
    import torch

    from precisionlab.interop import distribute
    from precisionlab.search import workers
    from precisionlab.search.units import search_units, unit_costs
    from precisionlab.search.workers import direct_sensitivities, worker_spec

    units = search_units(tiny["loaded"].model)[:2]
    formats = FORMATS[:2]
    costs = unit_costs(units, formats)
    spec = worker_spec(str(tiny["path"]), "float32", tiny["batches"], torch.get_num_threads())
    one = direct_sensitivities(tiny["context"], spec, units, formats, costs)
    workers.release()  # the parent holds no context: the workers build their own
    monkeypatch.setattr(distribute, "START_METHOD", "fork")
    recorded: list[tuple[str, str]] = []
    two = direct_sensitivities(tiny["context"], spec, units, formats, costs, workers=2,
                               record=lambda unit, fmt, *_: recorded.append((unit, fmt)))
    assert not workers._CONTEXTS  # no task ran in this process: it would have built its context here
    assert sorted(recorded) == sorted(one) and len(one) == 4
    assert {k: v[0] for k, v in two.items()} == {k: v[0] for k, v in one.items()}  # bit for bit


def test_a_dask_cluster_in_this_process_gives_the_single_process_sensitivities(tiny: dict[str, Any]) -> None:
    """The default-suite sibling of the Dask test below: a LocalCluster of in-process workers (threads, no
    interpreter to start), always closed; the tasks go through the scheduler and the client as on a real cluster,
    and each worker builds its context from the spec."""
    pytest.importorskip("distributed")
    import torch
    from distributed import Client, LocalCluster

    from precisionlab.search import workers
    from precisionlab.search.units import search_units, unit_costs
    from precisionlab.search.workers import direct_sensitivities, worker_spec

    units = search_units(tiny["loaded"].model)[:2]
    formats = FORMATS[:2]
    costs = unit_costs(units, formats)
    spec = worker_spec(str(tiny["path"]), "float32", tiny["batches"], torch.get_num_threads())
    one = direct_sensitivities(tiny["context"], spec, units, formats, costs)
    with LocalCluster(n_workers=1, threads_per_worker=1, processes=False, dashboard_address=None) as cluster, \
            Client(cluster) as client:
        two = direct_sensitivities(tiny["context"], spec, units, formats, costs, client=client)
        assert not workers._CONTEXTS  # the workers let go of their context at the end (release)
    assert {k: v[0] for k, v in two.items()} == {k: v[0] for k, v in one.items()}

@pytest.mark.slow
def test_two_processes_give_the_single_process_sensitivities(tiny: dict[str, Any]) -> None:
    import torch

    from precisionlab.search.units import search_units, unit_costs
    from precisionlab.search.workers import direct_sensitivities, worker_spec

    units = search_units(tiny["loaded"].model)[:4]
    costs = unit_costs(units, FORMATS)
    spec = worker_spec(str(tiny["path"]), "float32", tiny["batches"], torch.get_num_threads())
    one = direct_sensitivities(tiny["context"], spec, units, FORMATS, costs)
    two = direct_sensitivities(tiny["context"], spec, units, FORMATS, costs, workers=2)
    assert {k: v[0] for k, v in two.items()} == {k: v[0] for k, v in one.items()}  # bit for bit


@pytest.mark.slow
def test_a_dask_cluster_gives_the_single_process_sensitivities(tiny: dict[str, Any], tmp_path: Path) -> None:
    pytest.importorskip("distributed")
    import torch
    from distributed import Client, LocalCluster

    from precisionlab.search.units import search_units, unit_costs
    from precisionlab.search.workers import direct_sensitivities, worker_spec

    units = search_units(tiny["loaded"].model)[:3]
    costs = unit_costs(units, FORMATS)
    spec = worker_spec(str(tiny["path"]), "float32", tiny["batches"], torch.get_num_threads())
    one = direct_sensitivities(tiny["context"], spec, units, FORMATS, costs)
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cluster, \
            Client(cluster) as client:
        two = direct_sensitivities(tiny["context"], spec, units, FORMATS, costs, client=client)
    assert {k: v[0] for k, v in two.items()} == {k: v[0] for k, v in one.items()}


def test_the_proxy_is_its_formula_computed_by_plain_autograd(tiny: dict[str, Any]) -> None:
    """1/2 sum g^2 (x dW^T)^2 with g = dLoss/dy from retain_grad on the layer's output (no tensor hooks)."""
    import torch

    from precisionlab.search.costs import layer_values
    from precisionlab.search.units import search_units

    model, context = tiny["loaded"].model, tiny["context"]
    name = "model.layers.1.mlp.up_proj"
    units = [u for u in search_units(model, fuse=()) if u.name == name]
    got = context.proxy(units, ["int4:g32"])[(name, "int4:g32")]
    module = dict(model.named_modules())[name]
    w = module.weight.detach().float()
    delta = torch.from_numpy(layer_values(w.numpy(), "int4:g32")[0]) - w
    expected = 0.0
    seen: dict[str, Any] = {}

    def keep(_m: Any, args: tuple[Any, ...], out: Any) -> None:
        out.retain_grad()
        seen["x"], seen["y"] = args[0].detach(), out

    embed = model.get_input_embeddings()
    h1 = embed.register_forward_hook(lambda _m, _a, out: out.detach().requires_grad_(True))
    h2 = module.register_forward_hook(keep)
    try:
        with torch.enable_grad():
            for batch in tiny["batches"]:
                logits = model(input_ids=batch, use_cache=False).logits[0].float()
                torch.nn.functional.cross_entropy(logits[:-1], batch[0, 1:], reduction="sum").backward()
                g = seen["y"].grad.reshape(-1, w.shape[0]).double()
                dy = (seen["x"].reshape(-1, w.shape[1]).double() @ delta.double().t())
                expected += 0.5 * float((g * g * dy * dy).sum())
    finally:
        h1.remove()
        h2.remove()
    assert got == pytest.approx(expected, rel=1e-5)
