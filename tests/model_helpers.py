"""Real models for the tests, each loaded once per session (functools.cache), skipping cleanly without them.

    smollm2()          the whole SmolLM2-135M (from the converted-GGUF cache after the first load)
    smollm2_slice()    its first SLICE_BLOCKS blocks (and the shared embedding / head): cheap forwards
    minilm()           all-MiniLM-L6-v2 (22M parameters)
    tiny_llama(kv)     a random 2-block Llama (hidden 64, 4 heads, kv key/value heads), seeded

The GGUF conversion is cached where precisionlab caches it (PRECISIONLAB_CACHE or
~/.cache/precisionlab), so only the first session on a machine pays its ~20 s.

On a machine busier than its cores (load average above the CPU count), torch is set to one
thread when a model is first loaded: two threads contending with other work ran these tests
3-5x slower than one here; an idle machine keeps torch's default.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib.util
import os
from typing import Any

import pytest

SLICE_BLOCKS = 4


def require_peers(*extra: str) -> None:
    """Skip the calling test, or the calling module when called at its top level, unless torch,
    transformers (and `extra`) are installed."""
    for name in ("torch", "transformers", "safetensors", *extra):
        if importlib.util.find_spec(name) is None:
            pytest.skip(f"needs {name} (pip install torch==2.13.0 'precisionlab[models]')", allow_module_level=True)


def require_packaged(name: str) -> None:
    from precisionlab.models.packaged import PACKAGED, packaged_path

    if packaged_path(name) is None:
        pytest.skip(f"needs the packaged model {name}: {PACKAGED[name].install}")


@functools.cache
def _threads() -> None:
    import torch

    if hasattr(os, "getloadavg") and os.getloadavg()[0] > (os.cpu_count() or 1):
        torch.set_num_threads(1)


@functools.cache
def _smollm2() -> Any:
    from precisionlab.models import load_model

    _threads()
    return load_model("smollm2-135m")


def smollm2() -> Any:
    require_peers("gguf", "accelerate")
    require_packaged("smollm2-135m")
    return _smollm2()


@functools.cache
def _smollm2_slice() -> Any:
    import transformers

    full = _smollm2()
    config = type(full.model.config).from_dict(full.model.config.to_dict())
    config.num_hidden_layers = SLICE_BLOCKS
    model = transformers.AutoModelForCausalLM.from_config(config)
    state = {k: v.clone() for k, v in full.model.state_dict().items()
             if not k.startswith("model.layers.") or int(k.split(".")[2]) < SLICE_BLOCKS}
    missing, unexpected = model.load_state_dict(state, strict=False)
    assert not unexpected and all(k == "lm_head.weight" for k in missing), (missing, unexpected)
    model.tie_weights()
    model.eval().requires_grad_(False)
    return dataclasses.replace(full, model=model, fingerprint=f"{full.fingerprint}:first{SLICE_BLOCKS}",
                               name=f"{full.name}[:{SLICE_BLOCKS}]")


@functools.cache
def _gguf_reader(path: str) -> Any:
    import gguf

    return gguf.GGUFReader(path)


def smollm2_gguf() -> Any:
    """gguf's own reader of SmolLM2's file (parsing its metadata takes seconds: once per session)."""
    return _gguf_reader(smollm2().source)


def smollm2_slice() -> Any:
    """SmolLM2 cut to its first SLICE_BLOCKS blocks: its own tensors (quantizing it leaves smollm2() alone)."""
    smollm2()
    return _smollm2_slice()


@functools.cache
def _minilm() -> Any:
    from precisionlab.models import load_model

    _threads()
    return load_model("minilm-l6")


def minilm() -> Any:
    require_peers()
    require_packaged("minilm-l6")
    return _minilm()


def tiny_llama(num_key_value_heads: int) -> Any:
    """A random two-block Llama (vocabulary 128, hidden 64, 4 attention heads), seeded 0, in eval mode."""
    torch = pytest.importorskip("torch", reason="PTQ on a model needs torch")
    transformers = pytest.importorskip("transformers", reason="the tiny Llama is a transformers model")
    torch.manual_seed(0)
    config = transformers.LlamaConfig(vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                      num_attention_heads=4, num_key_value_heads=num_key_value_heads,
                                      max_position_embeddings=256)
    return transformers.LlamaForCausalLM(config).eval()
