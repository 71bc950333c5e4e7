"""Sequential GPTQ (option `sequential`): each stage calibrated on the inputs the model gives once the earlier
stages hold their quantized weights. The reference is built by hand from the one-capture path: quantize a
stage with sequential="off", write its weights into a copy of the model with `apply`, go on to the next stage
on that copy. Codes must be equal, and the model handed in must come back bit for bit."""

from __future__ import annotations

import copy
import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="PTQ on a model needs torch")
pytest.importorskip("transformers", reason="the tiny Llama is a transformers model")

from precisionlab.ptq import CalibrationWarning, apply_result, run_method  # noqa: E402
from precisionlab.ptq.structure import linear_names  # noqa: E402
from tests.model_helpers import tiny_llama  # noqa: E402

SCHEME = "int4:g32"
BLOCKS = [0, 1]
# module order of a Llama block, grouped by the input each set reads
LAYER_SETS = [("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"), ("self_attn.o_proj",),
              ("mlp.gate_proj", "mlp.up_proj"), ("mlp.down_proj",)]


@pytest.fixture(scope="module")
def tiny():  # type: ignore[no-untyped-def]
    return tiny_llama(4)


def batches(n: int = 4, length: int = 64, seed: int = 1) -> list:  # type: ignore[type-arg]
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(0, 128, (1, length), generator=g) for _ in range(n)]


def gptq(model, layers, sequential="off", evaluation=None):  # type: ignore[no-untyped-def]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", CalibrationWarning)
        return run_method(model, "gptq", SCHEME, batches(), evaluation=evaluation, layers=layers,
                          options={"sequential": sequential})


def by_hand(model, stages):  # type: ignore[no-untyped-def]
    """{layer: (codes, scales)} from quantizing each stage on a copy holding the earlier stages' weights."""
    work = copy.deepcopy(model)
    out = {}
    for stage in stages:
        result = gptq(work, stage)
        apply_result(work, result)
        out.update({n: (q.packed.copy(), q.scale_values.copy()) for n, q in result.quantized.items()})
    return out


def state(model):  # type: ignore[no-untyped-def]
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def assert_same_codes(result, expected) -> None:  # type: ignore[no-untyped-def]
    assert set(result.quantized) == set(expected)
    for n, q in result.quantized.items():
        codes, scales = expected[n]
        assert np.array_equal(q.packed, codes), n
        assert np.array_equal(q.scale_values, scales), n


@pytest.mark.parametrize("mode", ["block", "layer"])
def test_sequential_gptq_equals_stage_by_stage_by_hand(tiny, mode: str) -> None:
    names = linear_names(tiny, BLOCKS)
    if mode == "block":
        stages = [linear_names(tiny, [b]) for b in BLOCKS]
    else:
        stages = [[f"model.layers.{b}.{sub}" for sub in subset] for b in BLOCKS for subset in LAYER_SETS]
    assert sorted(n for s in stages for n in s) == sorted(names)
    before = state(tiny)
    result = gptq(tiny, names, mode)
    after = state(tiny)
    assert all(torch.equal(before[k], after[k]) for k in before), "the model was not restored"
    assert_same_codes(result, by_hand(tiny, stages))
    assert [r.name for r in result.layers] == names
    assert all(r.status == "ok" and r.output_error < r.rtn_output_error for r in result.layers)


def test_a_layer_outside_the_blocks_comes_last_on_the_quantized_blocks(tiny) -> None:
    """lm_head is no block's: it is calibrated after every block, on the model they leave quantized."""
    names = [*linear_names(tiny, [1]), "lm_head"]
    result = gptq(tiny, names, "block")
    assert_same_codes(result, by_hand(tiny, [linear_names(tiny, [1]), ["lm_head"]]))


def test_sequential_differs_from_one_capture_after_the_first_stage(tiny) -> None:
    """Block 0 sees the same inputs either way (nothing before it is quantized); block 1 does not."""
    names = linear_names(tiny, [0, 1])
    off, seq = gptq(tiny, names, "off"), gptq(tiny, names, "block")
    for n in linear_names(tiny, [0]):
        assert np.array_equal(off.quantized[n].packed, seq.quantized[n].packed), n
    assert any(not np.array_equal(off.quantized[n].packed, seq.quantized[n].packed) for n in linear_names(tiny, [1]))


def test_held_out_errors_are_measured_on_the_same_partly_quantized_model(tiny) -> None:
    names = linear_names(tiny, [0, 1])
    held_out = batches(2, 64, seed=7)
    result = gptq(tiny, names, "block", evaluation=held_out)
    assert result.evaluation_tokens == 128 and result.calibration_tokens == 256
    # by hand: block 1's held-out error on the model with block 0 quantized
    work = copy.deepcopy(tiny)
    apply_result(work, gptq(work, linear_names(tiny, [0])))
    expected = gptq(work, linear_names(tiny, [1]), evaluation=held_out)
    for r, e in zip(result.layers[7:], expected.layers, strict=True):
        assert r.name == e.name
        assert r.eval_output_error == pytest.approx(e.eval_output_error, rel=1e-12)
        assert r.rtn_eval_output_error == pytest.approx(e.rtn_eval_output_error, rel=1e-12)


def test_the_model_is_restored_when_a_stage_fails(tiny, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from precisionlab.ptq.runners import common

    model = copy.deepcopy(tiny)
    before = state(model)
    calls = []
    real = common.captures

    def failing(*args, **kwargs):  # type: ignore[no-untyped-def]
        calls.append(1)
        if len(calls) == 3:
            raise RuntimeError("stage failed (test)")
        return real(*args, **kwargs)

    monkeypatch.setattr(common, "captures", failing)
    with pytest.raises(RuntimeError, match="stage failed"):
        gptq(model, linear_names(model, [0, 1]), "layer")
    after = state(model)
    assert all(torch.equal(before[k], after[k]) for k in before)


def test_an_unknown_order_is_a_clear_error(tiny) -> None:
    with pytest.raises(ValueError, match="sequential must be one of off, block, layer"):
        run_method(tiny, "gptq", SCHEME, batches(1), blocks=[0], options={"sequential": "true"})
