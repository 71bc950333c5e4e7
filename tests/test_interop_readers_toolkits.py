"""Readers against the toolkits that install on a CPU: files produced by compressed-tensors and
bitsandbytes, dequantized by precisionlab and by the toolkit itself, compared bit for bit."""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import precisionlab as pl

torch = pytest.importorskip("torch")
st = pytest.importorskip("safetensors.torch")


def same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    a32, b32 = np.asarray(a, dtype=np.float32), np.asarray(b, dtype=np.float32)
    return a32.shape == b32.shape and np.array_equal(a32.view(np.uint32), b32.view(np.uint32))


def weights(rows: int = 64, cols: int = 256, dtype: Any = None, seed: int = 0) -> Any:
    g = torch.Generator().manual_seed(seed)
    w = torch.randn(rows, cols, generator=g) * 0.02
    w[min(3, rows - 1), 5] = 0.4  # an outlier
    w[min(7, rows - 1), :32] = 0.0  # an all-zero run
    return w.to(dtype or torch.bfloat16)


# --------------------------------------------------------------------------- compressed-tensors
def ct_case(fmt: str, args_kw: dict[str, Any], w: Any) -> tuple[dict[str, Any], Any, Any]:
    """(compressed state dict, the toolkit's decompressed weight, the scheme) for one Linear weight."""
    ct = pytest.importorskip("compressed_tensors")
    from compressed_tensors.compressors import BaseCompressor
    from compressed_tensors.quantization import QuantizationArgs, QuantizationScheme
    from compressed_tensors.quantization.utils import calculate_qparams, generate_gparam

    del ct
    args = QuantizationArgs(**args_kw)
    scheme = QuantizationScheme(targets=["Linear"], weights=args)
    x = w.float()
    global_scale = None
    if args.strategy in ("group", "tensor_group"):
        blocks = x.reshape(x.shape[0], -1, args.group_size)
        lo, hi = blocks.amin(-1), blocks.amax(-1)
        if args.strategy == "tensor_group":
            global_scale = generate_gparam(x.amin(), x.amax())
    elif args.strategy == "channel":
        lo, hi = x.amin(1, keepdim=True), x.amax(1, keepdim=True)
    else:
        lo, hi = x.amin().reshape(1), x.amax().reshape(1)
    scale, zero_point = calculate_qparams(lo, hi, args, global_scale=global_scale)
    state: dict[str, Any] = {"weight": w, "weight_scale": scale if global_scale is not None else scale.to(w.dtype),
                             "weight_zero_point": zero_point}
    if global_scale is not None:
        state["weight_global_scale"] = global_scale
    compressor = BaseCompressor.load_from_registry(fmt)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        compressed = compressor.compress(state, scheme)
        expected = compressor.decompress(dict(compressed), scheme)["weight"]
    return compressed, expected, args


def write_ct(directory: Path, fmt: str, prefix: str, compressed: dict[str, Any], args: Any) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    st.save_file({f"{prefix}.{k}": v.contiguous() for k, v in compressed.items()}, str(directory / "model.safetensors"))
    config = {"quantization_config": {"quant_method": "compressed-tensors", "format": fmt,
                                      "config_groups": {"group_0": {"targets": ["Linear"],
                                                                    "weights": args.model_dump(mode="json")}}}}
    (directory / "config.json").write_text(json.dumps(config))


CT_CASES = [
    ("pack-quantized", {"num_bits": 4, "type": "int", "symmetric": True, "strategy": "group", "group_size": 128},
     "compressed-tensors:pack-quantized", "int4:g128:scale=bf16:range=full"),
    ("pack-quantized", {"num_bits": 4, "type": "int", "symmetric": False, "strategy": "group", "group_size": 64},
     "compressed-tensors:pack-quantized", "int4:g64:asym:scale=bf16"),
    ("pack-quantized", {"num_bits": 8, "type": "int", "symmetric": True, "strategy": "channel"},
     "compressed-tensors:pack-quantized", "int8:row:scale=bf16:range=full"),
    ("pack-quantized", {"num_bits": 4, "type": "int", "symmetric": False, "strategy": "channel"},
     "compressed-tensors:pack-quantized", "int4:row:asym:scale=bf16"),
    ("pack-quantized", {"num_bits": 2, "type": "int", "symmetric": True, "strategy": "group", "group_size": 32},
     "compressed-tensors:pack-quantized", "int2:g32:scale=bf16:range=full"),
    ("pack-quantized", {"num_bits": 3, "type": "int", "symmetric": True, "strategy": "group", "group_size": 32},
     "compressed-tensors:pack-quantized", None),
    ("int-quantized", {"num_bits": 8, "type": "int", "symmetric": True, "strategy": "channel"},
     "compressed-tensors:int-quantized", "int8:row:scale=bf16:range=full"),
    ("int-quantized", {"num_bits": 8, "type": "int", "symmetric": False, "strategy": "group", "group_size": 64},
     "compressed-tensors:int-quantized", "int8:g64:asym:scale=bf16"),
    ("float-quantized", {"num_bits": 8, "type": "float", "symmetric": True, "strategy": "channel"},
     "compressed-tensors:float-quantized", "e4m3:row:scale=bf16"),
    ("float-quantized", {"num_bits": 8, "type": "float", "symmetric": True, "strategy": "tensor"},
     "compressed-tensors:float-quantized", "e4m3:scale=bf16"),
    ("nvfp4-pack-quantized", {"num_bits": 4, "type": "float", "symmetric": True, "strategy": "tensor_group",
                              "group_size": 16}, "compressed-tensors:nvfp4-pack-quantized", "nvfp4"),
]


@pytest.mark.parametrize(("fmt", "args_kw", "layout", "scheme"), CT_CASES,
                         ids=[f"{c[0]}-{c[1]['num_bits']}b-{c[1]['strategy']}-{'sym' if c[1]['symmetric'] else 'asym'}"
                              for c in CT_CASES])
def test_compressed_tensors_files_equal_the_toolkits_decompression(tmp_path: Path, fmt: str, args_kw: dict[str, Any],
                                                                   layout: str, scheme: str | None) -> None:
    w = weights()
    compressed, expected, args = ct_case(fmt, args_kw, w)
    write_ct(tmp_path, fmt, "model.layers.0.mlp.up_proj", compressed, args)
    ckpt = pl.read_checkpoint(tmp_path)
    t = ckpt["model.layers.0.mlp.up_proj.weight"]
    assert t.layout == layout, ckpt.notes
    assert t.scheme == (None if scheme is None else str(pl.parse_scheme(scheme)))
    assert t.shape == tuple(w.shape)
    assert t.stored_nbytes == sum(v.numel() * v.element_size() for v in compressed.values())
    assert same_bits(t.dequantize(), expected.float().numpy())


def test_compressed_tensors_fp32_scales_and_a_bf16_layernorm(tmp_path: Path) -> None:
    w = weights(dtype=torch.float32)
    compressed, expected, args = ct_case("pack-quantized", {"num_bits": 4, "type": "int", "symmetric": True,
                                                           "strategy": "group", "group_size": 32}, w)
    compressed["weight_scale"] = compressed["weight_scale"].float()
    write_ct(tmp_path, "pack-quantized", "l", compressed, args)
    ckpt = pl.read_checkpoint(tmp_path)
    assert ckpt["l.weight"].scheme == "int4:g32:scale=fp32:range=full"
    assert ckpt["l.weight"].details["int_range"] == "full"
    assert same_bits(ckpt["l.weight"].dequantize(), expected.float().numpy())


# --------------------------------------------------------------------------- bitsandbytes
def bnb_functional() -> Any:
    bnb = pytest.importorskip("bitsandbytes")
    functional = bnb.functional
    probe = torch.randn(4, 64)
    try:
        q, s = functional.quantize_4bit(probe, blocksize=64, quant_type="nf4")
        functional.dequantize_4bit(q, s)
    except Exception as exc:  # a CPU build without its native library
        pytest.skip(f"bitsandbytes' CPU path does not run here: {exc}")
    return functional


def bnb_save(path: Path, name: str, w: Any, blocksize: int, nested: bool, flat_oracle: bool = False) -> Any:
    """Quantize with bitsandbytes, save its state dict, return bitsandbytes' own dequantization.

    flat_oracle: dequantize the state as the flat tensor it quantized (blocks of `blocksize` run over
    the flattened weight). bitsandbytes 0.50's native CPU kernel indexes blocks per row
    (row * (cols // blocksize) + col // blocksize), which disagrees with its quantizer, its CUDA
    kernel and its default path when cols is not a multiple of the block size; the flat state goes
    through the same public dequantize_4bit with one row, where the two indexings agree."""
    functional = bnb_functional()
    q, state = functional.quantize_4bit(w, blocksize=blocksize, quant_type="nf4", compress_statistics=nested)
    tensors = {name: q, **{f"{name}.{k}": v for k, v in state.as_dict(packed=True).items()}}
    st.save_file(tensors, str(path))
    if flat_oracle:
        state.shape = torch.Size([w.numel()])
        return functional.dequantize_4bit(q, state).reshape(w.shape)
    return functional.dequantize_4bit(q, state)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
@pytest.mark.parametrize("nested", [False, True])
@pytest.mark.parametrize("blocksize", [64, 128])
def test_bnb_nf4_equals_bitsandbytes(tmp_path: Path, dtype: str, nested: bool, blocksize: int) -> None:
    w = weights(96, 384, dtype=getattr(torch, dtype), seed=4)
    expected = bnb_save(tmp_path / "m.safetensors", "model.layers.0.self_attn.q_proj.weight", w, blocksize, nested)
    t = pl.read_checkpoint(tmp_path / "m.safetensors")["model.layers.0.self_attn.q_proj.weight"]
    assert t.layout == "bnb:nf4" and t.shape == (96, 384)
    assert t.scheme == (None if nested else f"nf4:g{blocksize}:bnb")
    assert t.details["nested"] is nested
    assert same_bits(t.dequantize(), expected.float().numpy())


@pytest.mark.parametrize(("rows", "cols", "blocksize"), [(96, 320, 128), (5, 77, 64), (3, 1000, 256)])
def test_bnb_blocks_run_over_the_flattened_weight(tmp_path: Path, rows: int, cols: int, blocksize: int) -> None:
    w = weights(rows, cols, dtype=torch.float32, seed=5)
    expected = bnb_save(tmp_path / "m.safetensors", "w", w, blocksize, True, flat_oracle=True)
    t = pl.read_checkpoint(tmp_path / "m.safetensors")["w"]
    assert same_bits(t.dequantize(), expected.float().numpy())


def test_nf4_table_is_bitsandbytes_own() -> None:
    functional = bnb_functional()
    from precisionlab.interop.readers.bnb import BNB_NF4

    assert same_bits(BNB_NF4, functional.get_4bit_type("nf4", device="cpu").numpy())
