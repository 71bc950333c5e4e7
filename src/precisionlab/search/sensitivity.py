"""Sensitivity of each unit to each format on calibration tokens: the direct measure and the cheap proxy.

    context = SensitivityContext(loaded.model, batches)         # the reference pass, once
    context.direct(unit.layers, "int4:g128")                    # KL, nats per token
    context.proxy(units, formats)                               # {(unit, format): Fisher-weighted output error}
    context.kl_of({layer: format, ...})                         # KL of a whole recipe (the measured additivity)

Direct measure. The unit's weights are replaced by their values in the format (`costs.layer_values`) and the
KL divergence of the model's next-token distribution from the float model's, KL(p || q) = sum p (log p - log q)
over the whole vocabulary, is averaged over every calibration token. Only the part of the model after the change
runs: the hidden state at each block's input is recorded once (`ptq.calibration.block_calls`, handed on block
by block), so a unit in block b runs blocks b.. and the output head (final norm, then lm_head) on the recorded
input of block b. The context checks once that this path gives the full forward's logits (largest difference
at most `PATH_TOLERANCE` of the largest logit) and otherwise runs the full model for every measure. A unit
outside the blocks (an embedding, the head) always runs the full model.

Proxy (one backward pass). KL(p || q_w) is zero with a zero gradient at the float weights, so its first term is
second order: KL ~ 1/2 d^T F d, F the Fisher information. Taken at each layer's output y (per token t, output
channel j) and kept to its diagonal, with the empirical Fisher (squared gradients of the calibration text's
next-token loss) in place of F, the change of one layer costs

    proxy = 1/2 * sum_t sum_j g_tj^2 * dy_tj^2,    g = dLoss/dy (one backward pass), dy = x (W_hat - W)^T

(the score NVIDIA ModelOpt's AutoQuantize uses). A unit's proxy is its layers' sum. It needs one forward and one
backward pass for all units and formats, against one forward per (unit, format) for the direct measure; how well
it ranks the units is reported as Spearman's rank correlation against the direct measure.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

import numpy as np

from precisionlab.search.costs import layer_values

PATH_TOLERANCE = 1e-4
"""Largest |logit difference| / max |logit| accepted between the block-by-block path and the full forward."""


class SensitivityContext:
    """The float model's reference on the calibration batches, and the measures of the module docstring."""

    def __init__(self, model: Any, batches: Sequence[Any]) -> None:
        from precisionlab import peers
        from precisionlab.ptq.calibration import block_calls, next_block_calls
        from precisionlab.ptq.structure import blocks

        torch = peers.torch()
        if not batches:
            raise ValueError("the sensitivity needs at least one calibration batch")
        self.model, self.batches = model, list(batches)
        self.tokens = int(sum(b.numel() for b in self.batches))
        began = time.perf_counter()
        self.prefix, self.blocks = blocks(model)
        with torch.no_grad():
            self.reference = [torch.log_softmax(self._logits_full(b), dim=-1) for b in self.batches]
            calls = block_calls(model, f"{self.prefix}.0", self.batches)
            self.calls = [calls]
            for block in self.blocks[1:]:
                calls = next_block_calls(calls, block)
                self.calls.append(calls)
            self.head = _head(model)
            self.fast = self.head is not None and self._path_agrees()
        self.setup_seconds = time.perf_counter() - began

    # -- forward paths
    def _logits_full(self, batch: Any) -> Any:
        out = self.model(input_ids=batch, use_cache=False)
        return out.logits[0].float()

    def _logits_from(self, block: int, index: int) -> Any:
        assert self.head is not None
        hidden = self.calls[block][index].run()
        for k in range(block + 1, len(self.blocks)):
            hidden = self.calls[k][index].handed_on(self.blocks[k], hidden).run()
        return self.head(hidden)[0].float()

    def _path_agrees(self) -> bool:
        for i in range(len(self.batches)):
            full = self._logits_full(self.batches[i])
            path = self._logits_from(0, i)
            scale = float(full.abs().max()) or 1.0
            if path.shape != full.shape or float((path - full).abs().max()) > PATH_TOLERANCE * scale:
                return False
        return True

    def _kl(self, block: int | None) -> float:
        """Mean KL(reference || model as it is now) per calibration token, from `block` on (None: full model)."""
        from precisionlab import peers

        torch = peers.torch()
        total = 0.0
        with torch.no_grad():
            for i, batch in enumerate(self.batches):
                logits = self._logits_from(block, i) if block is not None and self.fast else self._logits_full(batch)
                logq = torch.log_softmax(logits, dim=-1)
                ref = self.reference[i]
                total += float((ref.exp() * (ref - logq)).sum(dtype=torch.float64))
        return max(total / self.tokens, 0.0)

    # -- measures
    def direct(self, layers: Sequence[str], fmt: str) -> float:
        """KL with `layers` in `fmt` (module docstring), nats per token; the weights are restored afterwards."""
        from precisionlab.ptq.structure import block_of

        blocks = {block_of(n) if n.startswith(f"{self.prefix}.") else None for n in layers}
        start = None if None in blocks else min(b for b in blocks if b is not None)
        with self.applied({n: fmt for n in layers}):
            return self._kl(start)

    def kl_of(self, assignment: Mapping[str, str]) -> float:
        """KL of the model with every layer of `assignment` in its format (the full forward)."""
        with self.applied(assignment):
            return self._kl(None)

    @contextmanager
    def applied(self, assignment: Mapping[str, str]) -> Any:
        """The layers' weights replaced by their values in their formats (models.weights.replace_weights: only
        their originals kept); the originals back on exit."""
        from precisionlab.models.weights import replace_weights

        modules = dict(self.model.named_modules())

        def values() -> Iterator[tuple[str, Any]]:
            for name, fmt in assignment.items():
                yield name, layer_values(modules[name].weight.detach().float().numpy(), fmt)[0]

        with replace_weights(self.model, values()):
            yield

    def proxy(self, units: Sequence[Any], formats: Sequence[str]) -> dict[tuple[str, str], float]:
        """The Fisher-weighted output error of every (unit, format) (module docstring), from one backward pass
        per calibration batch. A tied weight counts at every module that uses it (SmolLM2's embedding and head)."""
        from precisionlab import peers

        torch = peers.torch()
        named = dict(self.model.named_modules())
        by_weight = {id(named[layer].weight): (unit.name, layer) for unit in units for layer in unit.layers}
        watched = {name: by_weight[id(m.weight)] for name, m in named.items()
                   if name and getattr(m, "weight", None) is not None and id(m.weight) in by_weight}
        scores: dict[tuple[str, str], float] = {(u.name, f): 0.0 for u in units for f in formats}
        deltas: dict[tuple[str, str], Any] = {}
        embedding = self.model.get_input_embeddings()

        def delta(layer: str, fmt: str) -> Any:
            key = (layer, fmt)
            if key not in deltas:
                w = named[layer].weight.detach().float()
                try:
                    values, _ = layer_values(w.numpy(), fmt)
                except ValueError:
                    values = None
                deltas[key] = None if values is None else torch.from_numpy(values) - w
            return deltas[key]

        def grad_hook(unit: str, layer: str, module: Any, x: Any) -> Callable[[Any], None]:
            def hook(g: Any) -> None:
                g2 = g.detach().float().reshape(-1, g.shape[-1]) ** 2
                for fmt in formats:
                    d = delta(layer, fmt)
                    if d is None:
                        continue
                    if isinstance(module, torch.nn.Embedding):
                        dy = torch.nn.functional.embedding(x.reshape(-1), d)
                    else:
                        dy = x.reshape(-1, x.shape[-1]).float() @ d.t()
                    scores[(unit, fmt)] += 0.5 * float((g2 * dy * dy).sum(dtype=torch.float64))

            return hook

        def forward_hook(name: str | None) -> Callable[..., Any]:
            def hook(module: Any, args: tuple[Any, ...], output: Any) -> Any:
                out = output
                if module is embedding and not output.requires_grad:  # where the gradient starts
                    out = output.detach().requires_grad_(True)
                if name is not None and out.requires_grad:
                    unit, layer = watched[name]
                    out.register_hook(grad_hook(unit, layer, module, args[0].detach()))
                return out

            return hook

        embed_name = next(n for n, m in named.items() if m is embedding)
        handles = [m.register_forward_hook(forward_hook(n)) for n, m in named.items() if n in watched]
        if embed_name not in watched:
            handles.append(embedding.register_forward_hook(forward_hook(None)))
        try:
            with torch.enable_grad():
                for batch in self.batches:
                    logits = self.model(input_ids=batch, use_cache=False).logits[0].float()
                    loss = torch.nn.functional.cross_entropy(logits[:-1], batch[0, 1:], reduction="sum")
                    loss.backward()
        finally:
            for handle in handles:
                handle.remove()
        return scores


def _head(model: Any) -> Callable[[Any], Any] | None:
    """The final norm then the output head of a decoder (llama-like: base.norm, GPT-2: base.ln_f), or None."""
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    base = getattr(model, getattr(model, "base_model_prefix", ""), None)
    if head is None or base is None:
        return None
    norm = next((getattr(base, n) for n in ("norm", "final_layernorm", "ln_f") if getattr(base, n, None) is not None),
                None)
    if norm is None:
        return None
    return lambda hidden: head(norm(hidden))


def spearman(a: Sequence[float], b: Sequence[float]) -> float:
    """Spearman's rank correlation (ties get their average rank; NaN when either side is constant or n < 2)."""
    x, y = _ranks(np.asarray(a, dtype=np.float64)), _ranks(np.asarray(b, dtype=np.float64))
    if x.size != y.size:
        raise ValueError(f"{x.size} values against {y.size}")
    if x.size < 2 or np.all(x == x[0]) or np.all(y == y[0]):
        return math.nan
    return float(np.corrcoef(x, y)[0, 1])


def _ranks(values: np.ndarray) -> np.ndarray:
    order = np.argsort(values, kind="stable")
    ranks = np.empty(values.size, dtype=np.float64)
    ranks[order] = np.arange(1, values.size + 1, dtype=np.float64)
    for v in np.unique(values):  # ties: the average of their ranks
        where = values == v
        if where.sum() > 1:
            ranks[where] = ranks[where].mean()
    return ranks
