"""ptq.install keeps the originals of exactly the weights it replaces (models.weights.replace_weights), and the
folds it installs are the fold rule's values computed by hand.

Expected values: the names and bytes of the layers a recipe names (arithmetic over their shapes), the test's own
clones of the weights (torch.equal), the storage pointers of untouched parameters, and the folded weights
computed here in float64 numpy (w / s, w * s per column).
"""

from __future__ import annotations

import numpy as np
import pytest

from tests.model_helpers import require_peers, tiny_llama

require_peers()
torch = pytest.importorskip("torch")

from precisionlab.ptq.install import install, install_result  # noqa: E402
from precisionlab.ptq.run import PTQResult  # noqa: E402
from precisionlab.ptq.structure import fold_values, scale_groups  # noqa: E402
from precisionlab.quant import quantize  # noqa: E402
from precisionlab.search.recipes import recipe_prepare  # noqa: E402

DOWN = "model.layers.0.mlp.down_proj"


def test_a_one_layer_recipe_snapshots_only_that_layer(monkeypatch: pytest.MonkeyPatch) -> None:
    """The old install cloned every parameter before the change (a copy of the whole model); now nothing is
    cloned and only the recipe's layer is held, its 64 x 128 fp32 weight (32768 bytes)."""
    model = tiny_llama(2)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    pointers = {n: p.data_ptr() for n, p in model.named_parameters()}
    clones: list[int] = []
    real_clone = torch.Tensor.clone

    def counting_clone(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        clones.append(self.numel() * self.element_size())
        return real_clone(self, *args, **kwargs)

    monkeypatch.setattr(torch.Tensor, "clone", counting_clone)
    report = recipe_prepare({DOWN: "int8:row"}, "one layer")(model, (), None)
    monkeypatch.setattr(torch.Tensor, "clone", real_clone)
    assert sum(clones) == 0, f"{len(clones)} tensors cloned ({sum(clones)} bytes)"
    snapshot = report.undo.weights
    assert snapshot.names == [f"{DOWN}.weight"]
    assert snapshot.held_bytes + snapshot.spilled_bytes == 64 * 128 * 4
    assert [r.name for r in report.layers] == [DOWN] and report.layers[0].rel_err > 0
    for name, p in model.named_parameters():
        if name != f"{DOWN}.weight":
            assert p.data_ptr() == pointers[name], name
    report.restore()
    for name, p in model.named_parameters():
        assert torch.equal(p, before[name]) and p.data_ptr() == pointers[name], name


def test_install_takes_values_not_a_function_that_writes_them() -> None:
    model = tiny_llama(2)
    with pytest.raises(TypeError, match="not a function that writes them in place"):
        install(model, lambda m: None, {}, "nothing")  # type: ignore[arg-type, return-value]


def test_an_unknown_stored_layer_puts_every_weight_back() -> None:
    model = tiny_llama(2)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    with pytest.raises(ValueError, match=r"no layer named 'model\.nope'"):
        install(model, {DOWN: torch.zeros(64, 128)}, {"model.nope": 1}, "bad")
    for name, p in model.named_parameters():
        assert torch.equal(p, before[name]), name


def test_a_folded_result_installs_the_folds_by_hand_and_snapshots_only_what_they_touch() -> None:
    model = tiny_llama(2)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    names = [f"model.layers.0.mlp.{n}" for n in ("gate_proj", "up_proj")]
    (group,) = [g for g in scale_groups(model, names) if g.layers == tuple(names) or list(g.layers) == names]
    s = np.exp(np.random.default_rng(1).uniform(-1.0, 1.0, 64))
    q = quantize((before[f"{names[0]}.weight"].double().numpy() * s[None, :]).astype(np.float32), "int8:row")
    result = PTQResult("awq", "int8:row", [], quantized={names[0]: q}, folds=[(group, s)])
    report = install_result(model, result)
    params = dict(model.named_parameters())
    norm = f"{group.prev}.weight"
    assert sorted(report.undo.weights.names) == sorted([norm, f"{names[0]}.weight", f"{names[1]}.weight"])
    by_hand_norm = (before[norm].double().numpy() / s).astype(np.float32)
    by_hand_up = (before[f"{names[1]}.weight"].double().numpy() * s[None, :]).astype(np.float32)
    np.testing.assert_array_equal(params[norm].detach().numpy(), by_hand_norm)
    np.testing.assert_array_equal(params[f"{names[1]}.weight"].detach().numpy(), by_hand_up)
    np.testing.assert_array_equal(params[f"{names[0]}.weight"].detach().numpy(), q.dequantize())
    folded = fold_values(model, [(group, s)], skip=[id(params[f"{names[0]}.weight"])])
    assert set(folded) == {norm, f"{names[1]}.weight"}
    report.restore()
    for name, p in model.named_parameters():
        assert torch.equal(p, before[name]), name


@pytest.mark.parametrize("recipe_kind", ["layers", "scheme"])
def test_an_evaluated_recipe_keeps_no_codes_and_installs_the_same_values(recipe_kind: str) -> None:
    """export's prepare for an eval candidate (keep_codes=False) makes each layer's codes when it installs it and
    drops them: nothing held beside the snapshot; the values are those export installs (keep_codes=True)."""
    from types import SimpleNamespace

    from precisionlab.export.plan import prepare
    from precisionlab.export.results import Recipe

    if recipe_kind == "layers":
        layers = {DOWN: "int4:g32", "model.layers.1.self_attn.q_proj": "int8:row"}
        recipe = Recipe("recipe", "two schemes", layers=layers)
    else:
        recipe = Recipe("scheme", "int8:row", scheme="int8:row", include=("model.layers.0.*",))
    model = tiny_llama(2)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    kept = prepare(SimpleNamespace(model=model), recipe)
    exported = {n: p.detach().clone() for n, p in model.named_parameters()}
    kept.restore()
    dropped = prepare(SimpleNamespace(model=model), recipe, keep_codes=False)
    assert dropped.quantized == {} and len(kept.quantized) == len(dropped.report.layers) > 0
    assert [r.nbytes for r in dropped.report.layers] == [q.nbytes for q in kept.quantized.values()]
    for name, p in model.named_parameters():
        assert torch.equal(p, exported[name]), name
    dropped.restore()
    for name, p in model.named_parameters():
        assert torch.equal(p, before[name]), name
