"""Emulate llama.cpp's CPU matmuls on a transformers model: each Linear's input quantized as llama.cpp
quantizes it for that Linear's GGML weight type (quant.ggml_act; the `+act=llamacpp` candidate part).

    types = linear_types(loaded, report, scheme)    Linear name -> GGML type its weight has in the export
    with llamacpp_activations(model, types, mins):  ...

The weight types are those `precisionlab export --to gguf` writes for the candidate with default options: the
candidate scheme's GGML type for its quantized layers; for every other Linear, a GGUF source's own type for
that tensor (SmolLM2's output head is its tied Q8_0 token embedding), else the narrowest of BF16 / F16 / F32
that holds the weight exactly (--float-dtype auto). Q4_1 / Q5_1 weights take Q8_1 activations, whose dot
product uses s = fp16(d * sum q) for the min term; that correction is added to the output where the layer's
block mins are known (`mins`: the candidate's own Q4_1 / Q5_1 layers), and left out elsewhere.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np

from precisionlab import peers


def linear_types(loaded: Any, report: Any = None, scheme: str | None = None) -> dict[str, str]:
    """Linear module name -> the GGML type of its weight in the export (module docstring)."""
    from precisionlab.quant.ggml_types import ggml_type, narrowest_float

    torch = peers.torch()
    model = loaded.model
    quantized = {id(p) for p in report.replaced} if report is not None else set()
    source = _source_types(loaded)
    out: dict[str, str] = {}
    param_names = {id(p): n for n, p in model.named_parameters()}
    for name, module in model.named_modules():
        if not isinstance(module, torch.nn.Linear):
            continue
        weight = module.weight
        if id(weight) in quantized and scheme is not None:
            out[name] = ggml_type(scheme)
        elif param_names.get(id(weight)) in source:
            out[name] = source[param_names[id(weight)]]
        else:
            out[name] = narrowest_float(weight.detach().float().numpy())
    return out


def _source_types(loaded: Any) -> dict[str, str]:
    """Parameter name -> GGML type of a GGUF source's tensor (quantized types only; {} for other sources)."""
    if loaded.form != "gguf":
        return {}
    import gguf

    from precisionlab.interop.writers.gguf_meta import architecture

    config = loaded.model.config
    arch = architecture(config.to_dict())
    names = gguf.get_tensor_name_map(getattr(gguf.MODEL_ARCH, arch.gguf.upper()), int(config.num_hidden_layers))
    types = {t.name: t.tensor_type.name for t in gguf.GGUFReader(str(loaded.source)).tensors}
    out = {}
    for param, _ in loaded.model.named_parameters():
        target = names.get_name(param, try_suffixes=(".weight", ".bias"))
        if target in types and types[target] not in ("F32", "F16", "BF16"):
            out[param] = types[target]
    return out


def block_mins(report: Any, model: Any, scheme: str | None, types: Mapping[str, str]) -> dict[str, np.ndarray]:
    """Linear name -> its weight's block mins (out, in / 32) for the candidate's own Q4_1 / Q5_1 layers: the
    scheme re-run on the original weight, as models.weights.quantize_weights ran it."""
    from precisionlab.quant import quantize

    if report is None or scheme is None:
        return {}
    modules = dict(model.named_modules())
    replaced = {id(p) for p in report.replaced}
    out = {}
    for name, kind in types.items():
        if kind not in ("Q4_1", "Q5_1"):
            continue
        weight = modules[name].weight
        if id(weight) not in replaced:
            continue
        q = quantize(report.original(weight).float().numpy(), scheme)
        if q.mins is not None:
            out[name] = np.asarray(q.mins, dtype=np.float32)
    return out


@contextlib.contextmanager
def llamacpp_activations(model: Any, types: Mapping[str, str],
                         mins: Mapping[str, np.ndarray] | None = None) -> Iterator[list[str]]:
    """Quantize each named Linear's input to its weight type's vec_dot_type while open; yields the names hooked."""
    from precisionlab.quant import ggml_act
    from precisionlab.quant.ggml_types import VEC_DOT_TYPE

    torch = peers.torch()
    modules = dict(model.named_modules())
    handles = []
    hooked = []
    mins = mins or {}

    def make(vec: str, block_min: np.ndarray | None) -> tuple[Any, Any]:
        pending: list[Any] = []

        def pre(_module: Any, args: tuple[Any, ...]) -> tuple[Any, ...]:
            x = args[0]
            flat = x.detach().reshape(-1, x.shape[-1]).float().cpu().numpy()
            if vec == "Q8_1":
                values, correction = ggml_act.q8_1(flat)
                if block_min is not None:
                    pending.append(correction.astype(np.float64) @ block_min.astype(np.float64).T)
            else:
                values = ggml_act.activations(flat, vec)
            new = torch.from_numpy(np.ascontiguousarray(values)).to(device=x.device, dtype=x.dtype).reshape(x.shape)
            return (new, *args[1:])

        def post(_module: Any, _args: tuple[Any, ...], output: Any) -> Any:
            if not pending:
                return output
            extra = torch.from_numpy(pending.pop().astype(np.float32)).to(output.dtype).reshape(output.shape)
            return output + extra

        return pre, post

    try:
        for name, kind in types.items():
            vec = VEC_DOT_TYPE[kind]
            if vec == "F32":
                continue
            pre, post = make(vec, mins.get(name))
            module = modules[name]
            handles.append(module.register_forward_pre_hook(pre))
            handles.append(module.register_forward_hook(post))
            hooked.append(name)
        yield hooked
    finally:
        for handle in handles:
            handle.remove()
