"""run_method end to end on small models built here (a tiny random Llama, a plain nn.Module): records,
findings keys, apply_result, folding, calibration capture and the bad-input errors. No download."""

from __future__ import annotations

import copy
import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="PTQ on a model needs torch")
transformers = pytest.importorskip("transformers", reason="the tiny Llama is a transformers model")

from precisionlab.ptq import CalibrationWarning, apply_result, capture, run_method  # noqa: E402
from precisionlab.ptq.structure import ScaleGroup, fold_scales, linear_names, scale_groups  # noqa: E402
from precisionlab.quant import quantize  # noqa: E402
from tests.model_helpers import tiny_llama  # noqa: E402


@pytest.fixture(scope="module")
def tiny():  # type: ignore[no-untyped-def]
    return tiny_llama(4)


def batches(n: int = 3, length: int = 48, seed: int = 0) -> list:  # type: ignore[type-arg]
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(0, 128, (1, length), generator=g) for _ in range(n)]


def test_structure_of_a_llama(tiny) -> None:  # type: ignore[no-untyped-def]
    names = linear_names(tiny)
    assert len(names) == 14 and names[0] == "model.layers.0.self_attn.q_proj"
    assert "lm_head" not in names
    assert linear_names(tiny, [1])[0] == "model.layers.1.self_attn.q_proj"
    groups = scale_groups(tiny, names)
    # MHA here (4 kv heads of 16 = 64 = o_proj's inputs), so v_proj -> o_proj folds too
    assert [g.inspect.rsplit(".", 1)[-1] for g in groups[:4]] == ["self_attn", "o_proj", "mlp", "down_proj"]
    with pytest.raises(ValueError, match="block 5 does not exist"):
        linear_names(tiny, [5])


def test_capture_shares_inputs_and_counts_tokens(tiny) -> None:  # type: ignore[no-untyped-def]
    names = linear_names(tiny, [0])
    cap = capture(tiny, names, batches(2, 40), keep=16)
    assert cap.tokens == 80
    q, k, v = (cap.stats[f"model.layers.0.self_attn.{p}_proj"] for p in "qkv")
    assert q is k is v and q.n == 80
    assert cap.stats["model.layers.0.mlp.gate_proj"] is cap.stats["model.layers.0.mlp.up_proj"]
    assert cap.stats["model.layers.0.mlp.down_proj"].features == 128
    # the hooks are gone: a plain forward afterwards leaves the statistics alone
    with torch.no_grad():
        tiny(batches(1)[0])
    assert q.n == 80


@pytest.mark.parametrize(("method", "scheme"), [
    ("rtn", "int4:g32"), ("gptq", "int4:g32"), ("awq", "int4:g32"), ("smoothquant", "int8"),
    ("llm_int8", None), ("kivi", "int4"),
])
def test_every_method_runs_and_reports_the_stable_keys(tiny, method: str, scheme: str | None) -> None:  # type: ignore[no-untyped-def]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", CalibrationWarning)
        options = {"prefill": 16} if method == "kivi" else None
        result = run_method(tiny, method, scheme, batches(), evaluation=batches(2, seed=9), blocks=[0, 1],
                            options=options)
    f = result.findings()
    for key in ("layers_total", "layers_improved", "output_error_ratio", "seconds", "peak_mb"):
        assert f"ptq.{method}.{key}" in f
    assert f[f"ptq.{method}.layers_total"] == len(result.layers) > 0
    layer = result.layers[0]
    assert f[f"ptq.{method}.layers.{layer.name}.output_error"] == layer.output_error
    assert f[f"ptq.rtn.layers.{layer.name}.output_error"] == layer.rtn_output_error
    assert all(r.status == "ok" and r.output_error is not None and np.isfinite(r.output_error) for r in result.layers)
    if method == "rtn":
        assert all(r.output_error == r.rtn_output_error for r in result.layers)
    if method == "kivi":
        assert f["ptq.kivi.kl_mean"] >= 0 and f["ptq.kivi.cache_bytes"] < f["ptq.kivi.fp16_cache_bytes"]
        assert f["ptq.kivi.decoded_positions"] == 2 * (48 - 16 - 1)
        assert f["ptq.kivi.kl_ci_low"] <= f["ptq.kivi.kl_mean"] <= f["ptq.kivi.kl_ci_high"]


def test_apply_writes_the_stored_weights(tiny) -> None:  # type: ignore[no-untyped-def]
    model = copy.deepcopy(tiny)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", CalibrationWarning)
        result = run_method(model, "gptq", "int4:g32", batches(), blocks=[0])
    apply_result(model, result)
    modules = dict(model.named_modules())
    for name, q in result.quantized.items():
        assert np.array_equal(modules[name].weight.detach().numpy(), q.dequantize())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", CalibrationWarning)
        sq = run_method(model, "smoothquant", "int8", batches(1), blocks=[0])
    with pytest.raises(ValueError, match="activations"):
        apply_result(model, sq)


def test_awq_apply_folds_scales_and_quantizes(tiny) -> None:  # type: ignore[no-untyped-def]
    model = copy.deepcopy(tiny)
    with torch.no_grad():  # salient channels, as real activations have: AWQ then scales them
        model.model.layers[0].input_layernorm.weight[[3, 17, 40]] *= 30.0
    original = model.model.layers[0].input_layernorm.weight.detach().double().numpy().copy()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", CalibrationWarning)
        result = run_method(model, "awq", "int4:g32", batches(), blocks=[0])
    folds = {group.prev: scales for group, scales in result.folds}
    assert "model.layers.0.input_layernorm" in folds
    apply_result(model, result)
    modules = dict(model.named_modules())
    norm = modules["model.layers.0.input_layernorm"].weight.detach().double().numpy()
    scales = folds["model.layers.0.input_layernorm"]
    assert np.allclose(norm, (original / scales).astype(np.float32), rtol=1e-6)
    assert scales[[3, 17, 40]].min() > np.median(scales)
    for name, q in result.quantized.items():
        assert np.array_equal(modules[name].weight.detach().numpy(), q.dequantize())


def test_folding_alone_leaves_the_model_unchanged(tiny) -> None:  # type: ignore[no-untyped-def]
    model = copy.deepcopy(tiny)
    rng = np.random.default_rng(5)
    for group in scale_groups(model, linear_names(model)):
        fold_scales(model, group, np.exp(rng.uniform(-1.5, 1.5, 64 if "down" not in group.layers[0] else 128)))
    ids = batches(1, 64)[0]
    with torch.no_grad():
        before = tiny(ids).logits.double()
        after = model(ids).logits.double()
    assert float((after - before).abs().max() / before.abs().max()) < 1e-5


def test_a_plain_module_with_linear_layers_is_enough() -> None:
    class Block(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.up = torch.nn.Linear(32, 64)
            self.down = torch.nn.Linear(64, 32)

        def forward(self, x):  # type: ignore[no-untyped-def]
            return x + self.down(torch.relu(self.up(x)))

    class Net(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.blocks = torch.nn.ModuleList([Block(), Block()])

        def forward(self, x):  # type: ignore[no-untyped-def]
            for b in self.blocks:
                x = b(x)
            return x

    torch.manual_seed(1)
    net = Net().eval()
    data = [torch.randn(4, 50, 32) for _ in range(2)]
    result = run_method(net, "gptq", "int4:g32", data)
    assert [r.name for r in result.layers] == ["blocks.0.up", "blocks.0.down", "blocks.1.up", "blocks.1.down"]
    assert result.calibration_tokens == 400
    assert all(r.improved for r in result.layers)  # biases included in the output norm
    rtn = run_method(net, "rtn", "int4:g32", data)
    w = net.blocks[0].up.weight.detach().numpy()
    assert np.array_equal(rtn.quantized["blocks.0.up"].codes, quantize(w, "int4:g32").codes)


def test_too_few_tokens_for_a_layer_are_warned_with_the_number_needed(tiny) -> None:  # type: ignore[no-untyped-def]
    with pytest.warns(CalibrationWarning) as caught:
        run_method(tiny, "rtn", "int4:g32", [batches(1, 20)[0]], blocks=[0])
    messages = sorted(str(w.message) for w in caught)
    assert len(messages) == 4  # one per distinct input: q/k/v, o, gate/up, down
    assert any(m.startswith("model.layers.0.mlp.down_proj: 20 calibration tokens for 128 inputs") and
               "use at least 128 tokens" in m for m in messages)
    assert any(m.startswith("model.layers.0.self_attn.q_proj (and k_proj, v_proj): 20 calibration tokens")
               for m in messages)


@pytest.mark.parametrize(("method", "scheme", "options", "message"), [
    ("gptq", "int4:g32:outliers=1", None, "outliers="),
    ("gptq", "int4:g32", {"static_groups": False}, "static_groups=True"),
    ("smoothquant", "int4:g32", None, "W8A8"),
    ("llm_int8", "int4", None, "fixed recipe"),
    ("llm_int8", None, {"token_absmax": "rows"}, "token_absmax must be 'columns' or 'entries'"),
    ("llm_int8", None, {"outlier_weights": "bf16"}, "outlier_weights must be 'int8' or 'fp16'"),
    ("kivi", "int8", None, "2 or 4 bits"),
    ("kivi", "int4:g64", None, "bit width only"),
    ("llm_int8", "int8:row:range=full", None, "fixed recipe"),
    ("gptq", "gguf_q4_k", None, "super-block"),
    ("rtn", "gguf_q4_k", None, "whole blocks of 256"),  # 64 inputs: refused before any capture
    ("gptq", None, None, "needs a scheme"),
    ("qat", "int4", None, "unknown PTQ method"),
    ("gptq", "int4:g32", {"damping": 0.1}, "unknown option 'damping'"),
    ("awq", "int4:g32", {"objective": "kl"}, "objective"),
    ("smoothquant", "int8", {"alpha": 2}, "alpha"),
    ("rtn", "int9", None, "unknown element"),
])
def test_methods_and_schemes_that_do_not_apply_are_clear_errors(tiny, method: str, scheme: str | None,
                                                               options: dict | None, message: str) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ValueError, match=message):
        run_method(tiny, method, scheme, batches(1), blocks=[0], options=options)


def test_no_calibration_data_is_an_error(tiny) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ValueError, match="no calibration batches"):
        run_method(tiny, "rtn", "int4:g32", [], blocks=[0])


def test_a_failed_gptq_layer_is_reported_not_rounded(tiny, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from precisionlab.ptq import gptq as gptq_mod

    def broken(hessian, *args, **kwargs):  # type: ignore[no-untyped-def]
        raise gptq_mod.HessianNotPositiveDefinite("H + lambda I is not positive definite (test)")

    monkeypatch.setattr(gptq_mod, "inverse_hessian_factor", broken)
    result = run_method(tiny, "gptq", "int4:g32", batches(3, 64), blocks=[0])
    assert all(r.status == "failed" and r.output_error is None for r in result.layers)
    assert not result.quantized
    f = result.findings()
    assert f["ptq.gptq.layers_failed"] == 7 and f["ptq.gptq.layers_improved"] == 0


def test_scale_groups_need_matching_widths(tiny) -> None:  # type: ignore[no-untyped-def]
    names = linear_names(tiny, [0])
    assert all(isinstance(g, ScaleGroup) for g in scale_groups(tiny, names))
    only_q = [n for n in names if not n.endswith(("k_proj", "v_proj"))]
    assert not any(g.prev.endswith("input_layernorm") for g in scale_groups(tiny, only_q))
