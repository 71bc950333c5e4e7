"""Recognise each toolkit's layout among a safetensors checkpoint's entries and group its parts.

Anchors (one logical tensor each, named <prefix>.weight):

    <prefix>.qweight (+ qzeros, scales, g_idx)      GPTQ, or AWQ GEMM (by the config's quant_method,
                                                    else by shape: GPTQ packs qweight along the input
                                                    dimension, so qweight and scales have the same
                                                    column count; AWQ packs along the output)
    <prefix>.weight_packed int32 (+ weight_scale, weight_shape, weight_zero_point)
                                                    compressed-tensors pack-quantized
    <prefix>.weight_packed uint8 (+ weight_scale, weight_global_scale)
                                                    compressed-tensors nvfp4-pack-quantized
    <prefix>.weight uint8 + <prefix>.weight.quant_state.bitsandbytes__nf4 (+ .absmax, .quant_map,
        .nested_absmax, .nested_quant_map)          bitsandbytes NF4
    <prefix>.weight int8 + weight_scale, config quant_method compressed-tensors
                                                    compressed-tensors int-quantized
    <prefix>.weight FP8 (+ weight_scale or weight_scale_inv)
                                                    fp8 (compressed-tensors float-quantized when the
                                                    config says quant_method compressed-tensors)

Everything left is a plain float tensor ("float:F32", ...) or, for integers and unknown dtypes
outside any anchor, a tensor with layout "unknown" and a note.
"""

from __future__ import annotations

from typing import Any

from precisionlab.interop.checkpoint import UNKNOWN, CheckpointTensor, PartRef
from precisionlab.interop.readers import bnb, floats, fp8, nvfp4, packed_int
from precisionlab.interop.readers.common import FLOAT_DTYPES, FP8_FORMATS

GPTQ_PARTS = ("qweight", "qzeros", "scales", "g_idx")
CT_PARTS = ("weight_packed", "weight_scale", "weight_shape", "weight_zero_point", "weight_global_scale",
            "weight_g_idx")
BNB_PARTS = ("absmax", "quant_map", "nested_absmax", "nested_quant_map")


def quant_method(cfg: dict[str, Any]) -> str:
    """The toolkit a quantization config names: gptq, awq, compressed-tensors, fp8, bitsandbytes, or ''."""
    method = cfg.get("quant_method") or cfg.get("method")
    if isinstance(method, str):
        return method.lower()
    if "w_bit" in cfg or "q_group_size" in cfg:
        return "awq"  # AutoAWQ's quant_config.json
    if "bits" in cfg and "group_size" in cfg:
        return "gptq"  # AutoGPTQ's quantize_config.json
    return ""


def compressed_tensors_args(cfg: dict[str, Any]) -> dict[str, Any]:
    """The weights' quantization args of a compressed-tensors config when all its groups agree (else {})."""
    groups = cfg.get("config_groups")
    if not isinstance(groups, dict):
        return {}
    found: list[dict[str, Any]] = [g["weights"] for g in groups.values()
                                   if isinstance(g, dict) and isinstance(g.get("weights"), dict)]
    if found and all(f == found[0] for f in found):
        return dict(found[0])
    return {}


def _take(refs: dict[str, PartRef], used: set[str], prefix: str, roles: tuple[str, ...]) -> dict[str, PartRef]:
    out = {}
    for role in roles:
        key = f"{prefix}.{role}"
        if key in refs and key not in used:
            out[role] = refs[key]
            used.add(key)
    return out


def group(refs: dict[str, PartRef], cfg: dict[str, Any], notes: list[str]) -> list[CheckpointTensor]:
    """Logical tensors of a checkpoint, in the order of their first stored entry."""
    method = quant_method(cfg)
    used: set[str] = set()
    found: list[tuple[int, CheckpointTensor]] = []
    order = {name: i for i, name in enumerate(refs)}

    def add(anchor: str, tensor: CheckpointTensor, members: dict[str, PartRef]) -> None:
        first = min(order[k] for k in refs if refs[k] in members.values()) if members else order[anchor]
        found.append((first, tensor))

    for name, ref in refs.items():
        if name in used:
            continue
        if name.endswith(".qweight"):
            prefix = name[: -len(".qweight")]
            parts = _take(refs, used, prefix, GPTQ_PARTS)
            tensor = _gptq_or_awq(prefix + ".weight", parts, cfg, method, notes)
            add(name, tensor, parts)
        elif name.endswith(".weight_packed"):
            prefix = name[: -len(".weight_packed")]
            parts = _take(refs, used, prefix, CT_PARTS)
            if ref.stored_dtype == "U8" or "weight_global_scale" in parts:
                tensor = nvfp4.build_nvfp4(prefix + ".weight", parts, notes)
            else:
                tensor = packed_int.build_pack_quantized(prefix + ".weight", parts,
                                                         compressed_tensors_args(cfg), notes)
            add(name, tensor, parts)
        elif any(f"{name}{bnb.STATE_SUFFIX}{kind}" in refs for kind in ("nf4", "fp4")):
            kind = "nf4" if f"{name}{bnb.STATE_SUFFIX}nf4" in refs else "fp4"
            state_key = f"{name}{bnb.STATE_SUFFIX}{kind}"
            parts = {"weight": ref, **_take(refs, used, name, BNB_PARTS), "quant_state": refs[state_key]}
            used.update({name, state_key})
            add(name, bnb.build_bnb(name, parts, "quant_state", notes), parts)
        elif ref.stored_dtype == "I8" and method == "compressed-tensors" and name.endswith(".weight") \
                and f"{name}_scale" in refs:
            prefix = name[: -len(".weight")]
            parts = {"weight": ref, **_take(refs, used, prefix, ("weight_scale", "weight_zero_point"))}
            used.add(name)
            add(name, packed_int.build_int_quantized(name, parts, notes), parts)
        elif ref.stored_dtype in FP8_FORMATS and not name.endswith(("_scale", "_scale_inv")):
            prefix = name[: -len(".weight")] if name.endswith(".weight") else name
            parts = {"weight": ref}
            used.add(name)
            if name.endswith(".weight"):
                parts.update(_take(refs, used, prefix, ("weight_scale", "weight_scale_inv")))
            if method == "compressed-tensors":
                scale = parts.get("weight_scale")
                out_dtype = FLOAT_DTYPES.get(scale.stored_dtype) if scale is not None else None
                tensor = fp8.build_fp8(name, parts, cfg, notes, "compressed-tensors:float-quantized", out_dtype)
            else:
                tensor = fp8.build_fp8(name, parts, cfg, notes, "fp8", None)
            add(name, tensor, parts)
    for name, ref in refs.items():
        if name in used:
            continue
        used.add(name)
        if ref.stored_dtype in FLOAT_DTYPES:
            found.append((order[name], floats.build_float(name, ref)))
        else:
            why = (f"{ref.stored_dtype} tensor outside any quantized layout this reader knows"
                   if ref.stored_dtype in ("I64", "I32", "I16", "I8", "U64", "U32", "U16", "U8", "BOOL")
                   else f"dtype {ref.stored_dtype} outside any quantized layout this reader knows")
            notes.append(f"{name}: {why}")
            found.append((order[name], CheckpointTensor(name, UNKNOWN, None, ref.shape, ref.file, {"data": ref}, None,
                                                        {"dtype": ref.stored_dtype}, why)))
    found.sort(key=lambda item: item[0])
    return [t for _, t in found]


def _gptq_or_awq(name: str, parts: dict[str, PartRef], cfg: dict[str, Any], method: str, notes: list[str]
                 ) -> CheckpointTensor:
    if method == "awq":
        return packed_int.build_awq(name, parts, cfg, notes)
    if method == "gptq":
        return packed_int.build_gptq(name, parts, cfg, notes)
    qw, sc = parts.get("qweight"), parts.get("scales")
    if "g_idx" not in parts and qw is not None and sc is not None and len(qw.shape) == 2 and len(sc.shape) == 2 \
            and sc.shape[1] == qw.shape[1] * 8:
        notes.append(f"{name}: no quantization config; qweight packs the output dimension, read as AWQ GEMM")
        return packed_int.build_awq(name, parts, cfg, notes)
    if method not in ("",):
        notes.append(f"{name}: quant_method {method!r} with GPTQ-style parts; read as GPTQ")
    elif qw is not None:
        notes.append(f"{name}: no quantization config; read as GPTQ (checkpoint_format gptq, v1)")
    return packed_int.build_gptq(name, parts, cfg, notes)
