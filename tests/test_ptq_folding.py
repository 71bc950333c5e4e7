"""Scale folding per architecture, on tiny random models built from transformers' config classes (no download).

Each architecture's norms get random weights (their initial ones, ones or zeros, would hide what a norm
computes). The check that matters is the logits: folding random scales must leave them unchanged up to
float32 rounding. The attribute-name rule the folds used before (divide the weight of `input_layernorm` and
`post_attention_layernorm`, whatever they compute) is re-implemented here to show what it did on Gemma and
OLMo2.
"""

from __future__ import annotations

import copy
import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="folding needs torch")
transformers = pytest.importorskip("transformers", reason="the tiny models are transformers models")

from precisionlab.ptq import CalibrationWarning, apply_result, run_method  # noqa: E402
from precisionlab.ptq import architectures as arch_mod  # noqa: E402
from precisionlab.ptq.structure import FOLD_TOLERANCE, fold_check, linear_names, scale_groups  # noqa: E402

CONFIGS = {"llama": "LlamaConfig", "mistral": "MistralConfig", "qwen2": "Qwen2Config", "qwen3": "Qwen3Config",
           "smollm3": "SmolLM3Config", "gemma": "GemmaConfig", "gemma2": "Gemma2Config",
           "gemma3_text": "Gemma3TextConfig", "olmo2": "Olmo2Config"}


def tiny(config_name: str, **extra: object):  # type: ignore[no-untyped-def]
    """A random 2-block model (vocabulary 128, hidden 64, 4 heads of 16, MHA) with random norm weights, seeded."""
    fields = dict(vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=4, head_dim=16, max_position_embeddings=128, pad_token_id=0, bos_token_id=1,
                  eos_token_id=2)
    fields.update(extra)
    config = getattr(transformers, config_name)(**fields)
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(config).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name:
                p.add_(0.3 * torch.randn_like(p))
    return model


def batches(n: int = 2, length: int = 48, seed: int = 0) -> list:  # type: ignore[type-arg]
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(3, 128, (1, length), generator=g) for _ in range(n)]


def attribute_name_fold_change(model, ids) -> float:  # type: ignore[no-untyped-def]
    """The old rule, re-implemented: every Llama-named prev op divided by s, norms included."""
    work = copy.deepcopy(model)
    modules = dict(work.named_modules())
    rng = np.random.default_rng(0)
    with torch.no_grad():
        before = model(ids).logits.double()
        for b in range(len(work.model.layers)):
            base = f"model.layers.{b}"
            for prev, layers in (("input_layernorm", ("q_proj", "k_proj", "v_proj")),
                                 ("self_attn.v_proj", ("o_proj",)),
                                 ("post_attention_layernorm", ("gate_proj", "up_proj")),
                                 ("mlp.up_proj", ("down_proj",))):
                if f"{base}.{prev}" not in modules:
                    continue
                group = "self_attn" if layers[0] in ("q_proj", "k_proj", "v_proj", "o_proj") else "mlp"
                targets = [modules[f"{base}.{group}.{n}"] for n in layers]
                s = torch.as_tensor(np.exp(rng.uniform(-1, 1, targets[0].weight.shape[1])))
                p = modules[f"{base}.{prev}"]
                p.weight.copy_((p.weight.double() / (s[:, None] if p.weight.dim() == 2 else s)).float())
                for t in targets:
                    t.weight.copy_((t.weight.double() * s[None, :]).float())
        after = work(ids).logits.double()
    return float((after - before).abs().max() / before.abs().max())


@pytest.mark.parametrize("kind", list(CONFIGS))
def test_every_known_architecture_folds_exactly(kind: str) -> None:
    model = tiny(CONFIGS[kind])
    assert arch_mod.model_type(model) == kind
    names = linear_names(model)
    groups = scale_groups(model, names)
    assert groups, kind
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    change = fold_check(model, groups, batches(1)[0])
    assert change < 1e-5, f"{kind}: {change}"  # float32 rounding; FOLD_TOLERANCE is 1e-4
    assert all(torch.equal(p, before[n]) for n, p in model.named_parameters())  # put back bit for bit
    if kind == "olmo2":  # post-norm: only the folds into a previous linear are exact
        assert {g.prev.rsplit(".", 1)[-1] for g in groups} == {"v_proj", "up_proj"}
    if kind.startswith("gemma"):
        assert {g.norm_rule for g in groups if "norm" in g.prev} == {arch_mod.ONE_PLUS}


@pytest.mark.parametrize(("kind", "at_least"), [("gemma", 1e-2), ("gemma2", 1e-1), ("olmo2", 1e-1)])
def test_the_attribute_name_rule_changed_these_models(kind: str, at_least: float) -> None:
    """What the folds did before the architectures were declared: the logits moved, and nothing refused."""
    model = tiny(CONFIGS[kind])
    assert attribute_name_fold_change(model, batches(1)[0]) > at_least


def test_awq_on_a_tiny_llama_reports_its_fold_check() -> None:
    model = tiny("LlamaConfig")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", CalibrationWarning)
        result = run_method(model, "awq", "int4:g32", batches(3), blocks=[0, 1])
    f = result.findings()
    assert 0 < f["ptq.awq.fold_check"] <= FOLD_TOLERANCE
    assert result.folds and all(r.status == "ok" for r in result.layers)


@pytest.mark.parametrize("kind", ["gemma", "gemma2", "olmo2"])
@pytest.mark.parametrize("method", ["awq", "smoothquant"])
def test_awq_and_smoothquant_fold_exactly_on_gemma_and_olmo2(kind: str, method: str) -> None:
    """AWQ's and SmoothQuant's folds, written into the model with no quantization, change nothing."""
    model = tiny(CONFIGS[kind])
    scheme = "int4:g32" if method == "awq" else "int8"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", CalibrationWarning)
        result = run_method(model, method, scheme, batches(3), blocks=[0, 1],
                            options={"objective": "linear"} if method == "awq" else {"alpha": 0.5})
    assert result.findings()[f"ptq.{method}.fold_check"] < 1e-5
    if kind == "olmo2" and method == "smoothquant":
        assert not result.folds  # no norm before any group: plain W8A8
    # the folds alone (quantized weights swapped for the folded float ones) leave the logits alone
    folded = copy.deepcopy(model)
    from precisionlab.ptq.structure import fold_scales

    for group, scales in result.folds:
        fold_scales(folded, group, scales)
    ids = batches(1, seed=5)[0]
    with torch.no_grad():
        a, b = model(ids).logits.double(), folded(ids).logits.double()
    assert float((b - a).abs().max() / a.abs().max()) < 1e-5
    if method == "awq":
        apply_result(folded, result)  # and the quantized model is not the float one


def test_an_architecture_without_an_adapter_is_refused_in_one_line() -> None:
    model = tiny("Phi3Config")  # fused qkv_proj and gate_up_proj: no adapter
    for method in ("awq", "smoothquant"):
        with pytest.raises(ValueError, match="architecture 'phi3' is not one of them") as caught:
            run_method(model, method, "int8", batches(1), blocks=[0])
        assert "\n" not in str(caught.value)
    result = run_method(model, "rtn", "int8", batches(1), blocks=[0])  # no folding: every method else runs
    assert result.layers


def test_a_fold_that_moves_the_logits_is_refused(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """Gemma declared with the Llama rule (w / s for a (1 + w) norm): the check catches it before any search."""
    wrong = tuple(a if a.name != "gemma" else arch_mod.Architecture("gemma", ("gemma",), arch_mod.DIVIDE, a.groups)
                  for a in arch_mod.ARCHITECTURES)
    monkeypatch.setattr(arch_mod, "ARCHITECTURES", wrong)
    model = tiny("GemmaConfig")
    with pytest.raises(ValueError, match=r"moved its logits by .* more than 0.0001"):
        run_method(model, "awq", "int4:g32", batches(2), blocks=[0, 1])
