"""Task-level evaluation candidates of the methods that change the forward computation (smoothquant, llm_int8,
kivi): each installs on a tiny Llama and restores it bit for bit, and each computes what an independent path
computes (the eval runner's W8A8 hooks for plain int8 / unsmoothed SmoothQuant, token-by-token decoding over
the KIVI cache for KIVI's attention)."""

from __future__ import annotations

import dataclasses
import warnings
from typing import Any

import pytest

torch = pytest.importorskip("torch", reason="PTQ on a model needs torch")
transformers = pytest.importorskip("transformers", reason="the tiny Llama is a transformers model")

from tests.model_helpers import tiny_llama  # noqa: E402


@pytest.fixture(scope="module")
def tiny():  # type: ignore[no-untyped-def]
    return tiny_llama(2)


def _batches(n: int = 3, length: int = 48) -> list[Any]:
    g = torch.Generator().manual_seed(0)
    return [torch.randint(0, 128, (1, length), generator=g) for _ in range(n)]


IDS = torch.randint(0, 128, (2, 80), generator=torch.Generator().manual_seed(5))


def _run(model: Any, method: str, scheme: str | None, blocks: tuple[int, ...] = (0,), **options: Any) -> Any:
    from precisionlab.ptq import CalibrationWarning, run_method

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", CalibrationWarning)
        return run_method(model, method, scheme, _batches(), blocks=list(blocks), options=options or None)


def _logits(model: Any, ids: Any = IDS) -> Any:
    with torch.no_grad():
        return model(input_ids=ids, use_cache=False).logits


def _installed_logits(model: Any, result: Any, ids: Any = IDS) -> Any:
    """The model's logits with the PTQ result installed as an eval candidate, then uninstalled."""
    from precisionlab.ptq.install import ptq_candidate

    report = ptq_candidate(result).prepare(model, (), None)
    try:
        return _logits(model, ids)
    finally:
        report.restore()


def _no_forward_time_changes(model: Any) -> None:
    for name, module in model.named_modules():
        assert not module._forward_pre_hooks and not module._forward_hooks, name
        assert "forward" not in vars(module), name
        assert not hasattr(module, "precisionlab_kivi"), name
    assert model.config._attn_implementation != "precisionlab_kivi"


@pytest.mark.parametrize(("method", "scheme", "options"), [
    ("smoothquant", "int8", {}),
    ("llm_int8", None, {"threshold": 0.5}),
    ("llm_int8", None, {"threshold": 0.5, "outlier_weights": "fp16"}),
    ("kivi", "int2", {"group": 16, "residual": 16}),
])
def test_each_candidate_installs_its_forward_and_restores_bit_for_bit(tiny, method: str, scheme: str | None,
                                                                     options: dict) -> None:  # type: ignore[no-untyped-def]
    from precisionlab.ptq.install import ptq_candidate

    result = _run(tiny, method, scheme, **options)
    before = {n: p.detach().clone() for n, p in tiny.named_parameters()}
    float_logits = _logits(tiny)
    candidate = ptq_candidate(result)
    assert candidate.label == f"{method}:{result.scheme}"
    report = candidate.prepare(tiny, (), None)
    installed = _logits(tiny)
    assert not torch.allclose(installed, float_logits, atol=1e-4), "the method changed nothing"
    if method == "kivi":  # the KV cache is quantized, not the weights
        assert not report.quantized and report.model_bytes == report.reference_bytes
    else:
        assert len(report.quantized) == len(result.quantized) == 7
        assert report.model_bytes < report.reference_bytes
    report.restore()
    report.restore()  # idempotent
    for n, p in tiny.named_parameters():
        assert torch.equal(p.detach(), before[n]), n
    assert torch.equal(_logits(tiny), float_logits)
    _no_forward_time_changes(tiny)


def _w8a8(model: Any, names: list[str], scheme: str) -> Any:
    """Logits of the eval runner's own W8A8 path: weights by models.weights, inputs by the activation hooks."""
    from precisionlab.models.hooks import activation_quantization
    from precisionlab.models.weights import quantize_weights

    report = quantize_weights(model, scheme, names, ())
    try:
        with activation_quantization(model, scheme, names, ()):
            return _logits(model)
    finally:
        report.restore()


def test_llm_int8_without_outliers_is_plain_int8(tiny) -> None:  # type: ignore[no-untyped-def]
    """threshold = inf: no fp16 columns, so the exact int8 x int8 product equals fake-quantized int8 weights and
    per-token int8 activations multiplied in float32 (the runner's int8:row+act=int8:row path) up to float32
    rounding."""

    result = _run(tiny, "llm_int8", None, threshold=float("inf"))
    expected = _w8a8(tiny, sorted(result.quantized), "int8:row:scale=fp32")
    got = _installed_logits(tiny, result)
    assert torch.allclose(got, expected, atol=2e-5, rtol=1e-5)
    assert not torch.allclose(expected, _logits(tiny), atol=1e-4)


def test_llm_int8_outlier_columns_bring_the_layer_closer_to_fp16(tiny) -> None:  # type: ignore[no-untyped-def]
    """With a threshold that every column of these small activations exceeds, each layer is the fp16 product
    (the int8 part is empty): the installed model is the fp16-rounded float model."""

    result = _run(tiny, "llm_int8", None, threshold=1e-30, outlier_weights="fp16")
    got = _installed_logits(tiny, result)
    float_logits = _logits(tiny)
    plain = _w8a8(tiny, sorted(result.quantized), "int8:row:scale=fp32")
    err_fp16 = float((got - float_logits).norm() / float_logits.norm())
    err_int8 = float((plain - float_logits).norm() / float_logits.norm())
    assert err_fp16 < 1e-3 and err_fp16 < err_int8 / 10


def test_smoothquant_without_smoothing_is_the_runners_w8a8(tiny) -> None:  # type: ignore[no-untyped-def]
    """No folds and the original weights quantized: the candidate equals the eval runner's int8:row+act=int8:row
    computed through models.weights and the activation hooks."""
    from precisionlab.ptq.install import ptq_candidate
    from precisionlab.quant import quantize

    result = _run(tiny, "smoothquant", "int8:row")
    assert result.folds, "SmoothQuant folded nothing on the tiny Llama"
    modules = dict(tiny.named_modules())
    plain = dataclasses.replace(result, folds=[], quantized={
        n: quantize(modules[n].weight.detach().numpy(), "int8:row") for n in result.quantized})
    expected = _w8a8(tiny, sorted(result.quantized), "int8:row")
    got = _installed_logits(tiny, plain)
    assert torch.equal(got, expected)
    smoothed = ptq_candidate(result).prepare(tiny, (), None)  # the real result differs (the folds count)
    try:
        assert not torch.equal(_logits(tiny), expected)
    finally:
        smoothed.restore()


def test_smoothquant_layer_output_is_the_w8a8_formula_on_the_smoothed_input(tiny) -> None:  # type: ignore[no-untyped-def]
    """q_proj of block 0 in the installed model against smoothquant.w8a8_output of the float model's input
    (numpy, float64) with the result's scales: the folds and the hooks compute the published formula."""
    import numpy as np

    from precisionlab.ptq.install import ptq_candidate
    from precisionlab.ptq.smoothquant import w8a8_output
    from precisionlab.quant.scheme import parse_scheme

    result = _run(tiny, "smoothquant", "int8")
    name = "model.layers.0.self_attn.q_proj"
    scales = next(s for g, s in result.folds if name in g.layers)
    module = dict(tiny.named_modules())[name]
    seen: dict[str, Any] = {}
    handle = module.register_forward_pre_hook(lambda _m, args: seen.__setitem__("x", args[0].detach().clone()))
    try:
        _logits(tiny)
    finally:
        handle.remove()
    x = seen["x"].reshape(-1, 64).double().numpy()
    w = module.weight.detach().double().numpy()
    expected = w8a8_output(x, w, parse_scheme("int8"), parse_scheme("int8:row"), scales)
    report = ptq_candidate(result).prepare(tiny, (), None)
    out_handle = module.register_forward_hook(lambda _m, _a, out: seen.__setitem__("y", out.detach().clone()))
    try:
        _logits(tiny)
    finally:
        out_handle.remove()
        report.restore()
    y = seen["y"].reshape(-1, w.shape[0]).double().numpy()
    assert np.linalg.norm(y - expected) / np.linalg.norm(expected) < 1e-3
    plain = w8a8_output(x, w, parse_scheme("int8"), parse_scheme("int8:row"))
    assert np.linalg.norm(y - expected) < np.linalg.norm(plain - expected) / 10


@pytest.mark.parametrize("blocks", [(0, 1), (1,)])
def test_kivi_candidate_equals_decoding_over_the_kivi_cache(tiny, blocks: tuple[int, ...]) -> None:  # type: ignore[no-untyped-def]
    """One forward with the candidate installed equals prefilling one token and decoding the rest one at a time
    over make_kivi_cache (transformers' own cache path, the KIVI layer storing the quantized states); with some
    blocks selected, the cache's other layers are plain full-precision ones."""
    from transformers.cache_utils import Cache, DynamicLayer

    from precisionlab.models.hooks import cache_kwargs
    from precisionlab.ptq.install import ptq_candidate
    from precisionlab.ptq.kivi import KIVIConfig, make_kivi_cache, teacher_forced_logits

    result = _run(tiny, "kivi", "int2", blocks, group=16, residual=16)
    assert [r.name for r in result.layers] == [f"model.layers.{b}.self_attn" for b in blocks]
    ids = IDS[:1]
    kivi_layers = make_kivi_cache(tiny, KIVIConfig(2, 16, 16)).layers
    cache = Cache(layers=[kivi_layers[i] if i in blocks else DynamicLayer() for i in range(2)])
    decoded = teacher_forced_logits(tiny, ids, 1, cache)
    report = ptq_candidate(result).prepare(tiny, (), None)
    try:
        one_pass = _logits(tiny, ids)[0, : ids.shape[1] - 1]
    finally:
        report.restore()
    assert torch.allclose(one_pass, decoded, atol=2e-5, rtol=1e-4)
    report = ptq_candidate(result).prepare(tiny, (), None)
    try:  # a decode step over a cache is refused while installed: the emulation covers whole texts only
        cache = transformers.DynamicCache(config=tiny.config)
        with torch.no_grad(), pytest.raises(ValueError, match="no cache"):
            tiny(input_ids=ids[:, :20], **cache_kwargs(tiny, cache))
            tiny(input_ids=ids[:, 20:21], **cache_kwargs(tiny, cache))
    finally:
        report.restore()
    _no_forward_time_changes(tiny)


def test_kivi_with_a_window_longer_than_the_text_is_the_float_model_in_fp16(tiny) -> None:  # type: ignore[no-untyped-def]
    """residual >= tokens: nothing is quantized, every key and value is only rounded to fp16."""
    from precisionlab.ptq.install import ptq_candidate

    result = _run(tiny, "kivi", "int2", group=16, residual=128)
    got = _installed_logits(tiny, result)
    float_logits = _logits(tiny)
    assert torch.allclose(got, float_logits, atol=2e-3)
    short = _run(tiny, "kivi", "int2", group=16, residual=16)
    report = ptq_candidate(short).prepare(tiny, (), None)
    try:
        quantized = _logits(tiny)
    finally:
        report.restore()
    assert (quantized - float_logits).abs().max() > 10 * (got - float_logits).abs().max()


def test_smoothquants_layer_output_reference_is_in_the_folded_coordinates(tiny) -> None:  # type: ignore[no-untyped-def]
    """The runner compares a changed layer against report.original(weight) on the input the layer sees; a smoothed
    layer sees X diag(1/s), so its reference is W diag(s) (computed here from the float weight and the scales)."""
    from precisionlab.ptq.install import ptq_candidate

    result = _run(tiny, "smoothquant", "int8")
    modules = dict(tiny.named_modules())
    group, scales = result.folds[0]
    name = group.layers[0]
    expected = (modules[name].weight.detach().double() * torch.as_tensor(scales)[None, :]).float()
    unfolded = "model.layers.0.self_attn.o_proj"  # follows no norm: not smoothed, the original itself
    assert unfolded not in group.layers
    original = modules[unfolded].weight.detach().clone()
    report = ptq_candidate(result).prepare(tiny, (), None)
    try:
        assert torch.equal(report.original(modules[name].weight), expected)
        assert torch.equal(report.original(modules[unfolded].weight), original)
    finally:
        report.restore()
