"""Calibration: token batches from documents, and the inputs of a model's layers captured with
forward hooks (running statistics, never all activations).

    token_batches(tokenizer, documents, n_tokens, seq_len)
        the documents' text tokenized as one stream (an EOS token between documents), cut into
        consecutive windows of seq_len tokens, n_tokens in all (fewer, with a warning, when the
        text runs out). Give it the calibration part of the data only.
    capture(model, layer_names, batches, keep=..., modules=...)
        one forward pass per batch (`model(ids)`, no grad, no KV cache where the forward takes
        `use_cache`) with a pre-hook on each named
        nn.Linear feeding an `InputStatistics`; layers that receive the very same input tensor
        (q/k/v_proj, gate/up_proj) share one. The forward stops as soon as every hooked module
        has run (the rest of the model is not needed). `modules` names whole modules whose
        positional and keyword inputs are kept (up to `module_tokens` tokens) so that a method
        can run them again (AWQ's block objective). A batch may also be a `ModuleCall`, a
        recorded call of one block run again as it is (sequential GPTQ's block by block capture).
    block_calls(model, block, batches) / next_block_calls(calls, block)
        the calls of a transformer block over the batches, recorded from one forward pass each;
        and the calls of the block after it, made by running `block` on them and handing its
        output on in place of the hidden states (every other input unchanged, as a decoder
        stack passes the same mask and positions to each block).
"""

from __future__ import annotations

import contextlib
import sys
import warnings
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from precisionlab import peers
from precisionlab.ptq.activations import InputStatistics


class CalibrationWarning(UserWarning):
    """Calibration data too small for what is asked of it."""


class _Stop(Exception):
    """Raised inside a hook to end a forward pass once every hooked module has run."""


@dataclass
class Capture:
    """What `capture` collected."""

    stats: dict[str, InputStatistics]
    """Layer name -> statistics of its input (layers sharing an input share the object)."""
    shared_with: dict[str, str]
    """Layer name -> the first layer whose input it shares (itself when it shares none)."""
    module_inputs: dict[str, list[tuple[tuple[Any, ...], dict[str, Any]]]] = field(default_factory=dict)
    """Module name -> (args, kwargs) of each captured call."""
    tokens: int = 0


@dataclass
class ModuleCall:
    """One call of a module, recorded to be run again: `module(*args, **kwargs)`, `tokens` tokens."""

    module: Any
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    tokens: int

    def run(self) -> Any:
        """The module's hidden-state output (the first element when it returns a tuple)."""
        out = self.module(*self.args, **self.kwargs)
        return out[0] if isinstance(out, (tuple, list)) else out

    @staticmethod
    def of(module: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> ModuleCall:
        """A call whose hidden states are its first positional input, or its `hidden_states` keyword."""
        hidden = args[0] if args else kwargs["hidden_states"]
        return ModuleCall(module, args, kwargs, int(hidden.numel() // hidden.shape[-1]))

    def handed_on(self, module: Any, hidden: Any) -> ModuleCall:
        """The same call of `module` with `hidden` in place of the hidden states."""
        if self.args:
            return ModuleCall(module, (hidden, *self.args[1:]), self.kwargs, self.tokens)
        return ModuleCall(module, (), {**self.kwargs, "hidden_states": hidden}, self.tokens)


def block_calls(model: Any, block: str, batches: Iterable[Any]) -> list[ModuleCall]:
    """Every call of the module named `block` over the batches (one forward each, stopped at the block)."""
    cap = capture(model, [], batches, modules=[block], module_tokens=sys.maxsize)
    module = dict(model.named_modules())[block]
    return [ModuleCall.of(module, args, kwargs) for args, kwargs in cap.module_inputs[block]]


def next_block_calls(calls: Sequence[ModuleCall], block: Any) -> list[ModuleCall]:
    """The calls of `block` made from the outputs of `calls` (module docstring)."""
    torch = peers.torch("calibration")
    with torch.no_grad():
        return [call.handed_on(block, call.run()) for call in calls]


def token_batches(tokenizer: Any, documents: Iterable[Any], n_tokens: int, seq_len: int = 512) -> list[Any]:
    """Windows of token ids (LongTensor (1, L)) holding n_tokens tokens of the documents' text (module docstring)."""
    torch = peers.torch("calibration")
    if n_tokens < 1 or seq_len < 1:
        raise ValueError(f"n_tokens and seq_len must be >= 1, got {n_tokens} and {seq_len}")
    eos = getattr(tokenizer, "eos_token_id", None)
    stream: list[int] = []
    for doc in documents:
        text = doc.text if hasattr(doc, "text") else str(doc)
        stream.extend(tokenizer(text, add_special_tokens=False)["input_ids"])
        if eos is not None:
            stream.append(int(eos))
        if len(stream) >= n_tokens:
            break
    if len(stream) < n_tokens:
        warnings.warn(f"the calibration text holds {len(stream)} tokens, fewer than the {n_tokens} asked for",
                      CalibrationWarning, stacklevel=2)
    stream = stream[:n_tokens]
    if not stream:
        raise ValueError("the calibration documents hold no text")
    return [torch.tensor([stream[i : i + seq_len]], dtype=torch.long) for i in range(0, len(stream), seq_len)]


def capture(model: Any, layer_names: Sequence[str], batches: Iterable[Any], *, keep: int = 0,
            modules: Sequence[str] = (), module_tokens: int = 512, stop_early: bool = True,
            progress: Callable[[str, int, int], None] | None = None) -> Capture:
    """Statistics of the inputs of `layer_names` over `batches` (see the module docstring);
    `progress("calibration", done, total)` after each batch."""
    torch = peers.torch("calibration")
    named = dict(model.named_modules())
    missing = [n for n in (*layer_names, *modules) if n not in named]
    if missing:
        raise ValueError(f"the model has no module named {missing[0]!r}")
    for n in layer_names:
        if not isinstance(named[n], torch.nn.Linear):
            raise ValueError(f"{n} is a {type(named[n]).__name__}, not an nn.Linear")
    stats: dict[str, InputStatistics] = {}
    shared: dict[str, str] = {}
    inputs: dict[str, list[tuple[tuple[Any, ...], dict[str, Any]]]] = {m: [] for m in modules}
    module_seen: dict[str, int] = dict.fromkeys(modules, 0)
    fired: set[str] = set()
    expected = set(layer_names) | set(modules)
    seen_inputs: list[tuple[Any, str]] = []  # this batch: (tensor, first layer that got it); holds the tensors
    first_batch = [True]

    def linear_hook(name: str) -> Any:
        def hook(module: Any, args: tuple[Any, ...]) -> None:
            x = args[0]
            leader = next((first for t, first in seen_inputs if t is x), None)
            if first_batch[0]:
                if leader is None:
                    stats[name] = InputStatistics(int(x.shape[-1]), keep=keep)
                    shared[name] = name
                    stats[name].add(x)
                else:
                    stats[name] = stats[leader]
                    shared[name] = leader
            elif shared[name] == name:
                stats[name].add(x)
            elif leader != shared[name]:
                raise RuntimeError(f"{name} shared its input with {shared[name]} in the first batch but not later; "
                                   "capture these layers separately")
            if leader is None:
                seen_inputs.append((x, name))
            _fired(name)

        return hook

    def module_hook(name: str) -> Any:
        def hook(module: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
            x = args[0] if args else next(iter(kwargs.values()))
            count = int(x.numel() // x.shape[-1])
            if module_seen[name] < module_tokens:
                inputs[name].append((tuple(args), dict(kwargs)))
                module_seen[name] += count
            _fired(name)

        return hook

    def _fired(name: str) -> None:
        fired.add(name)
        if stop_early and fired >= expected:
            raise _Stop

    accepts = forward_parameters(model)
    handles = [named[n].register_forward_pre_hook(linear_hook(n)) for n in layer_names]
    handles += [named[m].register_forward_pre_hook(module_hook(m), with_kwargs=True) for m in modules]
    tokens = 0
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            batch_list = list(batches)
            for index, batch in enumerate(batch_list):
                fired.clear()
                seen_inputs.clear()
                with contextlib.suppress(_Stop):
                    run_batch(model, batch, accepts)
                tokens += _token_count(batch)
                first_batch[0] = False
                if progress is not None:
                    progress("calibration", index + 1, len(batch_list))
    finally:
        for h in handles:
            h.remove()
        seen_inputs.clear()
        model.train(was_training)
    not_reached = [n for n in layer_names if n not in stats]
    if not_reached:
        raise ValueError(f"no calibration input reached {not_reached[0]} (is it used in the forward pass?)")
    return Capture(stats, shared, inputs, tokens)


def run_batch(model: Any, batch: Any, accepts: set[str] | None = None) -> Any:
    """One forward pass, its output: a recorded call as it is, or the model on token ids (a dict may add a mask),
    without a KV cache where the forward takes `use_cache` (`accepts`: the forward's keywords, found when None)."""
    if isinstance(batch, ModuleCall):
        return batch.run()
    if accepts is None:
        accepts = forward_parameters(model)
    ids = batch["input_ids"] if isinstance(batch, dict) else batch
    mask = batch.get("attention_mask") if isinstance(batch, dict) else None
    extra: dict[str, Any] = {}
    if "use_cache" in accepts:
        extra["use_cache"] = False
    if mask is not None:
        extra["attention_mask"] = mask
    return model(ids, **extra)


def _token_count(batch: Any) -> int:
    if isinstance(batch, ModuleCall):
        return batch.tokens
    ids = batch["input_ids"] if isinstance(batch, dict) else batch
    return int(ids.shape[0] * ids.shape[1]) if ids.dim() >= 2 else int(ids.numel())


def forward_parameters(model: Any) -> set[str]:
    """The keyword names the model's forward accepts (every name when it takes **kwargs)."""
    import inspect

    try:
        params = inspect.signature(model.forward).parameters
    except (TypeError, ValueError):
        return set()
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return set(params) | {"use_cache", "attention_mask", "cache", "past_key_values"}
    return set(params)


def cache_keyword(model: Any) -> str:
    """The keyword that hands a KV cache to the model's forward (transformers 5: `cache`; 4.x: `past_key_values`)."""
    import inspect

    try:
        params = inspect.signature(model.forward).parameters
    except (TypeError, ValueError):
        return "past_key_values"
    return "cache" if "cache" in params else "past_key_values"


def check_tokens(stats: dict[str, InputStatistics]) -> None:
    """Warn (CalibrationWarning), once per distinct input, when the layers reading it saw fewer tokens than it
    has features: their Hessian is rank-deficient."""
    by_input: dict[int, list[str]] = {}
    for name, st in stats.items():
        by_input.setdefault(id(st), []).append(name)
    for names in by_input.values():
        st = stats[names[0]]
        if st.n < st.features:
            others = f" (and {', '.join(n.rsplit('.', 1)[-1] for n in names[1:])})" if names[1:] else ""
            warnings.warn(f"{names[0]}{others}: {st.n} calibration tokens for {st.features} inputs, so its Hessian "
                          f"has rank <= {st.n}; use at least {st.features} tokens (GPTQ leans on its damping until "
                          "then)", CalibrationWarning, stacklevel=3)
