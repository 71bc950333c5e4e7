"""What the search assigns formats to: the model's weight layers, grouped where a runtime needs one format.

    units = search_units(model, blocks=[1, 2], fuse=("qkv",), embeddings=False)
    units[0].name, units[0].layers        # "model.layers.1.self_attn.qkv_proj", (q_proj, k_proj, v_proj names)
    unit_costs(units, ["int4:g128", "bf16"])   # bytes[unit][format] (None: the format cannot hold a layer)

Selection: the weight layers of `models.weights.linear_layers` (nn.Linear, nn.Embedding), within `blocks` when
given; the output head and the embedding tables only with `embeddings=True` (they are excluded by default, as
the evaluation and most deployments do). A tied weight (SmolLM2's head is its token embedding) is one layer,
named by its first module. Fused groups (`FUSED`): `qkv` puts q_proj, k_proj and v_proj of one attention into
one unit (llama.cpp, vLLM and TensorRT-LLM run them as one matrix, in one type); `gate_up` does so for an MLP's
gate_proj and up_proj. A GPT-2 Conv1D is refused (its transposed weight is no format export writes).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from precisionlab.search.costs import format_bytes

FUSED = {"qkv": (("q_proj", "k_proj", "v_proj"), "qkv_proj"), "gate_up": (("gate_proj", "up_proj"), "gate_up_proj")}
"""Group name -> (member suffixes, the unit's name suffix)."""


@dataclass(frozen=True)
class Unit:
    """One choice of the search: layers that take one format together."""

    name: str
    layers: tuple[str, ...]
    shapes: tuple[tuple[int, ...], ...]
    block: int | None
    """The transformer block holding the layers (None: an embedding or the output head)."""

    @property
    def elements(self) -> int:
        return sum(math.prod(s) for s in self.shapes)


def parse_fuse(text: str | Sequence[str]) -> tuple[str, ...]:
    """'qkv', 'qkv,gate_up' or 'none' -> the group names; ValueError for an unknown one."""
    parts = [p.strip().lower() for p in (text.split(",") if isinstance(text, str) else text) if p.strip()]
    if parts in ([], ["none"]):
        return ()
    bad = [p for p in parts if p not in FUSED]
    if bad:
        raise ValueError(f"--fuse: unknown group {bad[0]!r}; choose from {', '.join(FUSED)} or none")
    return tuple(dict.fromkeys(parts))


def search_units(model: Any, blocks: Sequence[int] | None = None, fuse: Sequence[str] = ("qkv",),
                 embeddings: bool = False) -> list[Unit]:
    """The units of `model` (module docstring), in module order; ValueError when none is selected."""
    from precisionlab.models.weights import CONV1D, layer_kind, linear_layers
    from precisionlab.ptq.structure import block_of
    from precisionlab.ptq.structure import blocks as model_blocks

    prefix, children = model_blocks(model)
    if blocks is not None:
        bad = [b for b in blocks if not 0 <= b < len(children)]
        if bad:
            raise ValueError(f"block {bad[0]} does not exist: the model has blocks 0..{len(children) - 1}")
    include = [f"{prefix}.{b}.*" for b in sorted(set(blocks))] if blocks is not None else []
    if embeddings and blocks is not None:
        include += ["lm_head", "*embed*"]
    selected = linear_layers(model, include, () if embeddings else None)
    seen: set[int] = set()
    layers: list[tuple[str, tuple[int, ...]]] = []
    for name, module in selected.items():
        if layer_kind(module) == CONV1D:
            raise ValueError(f"{name} is a Conv1D (GPT-2's transposed linear); the search covers Linear and "
                             "Embedding weights")
        if id(module.weight) in seen:
            continue
        seen.add(id(module.weight))
        layers.append((name, tuple(int(d) for d in module.weight.shape)))
    if not layers:
        raise ValueError("no weight layer to search (--blocks and the embedding rule left none)")
    groups: dict[str, list[tuple[str, tuple[int, ...]]]] = {}
    order: list[str] = []
    for name, shape in layers:
        parent, _, leaf = name.rpartition(".")
        key = name
        for group in fuse:
            members, label = FUSED[group]
            if leaf in members:
                key = f"{parent}.{label}" if parent else label
        if key not in groups:
            groups[key] = []
            order.append(key)
        groups[key].append((name, shape))
    units = []
    for key in order:
        members_of = groups[key]
        names = tuple(n for n, _ in members_of)
        block = block_of(names[0]) if names[0].startswith(f"{prefix}.") else None
        name = key if len(names) > 1 else names[0]
        units.append(Unit(name, names, tuple(s for _, s in members_of), block))
    return units


def unit_costs(units: Sequence[Unit], formats: Sequence[str]) -> list[list[int | None]]:
    """bytes[unit][format]: the sum of its layers' `format_bytes`; None where the format cannot hold a layer."""
    table: list[list[int | None]] = []
    for unit in units:
        row: list[int | None] = []
        for fmt in formats:
            try:
                row.append(sum(format_bytes(fmt, shape) for shape in unit.shapes))
            except ValueError:
                row.append(None)
        table.append(row)
    return table
