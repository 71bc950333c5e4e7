"""The evaluation's layer-output error sees everything a candidate does to a layer: activation quantization
(its hook runs after the error's input is taken) and folded scales (the reference is the original weight in
the folded coordinates, and an output whose rows a fold divided is scaled back). Expected values: folding
alone computes the same function (errors at float32 rounding), and a direct computation of the W8A8 product
on the layer's float inputs."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.model_helpers import smollm2_slice

torch = pytest.importorskip("torch")

from precisionlab.eval import data, runner  # noqa: E402
from precisionlab.eval.candidates import Candidate, parse_candidates  # noqa: E402
from precisionlab.eval.tasks import TaskSpec  # noqa: E402
from precisionlab.ptq import CalibrationWarning, run_method, token_batches  # noqa: E402
from precisionlab.ptq.install import apply_result, install_result  # noqa: E402
from precisionlab.ptq.structure import fold_scales  # noqa: E402
from precisionlab.quant import quantize  # noqa: E402

SHORT = runner.Limits(ppl_max_tokens=64, generate_new_tokens=8, probe_tokens=64)


def ppl_task() -> list[TaskSpec]:
    return [TaskSpec("ppl", "ppl", tuple(data.ppl_documents(data.builtin_split(), 2)), "builtin")]


def per_layer(run: runner.EvalRun) -> dict[str, float]:
    return {r["layer"]: r["output_rel_err"] for r in run.candidates[0].layers if r["output_rel_err"] is not None}


@pytest.mark.slow  # 7-13 s; a sibling test covers the same path in the default suite
def test_folding_alone_leaves_every_layer_output_error_at_rounding() -> None:
    """AWQ's folds (into the norms: q/k/v, gate/up columns; into up_proj's rows: down_proj's columns) change
    no function: every folded layer, the row-scaled up_proj included, must show a float32-rounding error."""
    loaded = smollm2_slice()
    calibration = token_batches(loaded.tokenizer, data.calibration_documents(data.builtin_split()), 256, 256)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", CalibrationWarning)
        result = run_method(loaded.model, "awq", "int4:g128", calibration, blocks=[0, 1])
    folded = {n for group, _ in result.folds for n in group.layers}
    rows = {group.prev for group, _ in result.folds if group.prev in result.quantized}
    assert rows and folded

    def prepare(model, include, exclude):  # type: ignore[no-untyped-def]
        def folds_only(m):  # type: ignore[no-untyped-def]
            for group, scales in result.folds:
                fold_scales(m, group, scales)

        return install_result(model, result, folds_only, "folds only", stored_bytes={n: 1 for n in folded | rows})

    run = runner.evaluate(loaded, [Candidate(result.scheme, name="folds only", prepare=prepare)], ppl_task(), 1.0,
                          cache=False, n_resamples=200, limits=SHORT)
    errors = per_layer(run)
    assert set(errors) == folded | rows
    assert max(errors.values()) < 1e-5, errors


def test_the_w8a8_layer_error_counts_the_activation_quantization() -> None:
    """Block 0's q_proj reads the first norm's output, the same in the float and the W8A8 model: its error
    is ||Q_a(X) Q_w(W)^T - X W^T|| / ||X W^T|| over the probe, with X taken from the float model here."""
    loaded = smollm2_slice()
    name = "model.layers.0.self_attn.q_proj"
    module = dict(loaded.model.named_modules())[name]
    seen: list[np.ndarray] = []
    handle = module.register_forward_pre_hook(lambda _m, args: seen.append(args[0].detach().float().numpy()))
    try:
        probe = runner._probe(loaded, SHORT.probe_tokens)
        with torch.inference_mode():
            loaded.model(input_ids=torch.tensor([probe]), use_cache=False)
    finally:
        handle.remove()
    x = seen[0].reshape(-1, seen[0].shape[-1]).astype(np.float32)
    w = module.weight.detach().float().numpy()
    y = x.astype(np.float64) @ w.astype(np.float64).T
    x_q = quantize(x, "int8:row").dequantize().astype(np.float64)
    w_q = quantize(w, "int8:row").dequantize().astype(np.float64)
    expected = np.linalg.norm(x_q @ w_q.T - y) / np.linalg.norm(y)
    weight_only = np.linalg.norm(x.astype(np.float64) @ w_q.T - y) / np.linalg.norm(y)

    run = runner.evaluate(loaded, parse_candidates(["int8:row+act=int8:row"]), ppl_task(), 1.0, cache=False,
                          n_resamples=200, limits=SHORT)
    measured = per_layer(run)[name]
    assert expected > 2 * weight_only  # the activation part is most of it: the check can tell them apart
    assert measured == pytest.approx(expected, rel=1e-3)


def check_a_row_folded_layer(loaded: Any, scheme: str, calibration_tokens: int) -> None:
    """AWQ divides up_proj's output rows by the down_proj group's scales r; its error is measured after scaling
    both outputs back by r: ||(x' Q^T - x' W'^T) r|| / ||x' W'^T r||, with x' what up_proj receives in the AWQ
    model and W' = diag(1/r) W diag(c), computed here from the result's folds on a copy of the model."""
    import copy

    calibration = token_batches(loaded.tokenizer, data.calibration_documents(data.builtin_split()),
                                calibration_tokens, calibration_tokens)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", CalibrationWarning)
        result = run_method(loaded.model, "awq", scheme, calibration, blocks=[0])
    name = "model.layers.0.mlp.up_proj"
    c = next(s for g, s in result.folds if name in g.layers).astype(np.float64)
    r = next(s for g, s in result.folds if g.prev == name).astype(np.float64)
    w = dict(loaded.model.named_modules())[name].weight.detach().double().numpy()
    w_folded = w * c[None, :] / r[:, None]
    q = result.quantized[name].dequantize().astype(np.float64)

    model = copy.deepcopy(loaded.model)
    apply_result(model, result)
    seen: list[np.ndarray] = []
    module = dict(model.named_modules())[name]
    handle = module.register_forward_pre_hook(lambda _m, args: seen.append(args[0].detach().double().numpy()))
    try:
        with torch.inference_mode():
            model(input_ids=torch.tensor([runner._probe(loaded, SHORT.probe_tokens)]), use_cache=False)
    finally:
        handle.remove()
    x = seen[0].reshape(-1, seen[0].shape[-1])
    y = x @ w_folded.T
    expected = np.linalg.norm((x @ q.T - y) * r) / np.linalg.norm(y * r)
    in_folded_coordinates = np.linalg.norm(x @ q.T - y) / np.linalg.norm(y)

    from precisionlab.ptq.install import ptq_candidate

    run = runner.evaluate(loaded, [ptq_candidate(result)], ppl_task(), 1.0, cache=False, n_resamples=200,
                          limits=SHORT)
    measured = per_layer(run)[name]
    assert abs(expected - in_folded_coordinates) > 0.01 * expected  # the two measures differ: the check can fail
    assert measured == pytest.approx(expected, rel=1e-4)


@pytest.mark.slow  # about 20 s of a loaded 2-core machine; the tiny model's test below covers the path by default
def test_a_row_folded_layer_is_judged_in_the_original_output_coordinates() -> None:
    check_a_row_folded_layer(smollm2_slice(), "int4:g128", 256)


def test_a_row_folded_layer_of_the_tiny_model_is_judged_in_the_original_output_coordinates(tmp_path: Path) -> None:
    """The same check on the random two-block Llama (hidden 64, intermediate 128; int4 groups of 32 fit its rows),
    in the default suite: seconds, where the SmolLM2 slice takes twenty."""
    from precisionlab.models import load_model
    from tests.export_helpers import tiny_model_dir

    check_a_row_folded_layer(load_model(str(tiny_model_dir(tmp_path / "llama"))), "int4:g32", 128)
