"""The profile lab's model parts on SmolLM2: its block-0 linears as cases and Amdahl on its decode step."""

from __future__ import annotations

import math

from tests.model_helpers import require_peers, smollm2_slice

require_peers("gguf", "accelerate")

from precisionlab.labs import profile as lab  # noqa: E402


def test_model_cases_are_the_first_blocks_linears() -> None:
    loaded = smollm2_slice()
    config = loaded.model.config
    head = config.hidden_size // config.num_attention_heads
    kv = config.num_key_value_heads * head
    shapes = {c.name: tuple(c.weight.shape) for c in lab.model_cases(loaded.model)}
    h, i = config.hidden_size, config.intermediate_size
    assert shapes == {"q_proj": (h, h), "k_proj": (kv, h), "v_proj": (kv, h), "o_proj": (h, h),
                      "gate_proj": (i, h), "up_proj": (i, h), "down_proj": (h, i)}
    assert list(shapes) == list(lab.LAYER_ORDER)


def test_decode_amdahl() -> None:
    loaded = smollm2_slice()
    d = lab.decode_amdahl(loaded, steps=2, prompt_tokens=8, threads=1, rounds=1)
    assert 0 < d["block_linear_share"] < d["linear_share"] < 1  # the output head is a linear outside the blocks
    assert d["swapped_layers"] == 7 * 4 and d["steps"] == 2
    s, k = d["block_linear_share"], d["int4_linear_speedup"]
    assert math.isclose(d["int4_amdahl_speedup"], 1 / ((1 - s) + s / k))
    assert d["step_ms"] > 0 and d["int4_step_ms"] > 0 and d["int4_rest_speedup"] > 0
