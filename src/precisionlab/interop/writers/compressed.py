"""A QuantizedTensor as compressed-tensors stores it, through compressed-tensors' own compressors.

    args, fmt = ct_arguments(scheme)              # QuantizationArgs fields and the format, or ValueError
    tensors, fmt, args = compress(q)              # {"weight_packed": ..., "weight_scale": ..., ...} (torch)
    quantization_config(groups, ignore)           # the config.json block transformers and vLLM read

What maps (weights only; the layer's own dtype for everything left in float):

    precisionlab                          compressed-tensors
    int4 / int8 :g<N> | :row | (tensor)    pack-quantized, type int, symmetric, group / channel / tensor
      narrow (±7) and full / full_neg       codes within -2^(b-1) .. 2^(b-1) - 1, the range CT reads
    uint4 / uint8 (asym, zero point)       pack-quantized, symmetric false (group / channel): CT's signed codes
      int4 / int8 :asym                     and zero point are precisionlab's minus 2^(b-1) (uint), so
                                            (q - z) * s is the same number
    e4m3 (tensor, row, g<N>, block<R>x<C>)  float-quantized, type float, 8 bits (float8_e4m3fn)
    nvfp4                                   nvfp4-pack-quantized, group 16, e4m3 block scales, global scale

Refused, with the reason: a float block min (min=: GGUF's Q4_1), outlier rows, MX / ue8m0 scales, e5m2 and
other elements CT has no type for, a row whose length the group does not divide (precisionlab pads it).

Details where CT differs and what is done about it:

- Scale dtype. CT dequantizes in the scale's dtype (`_dequantize`: q.to(scale.dtype) * scale). With an fp16
  scale, q * s is rounded to fp16 (an fp16 scale times a 4-bit code needs up to 14 significant bits), which
  is not what precisionlab evaluated (fp32(q * s)). So every scale is stored as float32, holding its fp16
  / bf16 value exactly: 2 bytes more per scale than the evaluation counted, reported beside the bytes.
- NVFP4. CT divides the block scale by a global scale (scale / global_scale); precisionlab multiplies it by
  the tensor scale g (fp32(s_b * g)). The global scale written is fp32(1 / g); where fp32(s_b / fp32(1 / g))
  differs from fp32(s_b * g) for any block the tensor is refused (it would load to other values). CT 0.20.1
  also decompresses nvfp4 in bfloat16, which the final check below catches: nvfp4 is refused in practice.
- Every compressed tensor is decompressed by CT's own compressor before it is returned, and must equal
  `q.dequantize()` bit for bit; otherwise ValueError (never a file that loads to different values).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from precisionlab.quant.scheme import Granularity, Scheme, parse_scheme
from precisionlab.quant.tensor import QuantizedTensor

PACK, FLOAT, NVFP4 = "pack-quantized", "float-quantized", "nvfp4-pack-quantized"
INT_ELEMENTS = {"int4": 4, "int8": 8, "uint4": 4, "uint8": 8}


def ct_arguments(scheme: str | Scheme, in_features: int | None = None) -> tuple[dict[str, Any], str]:
    """(QuantizationArgs fields, compression format) for `scheme`; ValueError with the reason when
    compressed-tensors cannot hold it exactly (module docstring)."""
    s = parse_scheme(scheme)
    if s.preset == "nvfp4":
        if in_features is not None and in_features % 16:
            raise ValueError(f"nvfp4: a row of {in_features} is not whole groups of 16")
        return {"num_bits": 4, "type": "float", "symmetric": True, "strategy": "tensor_group", "group_size": 16},\
            NVFP4
    if s.preset is not None:
        raise ValueError(f"{s}: compressed-tensors has no format for this preset (int4 / int8, e4m3 and nvfp4 "
                         "map; GGUF presets go to --to gguf)")
    if s.outliers:
        raise ValueError(f"{s}: compressed-tensors keeps no fp16 outlier rows inside a quantized weight")
    if s.is_mx or s.scale not in ("fp16", "bf16", "fp32"):
        raise ValueError(f"{s}: compressed-tensors' int and fp8 formats take float scales, not {s.scale}")
    if s.axis not in (-1, 1):
        raise ValueError(f"{s}: compressed-tensors groups along a Linear's inputs (the last axis), not axis={s.axis}")
    if s.has_min:
        raise ValueError(f"{s}: compressed-tensors has an integer zero point, not a float block min (min=); "
                         "use asym (a zero point), or --to gguf for GGUF's Q4_1 / Q5_1")
    strategy = _strategy(s)
    if s.element in INT_ELEMENTS:
        fields: dict[str, Any] = {"num_bits": INT_ELEMENTS[s.element], "type": "int", "symmetric": s.symmetric,
                                  **strategy}
        if not s.symmetric and strategy["strategy"] not in ("group", "channel"):
            raise ValueError(f"{s}: compressed-tensors packs zero points per group or per channel only")
        if strategy["strategy"] == "block":
            raise ValueError(f"{s}: compressed-tensors' pack-quantized format has no 2-D blocks for integers")
        fmt = PACK
    elif s.element == "e4m3":
        fields = {"num_bits": 8, "type": "float", "symmetric": True, **strategy}
        fmt = FLOAT
    else:
        raise ValueError(f"{s}: compressed-tensors has no {s.element} weight type (int4 / int8, e4m3, nvfp4)")
    group = strategy.get("group_size")
    if group and in_features is not None and in_features % group:
        raise ValueError(f"{s}: a row of {in_features} is not whole groups of {group} (precisionlab pads the last "
                         "group; compressed-tensors does not)")
    return fields, fmt


def _strategy(s: Scheme) -> dict[str, Any]:
    g = s.granularity
    if g is Granularity.TENSOR:
        return {"strategy": "tensor"}
    if g is Granularity.ROW:
        return {"strategy": "channel"}
    if g is Granularity.GROUP:
        return {"strategy": "group", "group_size": s.group}
    if g is Granularity.BLOCK:
        return {"strategy": "block", "block_structure": [s.block_rows, s.group]}
    raise ValueError(f"{s}: compressed-tensors has no {g.value} weight granularity")


def _ct() -> Any:
    try:
        import compressed_tensors
    except ImportError:
        raise ModuleNotFoundError("writing compressed-tensors checkpoints needs the compressed-tensors package: "
                                  "pip install compressed-tensors") from None
    return compressed_tensors


def scheme_object(fields: dict[str, Any], fmt: str, targets: list[str]) -> Any:
    """A compressed_tensors QuantizationScheme (weights only) for `targets`."""
    _ct()
    from compressed_tensors.quantization import QuantizationArgs, QuantizationScheme

    return QuantizationScheme(targets=targets, weights=QuantizationArgs(**fields), format=fmt)


def compressor(fmt: str) -> Any:
    _ct()
    from compressed_tensors.compressors import BaseCompressor

    return BaseCompressor.get_value_from_registry(fmt)


def compress(q: QuantizedTensor) -> tuple[dict[str, Any], str, dict[str, Any]]:
    """(compressed tensors by local name, format, QuantizationArgs fields) of a 2-D weight; decompressed again by
    compressed-tensors and checked equal to q.dequantize() bit for bit (ValueError otherwise)."""
    import torch

    if len(q.shape) != 2:
        raise ValueError(f"compressed-tensors export writes 2-D Linear weights; got shape {q.shape}")
    fields, fmt = ct_arguments(q.scheme, q.shape[1])
    scheme = scheme_object(fields, fmt, ["Linear"])
    values = q.dequantize()
    state: dict[str, Any] = {"weight": torch.from_numpy(values.copy())}
    scales = np.asarray(q.scales, dtype=np.float32)
    if fields["strategy"] == "tensor":
        scales = scales.reshape(1)
    if fmt == NVFP4:
        g = np.float32(q.tensor_scale if q.tensor_scale is not None else 1.0)
        big = global_scale(scales, g)
        if big is None:
            raise ValueError(f"{q.scheme}: compressed-tensors divides the block scales by a global scale; no float32 "
                             f"global scale reproduces fp32(s_b * g) for every block of this tensor (g = {float(g)!r})")
        state["weight_global_scale"] = torch.tensor([big], dtype=torch.float32)
    state["weight_scale"] = torch.from_numpy(np.ascontiguousarray(scales))
    if q.zero_points is not None:  # CT's codes and zero points are signed: uint's are moved down by 2^(b-1)
        offset = 2 ** (fields["num_bits"] - 1) if q.scheme.element.startswith("uint") else 0
        zero = np.asarray(q.zero_points, dtype=np.float32).reshape(scales.shape) - offset
        low, high = -(2 ** (fields["num_bits"] - 1)), 2 ** (fields["num_bits"] - 1) - 1
        if zero.min() < low or zero.max() > high:
            raise ValueError(f"{q.scheme}: a zero point lies outside compressed-tensors' signed range {low}..{high}")
        state["weight_zero_point"] = torch.from_numpy(np.ascontiguousarray(zero)).to(torch.int8)
    kind = compressor(fmt)
    out = kind.compress(state, scheme)
    check = kind.decompress(dict(out), scheme)["weight"].to(torch.float32).numpy()
    if check.shape != values.shape or not np.array_equal(check.view(np.uint32), values.view(np.uint32)):
        bad = int(np.count_nonzero(check.reshape(-1).view(np.uint32) != values.reshape(-1).view(np.uint32))) \
            if check.shape == values.shape else -1
        raise ValueError(f"{q.scheme}: compressed-tensors' decompression of the written tensor differs from the "
                         f"evaluated values ({bad} elements); refused")
    return dict(out), fmt, fields


GLOBAL_SCALE_ULPS = 8
"""How many float32 neighbours of fp32(1 / g) on each side `global_scale` tries."""


def global_scale(block_scales: np.ndarray, g: np.float32) -> np.float32 | None:
    """A float32 G with fp32(s_b / G) == fp32(s_b * g) for every block scale s_b (CT's division reproducing
    precisionlab's product), searched among fp32(1 / g) and its GLOBAL_SCALE_ULPS neighbours; None when none
    does."""
    s = np.asarray(block_scales, dtype=np.float32)
    want = (s * g).astype(np.float32).view(np.uint32)
    base = int(np.array([np.float32(1) / g], dtype=np.float32).view(np.int32)[0])
    for step in sorted(range(-GLOBAL_SCALE_ULPS, GLOBAL_SCALE_ULPS + 1), key=abs):
        candidate = np.array([base + step], dtype=np.int32).view(np.float32)[0]
        if np.isfinite(candidate) and candidate > 0 and np.array_equal((s / candidate).view(np.uint32), want):
            return np.float32(candidate)
    return None


def stored_nbytes(tensors: dict[str, Any]) -> dict[str, int]:
    """Bytes of each compressed tensor as written (element size × count)."""
    return {name: int(t.numel() * t.element_size()) for name, t in tensors.items()}


def quantization_config(groups: list[tuple[dict[str, Any], str, list[str]]], ignore: list[str]) -> dict[str, Any]:
    """config.json's quantization_config: one config group per (args, format, targets), status compressed; the
    format is the groups' one, or mixed-precision when they differ (each group then names its own)."""
    _ct()
    from compressed_tensors.quantization import QuantizationConfig

    formats = {fmt for _, fmt, _ in groups}
    config_groups = {f"group_{i}": scheme_object(fields, fmt, targets)
                     for i, (fields, fmt, targets) in enumerate(groups)}
    config = QuantizationConfig(config_groups=config_groups, format=formats.pop() if len(formats) == 1
                                else "mixed-precision", quantization_status="compressed", ignore=sorted(ignore))
    return config.model_dump(exclude_none=False) if hasattr(config, "model_dump") else config.dict()
