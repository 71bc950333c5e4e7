"""Where a per-input-channel scale folds in a model's blocks, per architecture, and what each norm computes.

AWQ and SmoothQuant divide the op before a group of layers by s and multiply the layers' input columns
by s. The float model computes the same function only when that op's output is exactly the layers'
input and the op is divided by its own rule. Attribute names cannot tell: Gemma's RMSNorm computes
n(x) * (1 + w), so dividing w by s is wrong; OLMo2's norms follow the attention and the MLP (they
normalize their outputs), so its `post_attention_layernorm` is not the MLP's input. So every
architecture (transformers' `config.model_type`) states its groups and its norms' rule here, and any
other architecture is refused.

    model_type                      norm                   groups (prev op -> layers reading its output)
    llama (SmolLM, SmolLM2),        y = n(x) * w           input_layernorm -> q_proj, k_proj, v_proj
    mistral, qwen2, qwen3,          fold: w <- w / s       v_proj -> o_proj  (when v's outputs are o's
    smollm3                                                               inputs: not with GQA)
                                                           post_attention_layernorm -> gate_proj, up_proj
                                                           up_proj -> down_proj
    gemma                           y = n(x) * (1 + w)     the same groups
                                    fold: w <- (1 + w) / s - 1
    gemma2, gemma3_text             y = n(x) * (1 + w)     the same, but the MLP reads
                                                           pre_feedforward_layernorm (post_attention_layernorm
                                                           normalizes the attention's output)
    olmo2                           post-norm              v_proj -> o_proj and up_proj -> down_proj only:
                                                           q/k/v and gate/up read the residual stream itself

A previous linear (v_proj, up_proj) folds the same way everywhere: its output rows and bias are divided
by s. Each entry was verified by folding random scales into a tiny random model of its config class: the
logits move by about 1e-6 relative (float32 rounding; tests/test_ptq_folding.py), where the attribute-name
rule moved Gemma's by 5e-2, Gemma2's by 1 and OLMo2's by 0.9. `structure.fold_check` repeats the check on the model at
hand before every search.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

DIVIDE = "divide"
"""The op's weight (and bias) divided by s: a norm y = n(x) * w (+ b), or a linear's output rows."""
ONE_PLUS = "one_plus"
"""A norm y = n(x) * (1 + w): w <- (1 + w) / s - 1."""

_LLAMA_GROUPS = (
    ("input_layernorm", ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"), "self_attn"),
    ("self_attn.v_proj", ("self_attn.o_proj",), "self_attn.o_proj"),
    ("post_attention_layernorm", ("mlp.gate_proj", "mlp.up_proj"), "mlp"),
    ("mlp.up_proj", ("mlp.down_proj",), "mlp.down_proj"),
)
_SANDWICH_GROUPS = (
    _LLAMA_GROUPS[0],
    _LLAMA_GROUPS[1],
    ("pre_feedforward_layernorm", ("mlp.gate_proj", "mlp.up_proj"), "mlp"),
    _LLAMA_GROUPS[3],
)
_POST_NORM_GROUPS = (_LLAMA_GROUPS[1], _LLAMA_GROUPS[3])


@dataclass(frozen=True)
class Architecture:
    """One architecture's scale groups (per block: prev op, the layers reading its output, the module whose
    output judges a scale; names relative to the block) and its norms' fold rule."""

    name: str
    model_types: tuple[str, ...]
    norm_rule: str
    """DIVIDE or ONE_PLUS: how a norm among the prev ops is divided by s."""
    groups: tuple[tuple[str, tuple[str, ...], str], ...]
    note: str = ""


ARCHITECTURES = (
    Architecture("llama", ("llama", "mistral", "qwen2", "qwen3", "smollm3"), DIVIDE, _LLAMA_GROUPS,
                 "RMSNorm n(x) * w before the attention and the MLP"),
    Architecture("gemma", ("gemma",), ONE_PLUS, _LLAMA_GROUPS, "RMSNorm n(x) * (1 + w)"),
    Architecture("gemma2", ("gemma2", "gemma3_text"), ONE_PLUS, _SANDWICH_GROUPS,
                 "RMSNorm n(x) * (1 + w); the MLP reads pre_feedforward_layernorm"),
    Architecture("olmo2", ("olmo2",), DIVIDE, _POST_NORM_GROUPS,
                 "post-norm: only the folds into v_proj and up_proj are exact"),
)
"""Every architecture scale folding knows (module docstring)."""


def model_type(model: Any) -> str:
    """The model's `config.model_type` (transformers), or its class name when it has none."""
    config = getattr(model, "config", None)
    kind = getattr(config, "model_type", None)
    return str(kind) if kind else type(model).__name__


def architecture(model: Any, method: str = "scale folding") -> Architecture:
    """The model's Architecture, or ValueError naming the architecture that has none."""
    kind = model_type(model)
    for arch in ARCHITECTURES:
        if kind in arch.model_types:
            return arch
    known = ", ".join(t for a in ARCHITECTURES for t in a.model_types)
    raise ValueError(f"{method} folds scales into the op before each group of layers and knows the norms of {known}; "
                     f"architecture {kind!r} is not one of them, refused (its norms' semantics are not verified)")
