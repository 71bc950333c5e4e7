"""Readers of the layouts whose toolkits do not install on a CPU (GPTQ, AWQ, FP8 block / FNUZ files),
on files built here to the cited layouts by a writer independent of the reader.

The writers follow the toolkits' own packing loops (AutoGPTQ qlinear_cuda_old.py `pack`, AutoAWQ
awq/modules/linear/gemm.py `from_linear`, DeepSeek-V3 / vLLM for FP8), one word lane at a time, and
the expected weights are computed with torch in the toolkits' dtype, from the codes the writer
started from (not from the file).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

import precisionlab as pl
from tests.interop_writers import AWQ_ORDER, pack_lanes, write

torch = pytest.importorskip("torch")
st = pytest.importorskip("safetensors.torch")


def same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    a32, b32 = np.asarray(a, dtype=np.float32), np.asarray(b, dtype=np.float32)
    return a32.shape == b32.shape and np.array_equal(a32.view(np.uint32), b32.view(np.uint32))


# --------------------------------------------------------------------------- test-side writers
def gptq_case(rng: np.random.Generator, inputs: int, out: int, group: int, bits: int, version: str, sym: bool,
              act_order: bool = False) -> dict[str, Any]:
    """Codes, zero points, fp16 scales and g_idx of one GPTQ Linear, and the expected (out, in) weight."""
    maxq = (1 << bits) - 1
    n_groups = -(-inputs // group)
    q = rng.integers(0, maxq + 1, size=(inputs, out))
    if sym:
        z = np.full((n_groups, out), (maxq + 1) // 2)
    elif version == "v1":
        z = rng.integers(1, maxq + 2, size=(n_groups, out))  # v1 holds z - 1 in `bits` bits: z in 1 .. 2^b
    else:
        z = rng.integers(0, maxq + 1, size=(n_groups, out))
    scales = (rng.uniform(0.5, 2.0, size=(n_groups, out)) * 0.01).astype(np.float16)
    g_idx = np.arange(inputs) // group
    if act_order:
        g_idx = rng.permutation(g_idx)
    stored_z = z - 1 if version == "v1" else z
    expected = (torch.from_numpy(scales)[torch.from_numpy(g_idx)]
                * (torch.from_numpy(q).to(torch.int16) - torch.from_numpy(z).to(torch.int16)[torch.from_numpy(g_idx)]))
    assert expected.dtype == torch.float16
    return {"qweight": pack_lanes(q, bits, axis=0), "qzeros": pack_lanes(stored_z, bits, axis=1),
            "scales": scales, "g_idx": g_idx.astype(np.int32), "expected": expected.float().numpy().T,
            "codes": q, "zeros": z}


# --------------------------------------------------------------------------- GPTQ
@pytest.mark.parametrize("bits", [4, 8, 2])
@pytest.mark.parametrize("version", ["v1", "v2"])
@pytest.mark.parametrize("sym", [True, False])
def test_gptq_round_trip(tmp_path: Path, bits: int, version: str, sym: bool) -> None:
    rng = np.random.default_rng(bits * 10 + (version == "v2") * 2 + sym)
    case = gptq_case(rng, 256, 64, 64, bits, version, sym)
    fmt = "gptq_v2" if version == "v2" else "gptq"
    prefix = "model.layers.0.self_attn.q_proj"
    write(tmp_path, {f"{prefix}.{k}": case[k] for k in ("qweight", "qzeros", "scales", "g_idx")},
          {"bits": bits, "group_size": 64, "desc_act": False, "sym": sym, "checkpoint_format": fmt},
          "quantize_config.json")
    t = pl.read_checkpoint(tmp_path)[f"{prefix}.weight"]
    assert t.layout == f"gptq:{version}" and t.shape == (64, 256)
    asym = f"uint{bits}:g64" if bits in (4, 8) else f"int{bits}:g64:asym"
    assert t.scheme == (f"int{bits}:g64:range=full" if sym else asym)
    assert same_bits(t.dequantize(), case["expected"])


def test_gptq_act_order_and_hf_config(tmp_path: Path) -> None:
    rng = np.random.default_rng(7)
    case = gptq_case(rng, 256, 32, 32, 4, "v2", False, act_order=True)
    write(tmp_path, {f"l.{k}": case[k] for k in ("qweight", "qzeros", "scales", "g_idx")},
          {"quantization_config": {"quant_method": "gptq", "bits": 4, "group_size": 32, "desc_act": True,
                                   "sym": False, "format": "gptq_v2"}})
    t = pl.read_checkpoint(tmp_path)["l.weight"]
    assert t.layout == "gptq:v2" and t.scheme is None and t.details["desc_act"] is True
    assert same_bits(t.dequantize(), case["expected"])


def test_gptq_without_config_is_v1_with_a_note(tmp_path: Path) -> None:
    rng = np.random.default_rng(8)
    case = gptq_case(rng, 128, 32, 128, 4, "v1", True)
    write(tmp_path, {f"l.{k}": case[k] for k in ("qweight", "qzeros", "scales")})
    ckpt = pl.read_checkpoint(tmp_path)
    t = ckpt["l.weight"]
    assert t.layout == "gptq:v1" and t.scheme == "int4:row:range=full"
    assert any("no quantization config" in n for n in ckpt.notes)
    assert same_bits(t.dequantize(), case["expected"])


def test_gptq_3bit_is_unknown_and_reading_goes_on(tmp_path: Path) -> None:
    write(tmp_path, {"l.qweight": np.zeros((12, 32), np.int32), "l.qzeros": np.zeros((1, 3), np.int32),
                     "l.scales": np.ones((1, 32), np.float16), "norm.weight": np.ones(4, np.float32)},
          {"bits": 3, "group_size": -1, "sym": True}, "quantize_config.json")
    ckpt = pl.read_checkpoint(tmp_path)
    assert ckpt["l.weight"].layout == "unknown" and "3-bit" in ckpt["l.weight"].note
    assert ckpt["norm.weight"].layout == "float:F32"


# --------------------------------------------------------------------------- AWQ
def awq_case(rng: np.random.Generator, inputs: int, out: int, group: int) -> dict[str, Any]:
    n_groups = inputs // group
    q = rng.integers(0, 16, size=(inputs, out))
    z = rng.integers(0, 16, size=(n_groups, out))
    scales = (rng.uniform(0.5, 2.0, size=(n_groups, out)) * 0.01).astype(np.float16)
    g = torch.arange(inputs) // group
    expected = ((torch.from_numpy(q).to(torch.int8) - torch.from_numpy(z).to(torch.int8)[g])
                * torch.from_numpy(scales)[g])
    assert expected.dtype == torch.float16
    return {"qweight": pack_lanes(q, 4, axis=1, order=AWQ_ORDER), "qzeros": pack_lanes(z, 4, axis=1, order=AWQ_ORDER),
            "scales": scales, "expected": expected.float().numpy().T, "codes": q, "zeros": z}


@pytest.mark.parametrize("config", [
    {"quant_method": "awq", "bits": 4, "group_size": 64, "zero_point": True, "version": "gemm"},
    {"w_bit": 4, "q_group_size": 64, "zero_point": True, "version": "GEMM"},
    None,
])
def test_awq_gemm_round_trip(tmp_path: Path, config: dict[str, Any] | None) -> None:
    case = awq_case(np.random.default_rng(9), 256, 64, 64)
    tensors = {f"model.layers.1.mlp.down_proj.{k}": case[k] for k in ("qweight", "qzeros", "scales")}
    if config is None:
        write(tmp_path, tensors)
    elif "quant_method" in config:
        write(tmp_path, tensors, {"quantization_config": config})
    else:
        write(tmp_path, tensors, config, "quant_config.json")
    t = pl.read_checkpoint(tmp_path)["model.layers.1.mlp.down_proj.weight"]
    assert t.layout == "awq:gemm" and t.scheme == "uint4:g64" and t.shape == (64, 256)
    assert same_bits(t.dequantize(), case["expected"])


def test_awq_gemv_is_unknown(tmp_path: Path) -> None:
    case = awq_case(np.random.default_rng(10), 64, 16, 64)
    write(tmp_path, {f"l.{k}": case[k] for k in ("qweight", "qzeros", "scales")},
          {"quantization_config": {"quant_method": "awq", "bits": 4, "group_size": 64, "version": "gemv"}})
    assert pl.read_checkpoint(tmp_path)["l.weight"].layout == "unknown"


# --------------------------------------------------------------------------- FP8
def fp8_block_case(rows: int, cols: int, fmt: Any, block: int = 128) -> dict[str, Any]:
    """DeepSeek-V3 style: per 128 x 128 block s = amax / max(fmt), codes = fmt(w / s), scale_inv = s."""
    g = torch.Generator().manual_seed(rows + cols)
    w = torch.randn(rows, cols, generator=g) * 0.02
    br, bc = -(-rows // block), -(-cols // block)
    padded = torch.zeros(br * block, bc * block)
    padded[:rows, :cols] = w
    blocks = padded.reshape(br, block, bc, block)
    s = blocks.abs().amax(dim=(1, 3)).clamp(min=1e-12) / torch.finfo(fmt).max
    q = (blocks / s[:, None, :, None]).reshape(br * block, bc * block)[:rows, :cols].to(fmt)
    grid = s.repeat_interleave(block, 0).repeat_interleave(block, 1)[:rows, :cols]
    return {"weight": q, "weight_scale_inv": s.float(), "expected": (q.float() * grid).numpy()}


@pytest.mark.parametrize(("rows", "cols"), [(256, 384), (200, 130)])
def test_fp8_block_scaled_deepseek_layout(tmp_path: Path, rows: int, cols: int) -> None:
    case = fp8_block_case(rows, cols, torch.float8_e4m3fn)
    write(tmp_path, {"model.layers.0.mlp.gate_proj.weight": case["weight"],
                     "model.layers.0.mlp.gate_proj.weight_scale_inv": case["weight_scale_inv"]},
          {"quantization_config": {"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic",
                                   "weight_block_size": [128, 128]}})
    t = pl.read_checkpoint(tmp_path)["model.layers.0.mlp.gate_proj.weight"]
    assert t.layout == "fp8:e4m3fn" and t.scheme == "e4m3:block128x128" and t.shape == (rows, cols)
    assert same_bits(t.dequantize(), case["expected"])


def test_fp8_per_tensor_and_per_channel(tmp_path: Path) -> None:
    g = torch.Generator().manual_seed(11)
    w = torch.randn(64, 96, generator=g) * 0.05
    s_tensor = w.abs().amax() / 448
    s_row = w.abs().amax(dim=1, keepdim=True) / 448
    qt, qr = (w / s_tensor).to(torch.float8_e4m3fn), (w / s_row).to(torch.float8_e4m3fn)
    write(tmp_path, {"a.weight": qt, "a.weight_scale": s_tensor.reshape(()), "b.weight": qr, "b.weight_scale": s_row,
                     "a.input_scale": torch.ones(1)})
    ckpt = pl.read_checkpoint(tmp_path)
    assert ckpt["a.weight"].scheme == "e4m3" and ckpt["b.weight"].scheme == "e4m3:row"
    assert same_bits(ckpt["a.weight"].dequantize(), (qt.float() * s_tensor).numpy())
    assert same_bits(ckpt["b.weight"].dequantize(), (qr.float() * s_row).numpy())
    assert ckpt["a.input_scale"].layout == "float:F32"


def normalize_to_fnuz(weight: Any, scale: Any) -> tuple[Any, Any]:
    """vLLM's normalize_e4m3fn_to_e4m3fnuz, written from its source: 0x80 (-0 in fn, NaN in fnuz) -> 0,
    the bits viewed as e4m3fnuz, the scale doubled."""
    as_int8 = weight.view(torch.int8).clone()
    as_int8[as_int8 == -128] = 0
    return as_int8.view(torch.float8_e4m3fnuz), scale * 2.0


def test_fnuz_checkpoint_normalized_from_ocp_dequantizes_to_the_same_weights(tmp_path: Path) -> None:
    case = fp8_block_case(128, 256, torch.float8_e4m3fn)
    q = case["weight"]
    q.view(torch.int8)[0, :4] = -128  # some -0 codes (fn), as torch writes for tiny negatives
    fn_values = q.float() * case["weight_scale_inv"].repeat_interleave(128, 0).repeat_interleave(128, 1)
    fnuz, scale = normalize_to_fnuz(q, case["weight_scale_inv"])
    write(tmp_path, {"w.weight": fnuz, "w.weight_scale_inv": scale})
    t = pl.read_checkpoint(tmp_path)["w.weight"]
    assert t.layout == "fp8:e4m3fnuz" and t.scheme == "e4m3fnuz:block128x128"
    expected = fnuz.float() * scale.repeat_interleave(128, 0).repeat_interleave(128, 1)
    assert same_bits(t.dequantize(), expected.numpy())
    assert np.array_equal(t.dequantize(), fn_values.numpy())  # -0 became +0: equal values, other bits


def test_fp8_scale_of_an_unknown_shape_is_unknown(tmp_path: Path) -> None:
    write(tmp_path, {"w.weight": torch.zeros(64, 64).to(torch.float8_e4m3fn), "w.weight_scale": torch.ones(3, 5)})
    ckpt = pl.read_checkpoint(tmp_path)
    assert ckpt["w.weight"].layout == "unknown" and "fits no" in ckpt["w.weight"].note
