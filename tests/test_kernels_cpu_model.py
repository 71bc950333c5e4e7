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
    """int4 with fp16 group scales gains its bf16-scale twin, with the line that says why; int8:row runs on
    the int8 kernel itself (its row scales on the output) and gains none."""
    assert speed.kernel_twins(["int4:g128", "int8:row", "int4:g64:scale=bf16", "nvfp4", "int8:row+act=int8:row"]) == [
        "int4:g128", "int4:g128:scale=bf16", "int8:row", "int4:g64:scale=bf16", "nvfp4", "int8:row+act=int8:row"]
    assert speed.kernel_twins(["int4:g128", "int4:g128:scale=bf16"]) == ["int4:g128", "int4:g128:scale=bf16"]
    lines = speed.twin_lines(["int8:row", "int4:g128"])
    assert list(lines) == ["int4:g128:scale=bf16"]
    assert lines["int4:g128:scale=bf16"] == (
        "int4:g128 keeps fp16 scales, which no kernel here takes; its bf16-scale twin int4:g128:scale=bf16 runs on "
        "the int4 kernel and is evaluated too, so the model timed is the model judged")


@pytest.mark.parametrize(("settings", "words"), [({"repetitions": 1}, "repetitions"), ({"new_tokens": 0}, "new_tokens"),
                                                 ({"threads": 0}, "threads"), ({"prompt_tokens": 2.5}, "prompt")])
def test_bad_settings(settings: dict, words: str) -> None:
    values = {"prompt_tokens": 8, "new_tokens": 2, "repetitions": 2, "threads": 1, **settings}
    with pytest.raises(ValueError, match=words):
        speed.check_settings(**values)


@pytest.fixture(scope="module")
def measured() -> speed.SpeedRun:
    loaded = smollm2_slice()
    specs = ["int8:row", "int8:row:scale=bf16", "int4:g64", "int4:g64:scale=bf16", "int8:row+act=int8:row", "nvfp4"]
    return speed.measure_speed(loaded, [speed.speed_candidate(c) for c in parse_candidates(specs)], INCLUDE,
                               **SETTINGS)


def test_kernel_path_within_the_stated_tolerance_of_the_emulation(measured: speed.SpeedRun) -> None:
    """On SmolLM2's own activations (the emulated model's inputs to each of its 14 swapped layers), every
    output lies within models.kernels.output_bound of the exact product with the emulated weight; the
    next-token distributions of the whole kernel path stay within 1e-2 nats of the emulation's."""
    for label in ("int8:row", "int8:row:scale=bf16", "int4:g64:scale=bf16"):
        row = measured.row(label)
        assert row.layers == 14 and not row.skipped
        assert 0 < row.bound_fraction <= 1.0
        assert 0 < row.kl_to_emulation < 1e-2


def test_int8_row_runs_on_the_int8_kernel(measured: speed.SpeedRun) -> None:
    """int8:row (fp16 scales) is measured itself, on the real kernel: torch.profiler counts one int8 kernel
    call per swapped layer in a forward, and the row says how its scales are held."""
    from precisionlab.models import kernels

    row = measured.row("int8:row")
    assert row.kernel == kernels.TORCH_INT8 and row.runs == "int8:row" and len(row.decode) == 2
    assert row.op == "aten::_weight_int8pack_mm" and row.op_calls == row.layers == 14
    assert "multiply the kernel's output" in row.note
    assert measured.row("int4:g64:scale=bf16").op_calls == 14


def test_rows_without_a_kernel_say_so(measured: speed.SpeedRun) -> None:
    for label, words in (("int4:g64", "int4:g64:scale=bf16 runs"), ("int8:row+act=int8:row", "run time"),
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
    assert f["eval.speed.int4:g64.kernel"] == "none" and f["eval.speed.int4:g64.runs_as"] == "int4:g64:scale=bf16"
    assert "eval.speed.int4:g64.decode_ratio" not in f
    assert f["eval.speed.int8:row.kernel"] == "torch _weight_int8pack_mm" and f["eval.speed.int8:row.decode_ratio"] > 0
    assert f["eval.speed.int8:row.op_calls"] == 14
    assert f["eval.speed.threads"] == 1 and f["eval.speed.prompt_tokens"] == 16
    assert all(v > 0 for v in measured.reference_prefill)
    table = part.tables[0]
    assert table.key == "speed" and table.rows[0][0] == "reference"
    assert [r[0] for r in table.rows[1:]] == [r.label for r in measured.rows]


def test_the_reference_row_sits_under_its_columns(measured: speed.SpeedRun) -> None:
    """The reference's tokens/s under 'decode tok/s' and 'prefill tok/s', its ratios 1 (they had shifted one
    column left: the decode tok/s under 'kernel MB')."""
    reference = speed.speed_part(measured).tables[0].records()[0]
    assert reference["decode tok/s"] == float(np.median(measured.reference_decode))
    assert reference["prefill tok/s"] == float(np.median(measured.reference_prefill))
    assert reference["decode ratio"] == reference["prefill ratio"] == 1.0 and reference["kernel MB"] is None


def test_the_conditions_and_the_twin_are_stated(measured: speed.SpeedRun) -> None:
    import os

    part = speed.speed_part(measured)
    f, note = part.findings, part.tables[0].note
    assert 0 <= f["eval.speed.load_average_start"] <= os.cpu_count() * 100 and f["eval.speed.load_average_end"] >= 0
    assert f["eval.speed.cpu_capability"] == torch_capability() and f["eval.speed.activations"] == "bfloat16"
    assert f["eval.speed.model_dtype"] == "float32"
    assert note.startswith("Conditions: torch threads 1; load average (1 min) ") and "M = 1 in decode" in note
    assert f"torch CPU capability {torch_capability()}" in note
    line = speed.twin_lines(["int4:g64"])["int4:g64:scale=bf16"]
    assert line in note and line in f["eval.speed.int4:g64.note"]
    assert f["eval.speed.int4:g64:scale=bf16.twin_of"] == "int4:g64"
    assert "eval.speed.int8:row:scale=bf16.twin_of" not in f  # int8:row runs itself: no twin stands for it


def torch_capability() -> str:
    import torch

    return str(torch.backends.cpu.get_cpu_capability())


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
    assert "eval.ppl.int8:row:scale=bf16.verdict" not in f  # int8:row runs on the kernel itself: no twin
    assert f["eval.speed.int8:row.decode_ratio"] > 0 and f["eval.speed.int8:row.kernel"] == "torch _weight_int8pack_mm"
    assert saved["params"]["command"].endswith("--speed")
