"""Where the linear layers of a model are, which of them share an input a scale can fold into, and the fold.

    blocks(model)               the transformer blocks: the largest nn.ModuleList whose
                                children hold nn.Linear layers, with its dotted prefix
    linear_names(model, blocks) names of the nn.Linear layers inside the selected blocks, in
                                module order (embeddings and lm_head are outside the blocks)
    scale_groups(model, names)  the groups AWQ and SmoothQuant scale, from the model's architecture
                                (`ptq.architectures`: Llama-style blocks, Gemma's (1 + w) norms,
                                OLMo2's post-norms; any other architecture is refused), e.g. Llama's

        prev op                     layers                      inspected module
        input_layernorm             self_attn.q/k/v_proj        self_attn
        self_attn.v_proj            self_attn.o_proj            o_proj   (only when v's outputs
                                                                          are o's inputs: not GQA)
        post_attention_layernorm    mlp.gate_proj, up_proj      mlp
        mlp.up_proj                 mlp.down_proj               down_proj

    fold_scales(model, group, s)   the fold, in place
    fold_values(model, folds)      the values the folds give the parameters they touch, nothing written
    fold_check(model, groups, batch)   max relative change of the logits when every group is folded
                                with random scales (the model restored after): what makes a fold safe

A per-input-channel scale s folds exactly into the prev op: a norm y = n(x) * w has its weight (and
bias) divided by s, a norm y = n(x) * (1 + w) gets w <- (1 + w) / s - 1, a previous linear's output
rows (and bias) are divided by s; the layers' input columns are multiplied by s, so the float model
computes the same function.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from precisionlab import peers
from precisionlab.ptq.architectures import DIVIDE, ONE_PLUS, architecture

FOLD_TOLERANCE = 1e-4
"""The largest relative change of the logits `fold_check` accepts before a folding method runs."""


@dataclass(frozen=True)
class ScaleGroup:
    """Linears that read one op's output, and the module whose output judges a scale."""

    prev: str
    layers: tuple[str, ...]
    inspect: str
    norm_rule: str = DIVIDE
    """How prev is divided by s: DIVIDE (a linear's rows, or a norm n(x) * w) or ONE_PLUS (a norm n(x) * (1 + w))."""


def blocks(model: Any) -> tuple[str, list[Any]]:
    """(dotted prefix, blocks) of the model's transformer blocks; ValueError when there is none."""
    torch = peers.torch("PTQ on a model")
    best: tuple[str, list[Any]] | None = None
    for name, module in model.named_modules():
        if not isinstance(module, torch.nn.ModuleList) or len(module) < 1:
            continue
        children = list(module)
        if not all(any(isinstance(m, torch.nn.Linear) for m in child.modules()) for child in children):
            continue
        if best is None or len(children) > len(best[1]):
            best = (name, children)
    if best is None:
        raise ValueError("the model has no list of blocks holding linear layers (an nn.ModuleList of blocks)")
    return best


def linear_names(model: Any, block_ids: Iterable[int] | None = None) -> list[str]:
    """Names of the nn.Linear layers inside the selected blocks (all blocks when None), in module order."""
    torch = peers.torch("PTQ on a model")
    prefix, children = blocks(model)
    selected = range(len(children)) if block_ids is None else sorted(set(int(b) for b in block_ids))
    bad = [b for b in selected if not 0 <= b < len(children)]
    if bad:
        raise ValueError(f"block {bad[0]} does not exist: the model has blocks 0..{len(children) - 1}")
    names = []
    for b in selected:
        for sub, module in children[b].named_modules():
            if isinstance(module, torch.nn.Linear):
                names.append(f"{prefix}.{b}.{sub}" if prefix else f"{b}.{sub}")
    return names


_BLOCK = re.compile(r"\.(\d+)\.")


def block_of(name: str) -> int | None:
    """The block number in a layer name (`model.layers.3.mlp.up_proj` -> 3), or None."""
    found = _BLOCK.search(f".{name}.")
    return int(found.group(1)) if found else None


def scale_groups(model: Any, names: Iterable[str], method: str = "scale folding") -> list[ScaleGroup]:
    """The model's scale groups (module docstring) whose layers are all among `names`; ValueError naming an
    architecture scale folding does not know (`method` names who asks)."""
    arch = architecture(model, method)
    wanted = set(names)
    modules = dict(model.named_modules())
    groups: list[ScaleGroup] = []
    prefix, children = blocks(model)
    for b in range(len(children)):
        base = f"{prefix}.{b}" if prefix else str(b)
        for prev, layers, inspect in arch.groups:
            full = tuple(f"{base}.{name}" for name in layers)
            prev_name, inspect_name = f"{base}.{prev}", f"{base}.{inspect}"
            if not all(n in wanted for n in full) or prev_name not in modules or inspect_name not in modules:
                continue
            if not _folds(modules[prev_name], [modules[n] for n in full]):
                continue
            rule = DIVIDE if hasattr(modules[prev_name], "out_features") else arch.norm_rule
            groups.append(ScaleGroup(prev_name, full, inspect_name, rule))
    return groups


def _folds(prev: Any, layers: list[Any]) -> bool:
    """True when the prev op's output has one channel per input column of every layer."""
    width = {int(m.weight.shape[1]) for m in layers}
    if len(width) != 1:
        return False
    n = width.pop()
    if hasattr(prev, "out_features"):
        return int(prev.out_features) == n
    weight = getattr(prev, "weight", None)
    return weight is not None and tuple(weight.shape) == (n,)


def fold_scales(model: Any, group: ScaleGroup, scales: Any) -> None:
    """Fold per-input-channel scales s into the model, in place: prev op / s (by its rule), the layers' input
    columns * s. The float model computes the same function (up to rounding); see the module docstring."""
    torch = peers.torch("folding scales")
    params = dict(model.named_parameters(remove_duplicate=False))
    with torch.no_grad():
        for name, value in fold_values(model, [(group, scales)]).items():
            params[name].copy_(value)


def fold_values(model: Any, folds: Iterable[tuple[ScaleGroup, Any]], skip: Iterable[int] = ()) -> dict[str, Any]:
    """Parameter name -> its values after every (group, scales) of `folds` is folded in turn (fold_scales' rule),
    nothing written: only the parameters the folds touch, each computed once from its current values (a
    parameter in two folds composes them). `skip`: ids of parameters not wanted (a quantized layer, which is
    overwritten anyway)."""
    torch = peers.torch("folding scales")
    modules = dict(model.named_modules())
    skipped = set(skip)
    current: dict[int, tuple[str, Any]] = {}

    def update(name: str, param: Any, rule: Any) -> None:
        if param is None or id(param) in skipped:
            return
        first, value = current.get(id(param), (name, param.detach()))
        current[id(param)] = (first, rule(value.double()).to(param.dtype))

    for group, scales in folds:
        prev = modules[group.prev]
        s = torch.as_tensor(scales, dtype=torch.float64)
        if hasattr(prev, "out_features"):  # a previous linear: its output rows
            update(f"{group.prev}.weight", prev.weight, lambda w, s=s: w / s[:, None])
        elif group.norm_rule == ONE_PLUS:  # n(x) * (1 + w): 1 + w' = (1 + w) / s
            update(f"{group.prev}.weight", prev.weight, lambda w, s=s: (1.0 + w) / s - 1.0)
        else:  # a norm n(x) * w: its elementwise weight
            update(f"{group.prev}.weight", prev.weight, lambda w, s=s: w / s)
        update(f"{group.prev}.bias", getattr(prev, "bias", None), lambda b, s=s: b / s)
        for name in group.layers:
            update(f"{name}.weight", modules[name].weight, lambda w, s=s: w * s[None, :])
    return dict(current.values())


def fold_check(model: Any, groups: Sequence[ScaleGroup], batch: Any, seed: int = 0) -> float:
    """max |l' - l| / max |l| over the model's outputs l on one batch, l' with every group folded at random
    scales s = exp(U(-1, 1)) per channel (seeded); the folded parameters are put back bit for bit. 0 when
    there is no group. A fold that is exact moves the logits by float32 rounding only (about 1e-6)."""
    if not groups:
        return 0.0
    torch = peers.torch("folding scales")
    from precisionlab.models.weights import replace_weights
    from precisionlab.ptq.calibration import run_batch

    modules = dict(model.named_modules())
    rng = np.random.default_rng(seed)
    folds = [(g, np.exp(rng.uniform(-1.0, 1.0, int(modules[g.layers[0]].weight.shape[1])))) for g in groups]
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            before = _output(run_batch(model, batch)).double()
            with replace_weights(model, fold_values(model, folds)):  # the touched parameters back bit for bit
                after = _output(run_batch(model, batch)).double()
    finally:
        model.train(was_training)
    scale = float(before.abs().max())
    change = float((after - before).abs().max())
    return change / scale if scale > 0 else (0.0 if change == 0 else float("inf"))


def _output(out: Any) -> Any:
    """The logits of a model's output (a transformers output, a tuple's first element, or a tensor)."""
    logits = getattr(out, "logits", None)
    if logits is not None:
        return logits
    return out[0] if isinstance(out, (tuple, list)) else out
