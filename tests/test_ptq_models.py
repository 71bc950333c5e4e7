"""PTQ on SmolLM2-135M with real calibration activations (the calibration part of the built-in data only),
judged per layer against round-to-nearest on the calibration activations and on held-out ones.

Schemes are chosen off SmolLM2's own grid: its weights are already on llama.cpp's Q4_1 grid (4-bit
asymmetric, groups of 32), which makes re-quantizing with that grid lossless. int4:g128 symmetric is
not that grid (other group boundaries, a symmetric range without a zero point), nor is per-tensor int8.

The layer tests run on blocks of the model's first four (tests/model_helpers.smollm2_slice, the same
tensors: block k's inputs do not depend on later blocks); KIVI's KL needs the whole model.
benchmarks/bench_ptq.py runs GPTQ on all 210 linears.
"""

from __future__ import annotations

import copy
import warnings

import numpy as np
import pytest

from tests.model_helpers import SLICE_BLOCKS, require_peers, smollm2, smollm2_slice

require_peers("gguf", "accelerate")
torch = pytest.importorskip("torch")

from precisionlab.eval.data import builtin_split, calibration_documents, ppl_documents  # noqa: E402
from precisionlab.ptq import CalibrationWarning, capture, run_method, token_batches  # noqa: E402
from precisionlab.ptq.gptq import gptq_quantize  # noqa: E402
from precisionlab.ptq.structure import fold_scales  # noqa: E402
from tests.test_ptq_gptq import reference_gptq, signed_codes  # noqa: E402

CALIBRATION_TOKENS = 1024
EVALUATION_TOKENS = 1024
BLOCKS = [0, SLICE_BLOCKS - 1]  # every linear of the first and last block of the slice
FEW_BLOCKS = [1]  # the slower searches (AWQ's grid, SmoothQuant, LLM.int8())


@pytest.fixture(scope="module")
def loaded():  # type: ignore[no-untyped-def]
    return smollm2_slice()


@pytest.fixture(scope="module")
def data(loaded):  # type: ignore[no-untyped-def]
    split = builtin_split()
    cal = token_batches(loaded.tokenizer, calibration_documents(split), CALIBRATION_TOKENS, 512)
    ev = token_batches(loaded.tokenizer, ppl_documents(split, 40), EVALUATION_TOKENS, 512)
    return cal, ev


def run(loaded, data, method: str, scheme: str | None, blocks: list[int] = FEW_BLOCKS,  # type: ignore[no-untyped-def]
        **options):
    cal, ev = data
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", CalibrationWarning)  # down_proj has 1536 inputs, more than the tokens
        return run_method(loaded.model, method, scheme, cal, evaluation=ev, blocks=blocks, options=options or None)


@pytest.fixture(scope="module")
def gptq(loaded, data):  # type: ignore[no-untyped-def]
    return run(loaded, data, "gptq", "int4:g128", BLOCKS)


def test_gptq_beats_rtn_on_every_linear(gptq) -> None:  # type: ignore[no-untyped-def]
    assert len(gptq.layers) == 7 * len(BLOCKS)
    for r in gptq.layers:
        assert r.status == "ok" and r.details["damping"] == 0.01
        assert r.output_error < r.rtn_output_error, r.name
    f = gptq.findings()
    assert f["ptq.gptq.layers_improved"] == f["ptq.gptq.layers_total"]
    assert f["ptq.gptq.output_error_ratio"] < 0.5
    # held out: still better on average (down_proj, 1536 wide, over-fits 2048 tokens the most)
    assert f["ptq.gptq.eval_output_error_ratio"] < 0.9


def test_gptq_on_smollm2s_own_q4_1_grid_is_exact_and_beats_rtn_off_it(loaded, data) -> None:  # type: ignore[no-untyped-def]
    """SmolLM2's weights are on the Q4_1 grid: GPTQ on gguf_q4_1 and uint4:g32:min=fp16 gives back every weight,
    as RTN does (before the grid kept min= and the gguf rules, block 0 came out at relative output error
    300-600000); on Q5_1, which is not that grid, it is below RTN on every layer."""
    for scheme in ("gguf_q4_1", "uint4:g32:min=fp16"):
        result = run(loaded, data, "gptq", scheme, [0])
        for r in result.layers:
            assert r.status == "ok" and r.output_error == 0 == r.rtn_output_error, (scheme, r.name)
    q5 = run(loaded, data, "gptq", "gguf_q5_1", [0])
    assert all(r.output_error < r.rtn_output_error and r.eval_output_error < r.rtn_eval_output_error
               for r in q5.layers)


def test_gptq_equals_the_direct_reference_on_a_real_layer(loaded, data) -> None:  # type: ignore[no-untyped-def]
    name = "model.layers.0.self_attn.k_proj"
    cap = capture(loaded.model, [name], data[0][:2])
    w = dict(loaded.model.named_modules())[name].weight.detach().numpy()
    h = cap.stats[name].hessian()
    result = gptq_quantize(w, h, "int4:g128", dtype="float64", act_order=False, static_groups=False)
    codes, scales = reference_gptq(w, h, 128)
    assert result.quantized is not None
    assert np.array_equal(signed_codes(result.quantized.codes, 4, w.shape[1]), codes)
    assert np.array_equal(result.quantized.scales.astype(np.float64), scales)


def test_awq_is_never_above_rtn_and_folding_alone_changes_nothing(loaded, data) -> None:  # type: ignore[no-untyped-def]
    result = run(loaded, data, "awq", "int4:g128", module_tokens=256)
    for r in result.layers:
        assert r.output_error <= r.rtn_output_error, r.name
    assert result.findings()["ptq.awq.output_error_ratio"] < 0.9
    assert any(r.details["alpha"] is not None for r in result.layers)
    model = copy.deepcopy(loaded.model)
    for group, scales in result.folds:
        fold_scales(model, group, scales)
    ids = data[1][0][:, :256]
    with torch.no_grad():
        before = loaded.model(ids).logits.double()
        after = model(ids).logits.double()
    assert float((after - before).norm() / before.norm()) < 1e-5


def test_smoothquant_reduces_per_tensor_int8_w8a8_error(loaded, data) -> None:  # type: ignore[no-untyped-def]
    result = run(loaded, data, "smoothquant", "int8", act_scheme="int8")
    smoothed = [r for r in result.layers if r.details["smoothed"]]
    assert len(smoothed) == 5 * len(FEW_BLOCKS)  # q/k/v and gate/up: the layers after a norm
    for r in smoothed:
        assert r.output_error < r.rtn_output_error, r.name
        assert r.eval_output_error < r.rtn_eval_output_error, r.name


def test_llm_int8_keeps_outlier_columns_in_fp16(loaded, data) -> None:  # type: ignore[no-untyped-def]
    result = run(loaded, data, "llm_int8", None, samples=256)
    with_outliers = [r for r in result.layers if r.details["outlier_columns"] > 0]
    assert with_outliers  # SmolLM2's down_proj inputs exceed 6.0
    for r in with_outliers:
        assert r.output_error < r.rtn_output_error, r.name  # the decomposition beats plain int8
        assert r.output_error < 0.05
    for r in result.layers:
        if not r.details["outlier_columns"]:
            assert r.output_error == r.rtn_output_error  # no outliers: it is plain int8


def test_llm_int8_takes_bitsandbytes_token_scale_as_an_option(loaded, data) -> None:  # type: ignore[no-untyped-def]
    # token_absmax='entries' (bitsandbytes' rule: only the entries >= threshold leave a token's absmax)
    # reaches every layer's product: where an outlier column also holds entries below the threshold,
    # the token scale is coarser than the paper's, so the error differs; with no outlier column the
    # two rules are the same plain int8.
    columns = run(loaded, data, "llm_int8", None, blocks=[1], samples=128)
    entries = run(loaded, data, "llm_int8", None, blocks=[1], samples=128, token_absmax="entries")
    assert entries.options["token_absmax"] == "entries"
    pairs = list(zip(columns.layers, entries.layers, strict=True))
    assert any(a.output_error != b.output_error for a, b in pairs if a.details["outlier_columns"])
    for a, b in pairs:
        assert a.details["outlier_columns"] == b.details["outlier_columns"], a.name
        if not a.details["outlier_columns"]:
            assert a.output_error == b.output_error, a.name


@pytest.mark.slow  # about 20 s of a loaded 2-core machine; the suite stays within its time
def test_kivi_4bit_keeps_kl_on_long_text_within_the_declared_threshold() -> None:
    from precisionlab.ptq.kivi import KIVIConfig, kivi_kl

    full = smollm2()
    split = builtin_split()
    texts = token_batches(full.tokenizer, ppl_documents(split, 60), 3 * 320, 320)
    cal = token_batches(full.tokenizer, calibration_documents(split), 128, 128)
    max_kl = 0.05  # nats per decoded token, declared before the run
    four = run_method(full.model, "kivi", "int4", cal, evaluation=texts, blocks=[0, 29],
                      options={"prefill": 64, "max_kl": max_kl})
    f = four.findings()
    assert f["ptq.kivi.decoded_positions"] == 3 * (320 - 64 - 1)
    assert f["ptq.kivi.kl_verdict"] == "pass" and f["ptq.kivi.kl_ci_high"] < max_kl
    assert f["ptq.kivi.cache_bytes"] < 0.4 * f["ptq.kivi.fp16_cache_bytes"]
    assert [r.name for r in four.layers] == ["model.layers.0.self_attn", "model.layers.29.self_attn"]
    assert all(r.output_error < r.rtn_output_error for r in four.layers)  # per-channel keys beat per-token
    two = kivi_kl(full.model, texts[0], 64, KIVIConfig(bits=2))
    assert float(two.kl.mean()) > f["ptq.kivi.kl_mean"]
