"""Candidate specs: what is quantized in a compared model (weights, activations, KV cache).

    int4:g128                   weights only (any scheme string of precisionlab.quant)
    int8:row+act=int8:row       W8A8: per-channel int8 weights, per-token dynamic int8 activations
    e4m3:row+act=e4m3:row       fp8 weights and per-token fp8 activations
    none+kv=int8:row            the KV cache only (keys and values per token and head)
    int4:g128+kv=int4:g32       weights and KV cache
    gguf_q4_0+act=llamacpp      each linear's input quantized as llama.cpp's CPU matmul quantizes it for the
                                weight's GGML type in the GGUF export (Q8_0 / Q8_1 / Q8_K blocks, fp16 for F16
                                weights; models.llamacpp)

Parts are joined by "+" (scheme strings never contain it); `none` leaves the weights alone.
The label is the canonical spelling (each scheme as `str(parse_scheme(...))`), so two spellings
of one candidate share their findings keys.

A prepared candidate (`Candidate(weights, name=..., prepare=...)`, built in Python, not parsed) replaces
the weights by its own rule: `prepare(model, include, exclude)` writes them into the model and returns a
`models.weights.QuantizationReport` whose `restore()` puts the originals back (a PTQ method's weights,
the ladder's outlier-column step). `weights` then names the grid it quantizes to, `name` is its label.
Its `prepare` closure cannot be sent to another process; `rebuild = (function, args)`, a module-level function
that returns the candidate again (export.candidate.result_candidate and the result's path), lets the
evaluation's workers build their own (eval.workers).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from precisionlab.quant import parse_scheme

LLAMACPP = "llamacpp"
"""act=llamacpp: llama.cpp's activation quantization, per weight type (models.llamacpp)."""


@dataclass(frozen=True)
class Candidate:
    weights: str | None
    act: str | None = None
    kv: str | None = None
    name: str | None = None
    """The label of a prepared candidate (default: built from the parts)."""
    prepare: Callable[[Any, Any, Any], Any] | None = field(default=None, compare=False, repr=False)
    """prepare(model, include, exclude) -> QuantizationReport: installs its own weights (see the module)."""
    rebuild: tuple[Callable[..., Candidate], tuple[Any, ...]] | None = field(default=None, compare=False, repr=False)
    """A prepared candidate: (function, args) with function(*args) this candidate again, in any process."""

    @property
    def label(self) -> str:
        if self.name:
            return self.name
        parts = [self.weights or "none"]
        if self.act:
            parts.append(f"act={self.act}")
        if self.kv:
            parts.append(f"kv={self.kv}")
        return "+".join(parts)

    @property
    def weight_scheme(self) -> str | None:
        return self.weights


def parse_candidate(text: str) -> Candidate:
    """One candidate (see the module docstring); ValueError names the bad part."""
    parts = [p.strip() for p in text.strip().split("+")]
    if not parts or any(not p for p in parts):
        raise ValueError(f"empty part in candidate {text!r}; write WEIGHTS[+act=SCHEME][+kv=SCHEME]")
    head, rest = parts[0], parts[1:]
    weights = None if head.lower() == "none" else str(parse_scheme(head))
    found: dict[str, str] = {}
    for part in rest:
        key, eq, value = part.partition("=")
        key = key.strip().lower()
        if not eq or key not in ("act", "kv"):
            raise ValueError(f"part {part!r} of candidate {text!r}: expected act=SCHEME or kv=SCHEME")
        if key in found:
            raise ValueError(f"candidate {text!r} sets {key}= twice")
        value = value.strip()
        found[key] = LLAMACPP if key == "act" and value.lower() == LLAMACPP else str(parse_scheme(value))
    candidate = Candidate(weights, found.get("act"), found.get("kv"))
    if candidate.weights is None and candidate.act is None and candidate.kv is None:
        raise ValueError(f"candidate {text!r} quantizes nothing (the reference is always compared against)")
    return candidate


def parse_candidates(specs: Iterable[str]) -> list[Candidate]:
    """Comma-separated and repeated specs, in order, without repeats (by canonical label)."""
    out: dict[str, Candidate] = {}
    for spec in specs:
        for part in spec.split(","):
            if part.strip():
                candidate = parse_candidate(part)
                out.setdefault(candidate.label, candidate)
    if not out:
        raise ValueError("give at least one scheme to compare, e.g. --schemes int8:row,int4:g128")
    return list(out.values())
