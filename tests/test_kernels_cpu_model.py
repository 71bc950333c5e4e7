"""Kernels in a real model (eval.speed, models.kernels on SmolLM2): every swapped layer keeps the stated tolerance
on the activations it receives in the emulated model, and the speed measurement's table and findings."""

from __future__ import annotations

import math

import numpy as np
import pytest

from tests.model_helpers import require_peers, smollm2_slice

require_peers("gguf", "accelerate")

from precisionlab.eval import speed  # noqa: E402
from precisionlab.eval.candidates import parse_candidates  # noqa: E402
from precisionlab.ptq import speed as ptq_speed  # noqa: E402

SETTINGS = {"prompt_tokens": 16, "new_tokens": 3, "repetitions": 2}
INCLUDE = ["model.layers.0.*", "model.layers.1.*"]


def test_kernel_twins() -> None:
    assert speed.kernel_twins(["int8:row", "int4:g128:scale=bf16", "nvfp4", "int8:row+act=int8:row"]) == [
        "int8:row", "int8:row:scale=bf16", "int4:g128:scale=bf16", "nvfp4", "int8:row+act=int8:row"]
    assert speed.kernel_twins(["int8:row", "int8:row:scale=bf16"]) == ["int8:row", "int8:row:scale=bf16"]


@pytest.mark.parametrize(("settings", "words"), [({"repetitions": 1}, "repetitions"), ({"new_tokens": 0}, "new_tokens"),
                                                 ({"threads": 0}, "threads"), ({"prompt_tokens": 2.5}, "prompt")])
def test_bad_settings(settings: dict, words: str) -> None:
    values = {"prompt_tokens": 8, "new_tokens": 2, "repetitions": 2, "threads": 1, **settings}
    with pytest.raises(ValueError, match=words):
        speed.check_settings(**values)


@pytest.fixture(scope="module")
def measured() -> speed.SpeedRun:
    loaded = smollm2_slice()
    specs = ["int8:row", "int8:row:scale=bf16", "int4:g64:scale=bf16", "int8:row+act=int8:row", "nvfp4"]
    return speed.measure_speed(loaded, [speed.speed_candidate(c) for c in parse_candidates(specs)], INCLUDE,
                               **SETTINGS)


def test_kernel_path_within_the_stated_tolerance_of_the_emulation(measured: speed.SpeedRun) -> None:
    """On SmolLM2's own activations (the emulated model's inputs to each of its 14 swapped layers), every
    output lies within models.kernels.output_bound of the exact product with the emulated weight; the
    next-token distributions of the whole kernel path stay within 1e-2 nats of the emulation's."""
    for label in ("int8:row:scale=bf16", "int4:g64:scale=bf16"):
        row = measured.row(label)
        assert row.layers == 14 and not row.skipped
        assert 0 < row.bound_fraction <= 1.0
        assert 0 < row.kl_to_emulation < 1e-2


def test_rows_without_a_kernel_say_so(measured: speed.SpeedRun) -> None:
    for label, words in (("int8:row", "int8:row:scale=bf16 runs"), ("int8:row+act=int8:row", "run time"),
                         ("nvfp4", "e2m1")):
        row = measured.row(label)
        assert row.kernel is None and row.note.startswith(speed.NO_KERNEL) and words in row.note
        assert row.decode == [] and row.prefill == []


def test_findings_and_ratios(measured: speed.SpeedRun) -> None:
    part = speed.speed_part(measured)
    f = part.findings
    row = measured.row("int4:g64:scale=bf16")
    assert len(row.decode) == len(measured.reference_decode) == 2
    ratios = [a / b for a, b in zip(row.decode, measured.reference_decode, strict=True)]
    assert math.isclose(f["eval.speed.int4:g64:scale=bf16.decode_ratio"], float(np.median(ratios)))
    assert f["eval.speed.int4:g64:scale=bf16.decode_ratio_min"] == min(ratios)
    assert math.isclose(f["eval.speed.int4:g64:scale=bf16.decode_tokens_per_s"], float(np.median(row.decode)))
    assert f["eval.speed.int4:g64:scale=bf16.kernel"] == "torch _weight_int4pack_mm_for_cpu"
    assert f["eval.speed.int8:row.kernel"] == "none" and f["eval.speed.int8:row.runs_as"] == "int8:row:scale=bf16"
    assert "eval.speed.int8:row.decode_ratio" not in f
    assert f["eval.speed.threads"] == 1 and f["eval.speed.prompt_tokens"] == 16
    assert all(v > 0 for v in measured.reference_prefill)
    table = part.tables[0]
    assert table.key == "speed" and table.rows[0][0] == "reference"
    assert [r[0] for r in table.rows[1:]] == [r.label for r in measured.rows]


def test_a_ptq_result_runs_its_own_codes() -> None:
    """A PTQ method's stored codes are what the kernel runs, not a re-quantization of the model's weight: here
    the codes of every weight halved, whose emulation (installed by the result) the kernel path must match."""
    from precisionlab.models import kernels
    from precisionlab.ptq.run import PTQResult
    from precisionlab.quant import quantize

    loaded = smollm2_slice()
    modules = dict(loaded.model.named_modules())
    names = ["model.layers.0.mlp.down_proj", "model.layers.1.self_attn.q_proj"]
    scheme = "int4:g64:scale=bf16"
    stored = {n: quantize(modules[n].weight.detach() * 0.5, scheme) for n in names}
    swap = kernels.prepare_swap(loaded.model, scheme, quantized=stored)
    for n in names:
        assert np.array_equal(swap.swapped[n][3].packed.emulated, stored[n].dequantize())
    before = modules[names[0]].weight.detach().clone()
    result = PTQResult(method="rtn", scheme=scheme, layers=[], quantized=stored)
    run = speed.measure_speed(loaded, [ptq_speed.ptq_speed_candidate(result)], **SETTINGS)
    row = run.row("rtn:int4:g64:scale=bf16")
    assert row.layers == 2 and 0 < row.bound_fraction <= 1.0
    assert np.array_equal(modules[names[0]].weight.detach().numpy(), before.numpy())  # restored after the check


def test_methods_that_quantize_at_run_time_have_no_kernel() -> None:
    from precisionlab.ptq.run import PTQResult

    row = ptq_speed.ptq_speed_candidate(PTQResult(method="smoothquant", scheme="int8:row", layers=[]))
    assert "run time" in row.reason


def test_eval_speed_on_an_encoder_fails_before_the_evaluation(run_cli) -> None:  # type: ignore[no-untyped-def]
    from tests.model_helpers import minilm

    minilm()
    result = run_cli("eval", "--model", "minilm-l6", "--schemes", "int8:row:scale=bf16", "--speed")
    assert result.exit_code == 2 and "causal LMs" in result.stderr
    assert "retrieval" not in result.stderr  # nothing was evaluated


@pytest.mark.slow
def test_eval_speed_cli(run_cli, monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:  # type: ignore[no-untyped-def]
    import json

    smollm2_slice()
    for name, value in SETTINGS.items():
        monkeypatch.setattr(speed, name.upper(), value)
    out = tmp_path / "out"
    result = run_cli("eval", "--model", "smollm2-135m", "--schemes", "int8:row", "--tasks", "ppl", "--size", "0.05",
                     "--include", "model.layers.0.*", "--no-cache", "--resamples", "500", "--speed", "--out", str(out))
    assert result.exit_code == 0, result.output
    saved = json.loads((out / "eval.json").read_text())
    f = saved["findings"]
    assert "eval.ppl.int8:row:scale=bf16.verdict" in f  # the twin the kernel runs is evaluated too
    assert f["eval.speed.int8:row:scale=bf16.decode_ratio"] > 0 and f["eval.speed.int8:row.kernel"] == "none"
    assert saved["params"]["command"].endswith("--speed")
