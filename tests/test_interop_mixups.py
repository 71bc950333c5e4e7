"""The auditor's corpus: correct files written with the toolkits' own code, and each mix-up injected into them.

Every correct file must pass every convention check; every detectable mix-up must be flagged by the
check named for it (`MIXUPS`); the mix-ups no check can see are listed with why (`UNDETECTABLE`).

Weights: all-MiniLM-L6-v2's first layer, real and unquantized, under Llama's names, with a config.json of
its dimensions (`interop_writers.MODEL_CONFIG`). Writers: compressed-tensors' own compressors and its
`quantize` / `pack_to_int32` (pack-quantized, int-quantized, float-quantized, nvfp4), bitsandbytes'
`quantize_4bit`, torch's fp8 casts, gguf's writer and quantizers, safetensors; GPTQ and AWQ packed as
AutoGPTQ's `pack` and AutoAWQ's `from_linear` lay them out (tests/interop_writers.py).
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import precisionlab as pl
from precisionlab.interop.checks import run_checks
from tests.interop_writers import (
    AWQ_ORDER,
    MODEL_CONFIG,
    autogptq_pack_zeros,
    minilm_as_llama,
    pack_lanes,
    quantize_minmax,
    quantize_symmetric,
)

torch = pytest.importorskip("torch")
st = pytest.importorskip("safetensors.torch")
pytest.importorskip("compressed_tensors")

Q, K, OUT = "model.layers.0.self_attn.q_proj", "model.layers.0.self_attn.k_proj", "model.layers.0.self_attn.o_proj"
UP, DOWN = "model.layers.0.mlp.up_proj", "model.layers.0.mlp.down_proj"


def weight(prefix: str) -> np.ndarray:
    return minilm_as_llama()[prefix + ".weight"]


def save(directory: Path, tensors: dict[str, Any], quantization_config: dict[str, Any] | None = None,
         gptq_config: dict[str, Any] | None = None, model: bool = True) -> Path:
    """model.safetensors (through safetensors.torch) and config.json (the model's dimensions and the
    quantization_config); AutoGPTQ's settings go to quantize_config.json."""
    directory.mkdir(parents=True, exist_ok=True)
    st.save_file({k: (torch.from_numpy(np.ascontiguousarray(v)) if isinstance(v, np.ndarray) else v.contiguous())
                  for k, v in tensors.items()}, str(directory / "model.safetensors"))
    config: dict[str, Any] = dict(MODEL_CONFIG) if model else {}
    if quantization_config is not None:
        config["quantization_config"] = quantization_config
    (directory / "config.json").write_text(json.dumps(config))
    if gptq_config is not None:
        (directory / "quantize_config.json").write_text(json.dumps(gptq_config))
    return directory


# --------------------------------------------------------------------------- compressed-tensors
def ct_args(**kw: Any) -> Any:
    from compressed_tensors.quantization import QuantizationArgs

    return QuantizationArgs(**kw)


INT4_G32 = {"num_bits": 4, "type": "int", "symmetric": True, "strategy": "group", "group_size": 32}
NVFP4 = {"num_bits": 4, "type": "float", "symmetric": True, "strategy": "tensor_group", "group_size": 16}
FP8_CHANNEL = {"num_bits": 8, "type": "float", "symmetric": True, "strategy": "channel"}


def ct_config(fmt: str, args: Any) -> dict[str, Any]:
    return {"quant_method": "compressed-tensors", "format": fmt,
            "config_groups": {"group_0": {"targets": ["Linear"], "weights": args.model_dump(mode="json")}}}


def ct_compress(fmt: str, args_kw: dict[str, Any], prefixes: tuple[str, ...]) -> tuple[dict[str, Any], Any]:
    from tests.test_interop_readers_toolkits import ct_case

    tensors: dict[str, Any] = {}
    args = None
    for prefix in prefixes:
        compressed, _, args = ct_case(fmt, args_kw, torch.from_numpy(weight(prefix)).bfloat16())
        tensors.update({f"{prefix}.{k}": v for k, v in compressed.items()})
    return tensors, args


def ct_int4_with_scale(prefix: str, divisor: float, store_divisor: float | None = None, clip: int = -8
                       ) -> dict[str, Any]:
    """pack-quantized int4 g32 written with compressed-tensors' own quantize and pack_to_int32, but with the
    scale amax / divisor (and stored as amax / store_divisor), codes clipped to clip .. 7."""
    from compressed_tensors.compressors.pack_quantized.helpers import pack_to_int32
    from compressed_tensors.quantization.lifecycle.forward import quantize

    w = torch.from_numpy(weight(prefix)).bfloat16()
    amax = w.float().reshape(w.shape[0], -1, 32).abs().amax(-1)
    scale = (amax / divisor).bfloat16()
    args = ct_args(**INT4_G32)
    codes = quantize(w, scale, torch.zeros_like(scale, dtype=torch.int8), args).to(torch.int8).clamp(clip, 7)
    stored = scale if store_divisor is None else (amax / store_divisor).bfloat16()
    return {f"{prefix}.weight_packed": pack_to_int32(codes, 4), f"{prefix}.weight_scale": stored,
            f"{prefix}.weight_shape": torch.tensor(list(w.shape), dtype=torch.int64)}


def ct_int4_ggml(prefix: str) -> dict[str, Any]:
    """GGML Q4_0's rule (d = the signed element of largest magnitude / -8, q = min(15, trunc(x / d + 8.5)) - 8,
    llama.cpp's quantize_row_q4_0_ref) packed into a pack-quantized file, its signed d as the bf16 scale."""
    from compressed_tensors.compressors.pack_quantized.helpers import pack_to_int32

    w = weight(prefix).astype(np.float32)
    x = w.reshape(w.shape[0], -1, 32)
    extreme = np.take_along_axis(x, np.abs(x).argmax(-1)[..., None], -1)
    d = torch.from_numpy((extreme / -8.0)[..., 0]).bfloat16()
    inv = np.where(d.float().numpy() != 0, 1.0 / d.float().numpy(), 0.0).astype(np.float32)
    q = np.minimum(15, np.trunc(x * inv[..., None] + np.float32(8.5))) - 8
    codes = torch.from_numpy(q.reshape(w.shape).astype(np.int8))
    return {f"{prefix}.weight_packed": pack_to_int32(codes, 4), f"{prefix}.weight_scale": d,
            f"{prefix}.weight_shape": torch.tensor(list(w.shape), dtype=torch.int64)}


def ct_transposed_codes(tensors: dict[str, Any], prefix: str) -> dict[str, Any]:
    from compressed_tensors.compressors.pack_quantized.helpers import pack_to_int32, unpack_from_int32

    shape = torch.Size(tensors[f"{prefix}.weight_shape"].tolist())
    codes = unpack_from_int32(tensors[f"{prefix}.weight_packed"], 4, shape)
    return {**tensors, f"{prefix}.weight_packed": pack_to_int32(codes.T.contiguous().to(torch.int8), 4)}


# ---------------------------------------------------------------- GPTQ and AWQ, as AutoGPTQ and AutoAWQ pack them
def gptq_parts(prefix: str, sym: bool, bits: int = 4, group: int = 64, version: str = "v1",
               divisor: float | None = None) -> dict[str, Any]:
    w_in_out = np.ascontiguousarray(weight(prefix).T)
    if divisor is not None:  # symmetric with scale amax / divisor, zero point 2^(b-1) (GPTQ sym's layout)
        x = w_in_out.astype(np.float64).reshape(-1, group, w_in_out.shape[1])
        s = (np.abs(x).max(axis=1) / divisor).astype(np.float16)
        half = 1 << (bits - 1)
        q = np.clip(np.rint(x / s.astype(np.float64)[:, None, :]) + half, 0, (1 << bits) - 1)
        q, z = q.reshape(w_in_out.shape).astype(np.int64), np.full(s.shape, half, dtype=np.int64)
    else:
        q, z, s = (quantize_symmetric if sym else quantize_minmax)(w_in_out, group, bits)
    zeros = autogptq_pack_zeros(z, bits) if version == "v1" else pack_lanes(z, bits, axis=1)
    return {f"{prefix}.qweight": pack_lanes(q, bits, axis=0), f"{prefix}.qzeros": zeros, f"{prefix}.scales": s,
            "_codes": q, "_zeros": z}


def gptq_file(directory: Path, parts: list[dict[str, Any]], sym: bool | None, bits: int = 4, group: int = 64,
              declared: str = "v1", config: bool = True) -> Path:
    """The parts with AutoGPTQ's quantize_config.json, its checkpoint_format the `declared` version."""
    tensors = {k: v for p in parts for k, v in p.items() if not k.startswith("_")}
    settings: dict[str, Any] = {"bits": bits, "group_size": group, "desc_act": False,
                                "checkpoint_format": "gptq_v2" if declared == "v2" else "gptq"}
    if sym is not None:
        settings["sym"] = sym
    return save(directory, tensors, gptq_config=settings if config else None)


def awq_parts(prefix: str, code_order: tuple[int, ...] | None = AWQ_ORDER,
              zero_order: tuple[int, ...] | None = AWQ_ORDER) -> dict[str, Any]:
    q, z, s = quantize_minmax(np.ascontiguousarray(weight(prefix).T), 64)
    return {f"{prefix}.qweight": pack_lanes(q, 4, axis=1, order=code_order),
            f"{prefix}.qzeros": pack_lanes(z, 4, axis=1, order=zero_order), f"{prefix}.scales": s}


AWQ_CONFIG = {"quant_method": "awq", "bits": 4, "group_size": 64, "zero_point": True, "version": "gemm"}


# --------------------------------------------------------------------------- fp8
def fp8_rows(prefix: str, fmt: Any, top: float) -> tuple[Any, Any]:
    x = torch.from_numpy(weight(prefix))
    scale = x.abs().amax(dim=1, keepdim=True) / top
    return (x / scale).to(fmt), scale


def fp8_tensor(prefix: str, fmt: Any, top: float) -> tuple[Any, Any]:
    x = torch.from_numpy(weight(prefix))
    scale = x.abs().amax() / top
    return (x / scale).to(fmt), scale.reshape(1)


def fp8_blocks(prefix: str) -> dict[str, Any]:
    """DeepSeek-V3's layout: e4m3 codes with one fp32 scale per 128 x 128 block, named weight_scale_inv."""
    x = torch.from_numpy(weight(prefix))
    rows, cols = x.shape
    blocks = x.reshape(rows // 128, 128, cols // 128, 128)
    scale = blocks.abs().amax(dim=(1, 3)) / 448.0
    codes = (blocks / scale[:, None, :, None]).reshape(rows, cols).to(torch.float8_e4m3fn)
    return {f"{prefix}.weight": codes, f"{prefix}.weight_scale_inv": scale}


# --------------------------------------------------------------------------- the corpus
CT_INT4 = ct_config("pack-quantized", ct_args(**INT4_G32))
Builder = Callable[[Path], Path]


def _ct(fmt: str, args_kw: dict[str, Any], prefixes: tuple[str, ...] = (Q, K)) -> Builder:
    def build(d: Path) -> Path:
        tensors, args = ct_compress(fmt, args_kw, prefixes)
        return save(d, tensors, ct_config(fmt, args))
    return build


def _ct_entry(fmt: str, args_kw: dict[str, Any], prefixes: tuple[str, ...]) -> tuple[Builder, tuple[str, ...]]:
    return _ct(fmt, args_kw, prefixes), prefixes


def _ct_edit(edit: Callable[[dict[str, Any]], dict[str, Any]], fmt: str = "pack-quantized",
             args_kw: dict[str, Any] = INT4_G32, prefixes: tuple[str, ...] = (Q, K)) -> Builder:
    def build(d: Path) -> Path:
        tensors, args = ct_compress(fmt, args_kw, prefixes)
        return save(d, edit(tensors), ct_config(fmt, args))
    return build


def _bnb(d: Path) -> Path:
    bnb = pytest.importorskip("bitsandbytes")
    tensors: dict[str, Any] = {}
    for prefix, nested in ((Q, False), (UP, True)):
        q, state = bnb.functional.quantize_4bit(torch.from_numpy(weight(prefix)), blocksize=64, quant_type="nf4",
                                                compress_statistics=nested)
        tensors[prefix + ".weight"] = q
        tensors.update({f"{prefix}.weight.{k}": v for k, v in state.as_dict(packed=True).items()})
    return save(d, tensors, {"quant_method": "bitsandbytes", "load_in_4bit": True, "bnb_4bit_quant_type": "nf4"})


def _gguf(d: Path) -> Path:
    gguf = pytest.importorskip("gguf")
    d.mkdir(parents=True, exist_ok=True)
    path = d / "model.gguf"
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_embedding_length(MODEL_CONFIG["hidden_size"])
    writer.add_feed_forward_length(MODEL_CONFIG["intermediate_size"])
    writer.add_head_count(MODEL_CONFIG["num_attention_heads"])
    writer.add_head_count_kv(MODEL_CONFIG["num_key_value_heads"])
    for name, prefix, kind in (("blk.0.attn_q.weight", Q, "Q4_0"), ("blk.0.attn_k.weight", K, "Q8_0"),
                               ("blk.0.ffn_up.weight", UP, "Q4_1")):
        qtype = gguf.GGMLQuantizationType[kind]
        writer.add_tensor(name, gguf.quants.quantize(weight(prefix), qtype), raw_dtype=qtype)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def _fp8_file(tensors: Callable[[], dict[str, Any]], method: str = "fp8") -> Builder:
    return lambda d: save(d, tensors(), {"quant_method": method})


def _rows(prefix: str, fmt: Any = None, top: float = 448.0, transpose: bool = False) -> dict[str, Any]:
    codes, scale = fp8_rows(prefix, fmt or torch.float8_e4m3fn, top)
    if transpose:
        codes = codes.view(torch.int8).T.contiguous().view(fmt or torch.float8_e4m3fn)
    return {f"{prefix}.weight": codes, f"{prefix}.weight_scale": scale}


def _normalised_fnuz(prefix: str, double: bool = True, zero_nan: bool = True) -> dict[str, Any]:
    """vLLM's normalize_e4m3fn_to_e4m3fnuz: OCP bits kept, 0x80 (fn's -0) set to 0, the scale doubled."""
    codes, scale = fp8_tensor(prefix, torch.float8_e4m3fn, 448.0)
    bits = codes.view(torch.int8).clone()
    bits[0, :3] = -128  # fn's -0, as a cast of tiny negatives writes it
    if zero_nan:
        bits[bits == -128] = 0
    return {f"{prefix}.weight": bits.view(torch.float8_e4m3fnuz), f"{prefix}.weight_scale": scale * (2 if double
                                                                                                    else 1)}


def _plain(transpose_down: bool) -> Builder:
    def build(d: Path) -> Path:
        tensors = {k: torch.from_numpy(v).bfloat16() for k, v in minilm_as_llama().items()}
        if transpose_down:
            tensors[DOWN + ".weight"] = tensors[DOWN + ".weight"].T.contiguous()
        return save(d, tensors)
    return build


def _gptq(label_parts: Callable[[], list[dict[str, Any]]], sym: bool | None, bits: int = 4, group: int = 64,
          declared: str = "v1", config: bool = True) -> Builder:
    return lambda d: gptq_file(d, label_parts(), sym, bits, group, declared, config)


def _view_scale(parts: dict[str, Any], key: str, dtype: Any) -> dict[str, Any]:
    value = parts[key]
    tensor = torch.from_numpy(value) if isinstance(value, np.ndarray) else value
    return {**parts, key: tensor.contiguous().view(dtype)}


def _transposed_qweight(parts: dict[str, Any], prefix: str) -> dict[str, Any]:
    return {**parts, f"{prefix}.qweight": pack_lanes(np.ascontiguousarray(parts["_codes"].T), 4, axis=0)}


CORRECT: dict[str, tuple[Builder, tuple[str, ...]]] = {
    "ct int4 sym g32": _ct_entry("pack-quantized", INT4_G32, (Q, K)),
    "ct int4 asym g64": _ct_entry("pack-quantized", {"num_bits": 4, "type": "int", "symmetric": False,
                                                     "strategy": "group", "group_size": 64}, (Q, K)),
    "ct int8 channel (int-quantized)": _ct_entry("int-quantized", {"num_bits": 8, "type": "int", "symmetric": True,
                                                                   "strategy": "channel"}, (Q, UP)),
    "ct fp8 channel": _ct_entry("float-quantized", FP8_CHANNEL, (Q, DOWN)),
    "ct nvfp4": _ct_entry("nvfp4-pack-quantized", NVFP4, (Q, K)),
    "gptq v1 sym 4-bit": (_gptq(lambda: [gptq_parts(Q, True), gptq_parts(UP, True)], True), (Q, UP)),
    "gptq v2 asym 4-bit": (_gptq(lambda: [gptq_parts(Q, False, version="v2"), gptq_parts(K, False, version="v2")],
                                 False, declared="v2"), (Q, K)),
    "gptq v1 asym 8-bit": (_gptq(lambda: [gptq_parts(Q, False, bits=8)], False, bits=8), (Q,)),
    "gptq v2 asym 2-bit": (_gptq(lambda: [gptq_parts(Q, False, bits=2, group=32, version="v2")], False, bits=2,
                                 group=32, declared="v2"), (Q,)),
    "gptq sym, no config": (_gptq(lambda: [gptq_parts(Q, True)], None, config=False), (Q,)),
    "awq gemm": (lambda d: save(d, {**awq_parts(Q), **awq_parts(UP)}, AWQ_CONFIG), (Q, UP)),
    "bnb nf4 (plain and nested)": (_bnb, (Q, UP)),
    "fp8 e4m3 per row": (_fp8_file(lambda: {**_rows(Q), **_rows(K)}), (Q, K)),
    "fp8 e4m3 128x128 blocks": (_fp8_file(lambda: {**fp8_blocks(Q), **fp8_blocks(DOWN)}), (Q, DOWN)),
    "fp8 e4m3fnuz per row": (_fp8_file(lambda: _rows(Q, torch.float8_e4m3fnuz, 240.0)), (Q,)),
    "fp8 OCP normalised to FNUZ (vLLM)": (_fp8_file(lambda: _normalised_fnuz(Q)), (Q,)),
    "gguf Q4_0 / Q8_0 / Q4_1": (_gguf, ("blk.0.attn_q", "blk.0.attn_k", "blk.0.ffn_up")),
    "bf16 weights": (_plain(False), (Q, K, OUT, UP, DOWN)),
}
"""label -> (builder, the tensors (prefixes) it holds): no check may flag any of them."""

MIXUPS: dict[str, tuple[Builder, str, str]] = {
    # int4 symmetric conventions
    "ct: codes +-7, scale amax/7, declared -8..7 amax/7.5": (
        lambda d: save(d, ct_int4_with_scale(Q, 7.0), CT_INT4), Q,
        "int_range"),
    "ct: codes +-7 (amax/7) stored with scale amax/7.5": (
        lambda d: save(d, ct_int4_with_scale(Q, 7.0, store_divisor=7.5), CT_INT4), Q, "int_range"),
    "ct: codes from amax/7.5 clipped to +-7 (narrow clip)": (
        lambda d: save(d, ct_int4_with_scale(Q, 7.5, clip=-7), CT_INT4), Q,
        "int_range"),
    "ct: amax/8 (full_neg) declared -8..7": (
        lambda d: save(d, ct_int4_with_scale(Q, 8.0), CT_INT4), Q,
        "int_range"),
    "ct: GGML Q4_0's signed-scale codes declared -8..7": (
        lambda d: save(d, ct_int4_ggml(Q), CT_INT4), Q, "int_range"),
    "gptq sym with amax/7": (_gptq(lambda: [gptq_parts(Q, True, divisor=7.0)], True), Q, "int_range"),
    # transposes
    "fp8 per-row codes stored transposed (square)": (_fp8_file(lambda: _rows(Q, transpose=True)), Q, "transposed"),
    "fp8 per-row codes stored transposed (k_proj 128x384)": (_fp8_file(lambda: _rows(K, transpose=True)), K,
                                                              "transposed"),
    "ct int4 weight_packed of the transposed codes": (_ct_edit(lambda t: ct_transposed_codes(t, Q)), Q, "transposed"),
    "gptq qweight of the transposed matrix": (
        _gptq(lambda: [_transposed_qweight(gptq_parts(Q, True), Q)], True), Q, "transposed"),
    "bf16 down_proj stored (in, out)": (_plain(True), DOWN, "transposed"),
    # scale dtype bits misread
    "gptq fp16 scales tagged BF16": (
        _gptq(lambda: [_view_scale(gptq_parts(Q, True), Q + ".scales", torch.bfloat16)], True), Q, "scale_vs_amax"),
    "awq fp16 scales tagged BF16": (
        lambda d: save(d, _view_scale(awq_parts(UP), UP + ".scales", torch.bfloat16), AWQ_CONFIG), UP,
        "scale_vs_amax"),
    "ct int4 bf16 scales tagged F16": (
        _ct_edit(lambda t: _view_scale(t, Q + ".weight_scale", torch.float16)), Q, "scale_vs_amax"),
    "ct fp8 channel bf16 scales tagged F16": (
        _ct_edit(lambda t: _view_scale(t, DOWN + ".weight_scale", torch.float16), "float-quantized", FP8_CHANNEL,
                 (DOWN,)), DOWN, "scale_vs_amax"),
    # fp8 encodings
    "fnuz bits tagged OCP": (_fp8_file(lambda: {Q + ".weight": _rows(Q, torch.float8_e4m3fnuz, 240.0)[Q + ".weight"]
                                                .view(torch.int8).view(torch.float8_e4m3fn),
                                                Q + ".weight_scale": _rows(Q, torch.float8_e4m3fnuz, 240.0)[
                                                    Q + ".weight_scale"]}), Q, "fp8_encoding"),
    "ocp bits relabelled fnuz without 0x80 -> 0": (_fp8_file(lambda: _normalised_fnuz(Q, zero_nan=False)), Q,
                                                   "fp8_encoding"),
    "ocp quantized for 240, stored as OCP": (_fp8_file(lambda: _rows(Q, top=240.0)), Q, "fp8_encoding"),
    # GPTQ zero points
    "gptq 2-bit v1 with a zero point of 0": (
        _gptq(lambda: [gptq_parts(DOWN, False, bits=2, group=128)], False, bits=2, group=128), DOWN,
        "gptq_zero_offset"),
    "gptq v1 sym declared v2": (_gptq(lambda: [gptq_parts(Q, True)], True, declared="v2"), Q, "gptq_zero_offset"),
    "gptq v2 asym declared v1": (_gptq(lambda: [gptq_parts(Q, False, version="v2")], False), Q, "gptq_zero_offset"),
    # lanes and global scales
    "awq codes re-packed sequentially, zero points in AWQ's order": (
        lambda d: save(d, awq_parts(Q, code_order=None), AWQ_CONFIG), Q, "nibble_order"),
    "nvfp4 global scale stored as its reciprocal": (
        _ct_edit(lambda t: {**t, Q + ".weight_global_scale": 1.0 / t[Q + ".weight_global_scale"]},
                 "nvfp4-pack-quantized", NVFP4, (Q,)), Q, "nvfp4_global_scale_direction"),
}
"""label -> (builder, the tensor injected, the check that must flag it)."""

UNDETECTABLE: dict[str, tuple[Builder, str, str]] = {
    "ct: codes from amax/7.5 stored with scale amax/7": (
        lambda d: save(d, ct_int4_with_scale(Q, 7.5, store_divisor=7.0), CT_INT4), Q,
        "the codes are exactly a correct -8..7 file's; only the scale is 7.5/7 too large, and a scale multiplied "
        "by a constant after quantizing leaves no trace in the codes"),
    "awq codes and zero points both re-packed sequentially": (
        lambda d: save(d, awq_parts(Q, code_order=None, zero_order=None), AWQ_CONFIG), Q,
        "codes and zero points stay in step, and LLM weights have no neighbour smoothness to show the lane order"),
}
"""label -> (builder, tensor, why no check can see it): each must stay unflagged, as measured."""


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("corpus")


def flags(path: Path, name: str) -> dict[str, str]:
    ckpt = pl.read_checkpoint(path)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return {r.name: r.message for r in run_checks(ckpt[name], ckpt) if r.flagged}


def folder(corpus: Path, label: str) -> Path:
    return corpus / "".join(c if c.isalnum() else "_" for c in label)


@pytest.mark.parametrize("label", list(CORRECT))
def test_correct_files_pass_every_check(corpus: Path, label: str) -> None:
    builder, prefixes = CORRECT[label]
    path = builder(folder(corpus, "ok " + label))
    for prefix in prefixes:
        assert flags(path, prefix + ".weight") == {}, (label, prefix)


@pytest.mark.parametrize("label", list(MIXUPS))
def test_each_mixup_is_flagged_by_its_check(corpus: Path, label: str) -> None:
    builder, prefix, check = MIXUPS[label]
    found = flags(builder(folder(corpus, label)), prefix + ".weight")
    assert check in found, (label, found)


@pytest.mark.parametrize("label", list(UNDETECTABLE))
def test_the_undetectable_mixups_stay_unflagged(corpus: Path, label: str) -> None:
    builder, prefix, _ = UNDETECTABLE[label]
    assert flags(builder(folder(corpus, label)), prefix + ".weight") == {}


def test_gptq_without_a_config_reads_symmetry_from_its_zero_points(corpus: Path) -> None:
    """AutoGPTQ's default is symmetric; a file without a config is read by its zero points instead."""
    asym = gptq_file(folder(corpus, "gptq asym no config"), [gptq_parts(Q, False)], None, config=False)
    sym = gptq_file(folder(corpus, "gptq sym no config"), [gptq_parts(Q, True)], None, config=False)
    distinct = np.unique(gptq_parts(Q, False)["_zeros"]).size
    assert distinct > 1
    a, s = pl.read_checkpoint(asym), pl.read_checkpoint(sym)
    assert a[Q + ".weight"].scheme == "uint4:g64" and a[Q + ".weight"].details["sym"] is False
    assert any(f"{distinct} distinct values" in n for n in a.notes), a.notes
    assert s[Q + ".weight"].scheme == "int4:g64:range=full" and s[Q + ".weight"].details["sym"] is True
    assert flags(asym, Q + ".weight") == {} and flags(sym, Q + ".weight") == {}


def test_the_flags_say_what_was_found(corpus: Path) -> None:
    def message(label: str) -> str:
        builder, prefix, check = MIXUPS[label]
        return flags(builder(folder(corpus, "msg " + label)), prefix + ".weight")[check]

    assert "follow range=narrow" in message("ct: codes +-7, scale amax/7, declared -8..7 amax/7.5")
    assert "follow range=full_neg" in message("ct: amax/8 (full_neg) declared -8..7")
    assert "GGML's signed scale" in message("ct: GGML Q4_0's signed-scale codes declared -8..7")
    assert "twice what was written" in message("fnuz bits tagged OCP")
    assert "fp16 scales stored under the BF16 tag" in message("gptq fp16 scales tagged BF16")
    assert "bf16 scales stored under the F16 tag" in message("ct int4 bf16 scales tagged F16")
    assert "stored transposed, (in, out)" in message("bf16 down_proj stored (in, out)")
    assert "read transposed" in message("gptq qweight of the transposed matrix")
    zeros = gptq_parts(DOWN, False, bits=2, group=128)["_zeros"]
    assert (zeros == 0).any()  # the injected mistake is there: AutoGPTQ's v1 writes a zero point of 0 as -1
    assert "spill" in message("gptq 2-bit v1 with a zero point of 0")
