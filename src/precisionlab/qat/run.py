"""Quantization-aware training of a model's linear layers at one scheme: the API.

    result = run_qat(model, "int4:g64", calibration_batches, blocks=[1], config=TrainConfig(steps=100))
    result = run_qat(model, None, batches, start=Start.of_recipe(read_result("ptq.json")), config=...)
    result.quantized        name -> QuantizedTensor: the trained weights' codes under the starting scales
    result.losses           the loss of every step (losses[0]: the starting point's)
    result.findings()       the qat.* keys (docs/qat.md)
    candidate = qat_candidate(result)      # an eval Candidate installing it (its AWQ folds too), reversibly

Start. Without `start`: round-to-nearest of each selected layer's float weight under `scheme` (the scheme's own
scales, `quant.quantize`). With a saved GPTQ / AWQ / RTN result (`Start`): its layers, its stored codes and
scales, and AWQ's folded scales, which are folded into the model before training (the float reference is then
the folded float model, equal to the float model up to float rounding: ptq.structure's fold check). The grid's
scales stay those of the start (qat.fakequant says why); the latent weights start at the start's values, so
step 0 computes exactly the start's model.

The model is left as it was: training restores every weight, and folds are undone (`ptq.install.install`).
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from precisionlab.qat.fakequant import LayerGrid, check_scheme
from precisionlab.qat.memory import TrainingMemory
from precisionlab.qat.train import History, Progress, TrainConfig, train
from precisionlab.quant.tensor import QuantizedTensor

START_METHODS = ("rtn", "gptq", "awq")
SAVED = "saved"
"""The start of a weights file given directly (`--from W.safetensors`): its method is not recorded there."""


@dataclass
class Start:
    """A saved result to start from: its method, stored layers and AWQ folds (previous op, scales)."""

    method: str
    stored: dict[str, QuantizedTensor]
    folds: list[tuple[str, Any]] = field(default_factory=list)
    source: str = ""

    @classmethod
    def of_recipe(cls, recipe: Any) -> Start:
        """From export.results.read_result's Recipe: a saved ptq (rtn, gptq, awq) result or its weights file."""
        if not recipe.stored:
            raise ValueError(f"--from {recipe.source}: a {recipe.kind} result holds no saved codes to start from; "
                             "give a precisionlab ptq --out JSON saved with --save (gptq, awq or rtn), or its "
                             ".safetensors file")
        method = recipe.method if recipe.method in START_METHODS else SAVED
        return cls(method, dict(recipe.stored), list(recipe.folds), recipe.source)


@dataclass
class QATResult:
    scheme: str
    quantized: dict[str, QuantizedTensor]
    history: History
    config: TrainConfig
    start: str = "rtn"
    """What training started from: rtn, or the saved result's method."""
    start_quantized: dict[str, QuantizedTensor] = field(default_factory=dict)
    folds: list[tuple[Any, np.ndarray]] = field(default_factory=list)
    """(ScaleGroup, scales) of an AWQ start, as a PTQResult holds them."""
    memory: TrainingMemory | None = None
    calibration_tokens: int = 0
    tokens_per_step: int = 0
    seconds: float = 0.0
    peak_mb: float = 0.0
    memory_source: str = "rss"
    changed_codes: dict[str, float] = field(default_factory=dict)
    """Per layer: the fraction of codes that differ from the start's."""
    method: str = "qat"
    options: dict[str, Any] = field(default_factory=dict)

    @property
    def losses(self) -> list[float]:
        return self.history.losses

    @property
    def layers(self) -> list[str]:
        return sorted(self.quantized)

    @property
    def seconds_per_step(self) -> float:
        times = self.history.step_seconds[self.history.resumed_from:]
        return float(np.mean(times)) if times else float("nan")

    def findings(self) -> dict[str, Any]:
        h = self.history
        out: dict[str, Any] = {"qat.scheme": self.scheme, "qat.start": self.start, "qat.steps": h.steps,
                               "qat.lr": float(self.config.lr), "qat.seed": int(self.config.seed),
                               "qat.loss": self.config.loss, "qat.layers_trained": len(self.quantized),
                               "qat.loss_first": h.losses[0] if h.losses else None,
                               "qat.loss_last": h.losses[-1] if h.losses else None,
                               "qat.loss_last10_mean": float(np.mean(h.losses[-10:])) if h.losses else None,
                               "qat.train_loss_start": h.probe_start, "qat.train_loss_end": h.probe_end,
                               "qat.resumed_from": h.resumed_from, "qat.seconds": self.seconds,
                               "qat.seconds_per_step": self.seconds_per_step, "qat.tokens_per_step":
                               self.tokens_per_step, "qat.calibration_tokens": self.calibration_tokens,
                               "qat.peak_mb": self.peak_mb,
                               "qat.codes_changed": float(np.mean(list(self.changed_codes.values())))
                               if self.changed_codes else 0.0}
        if self.memory is not None:
            out.update(self.memory.findings())
        return out


def run_qat(model: Any, scheme: str | None, calibration: Sequence[Any], config: TrainConfig, *,
            blocks: Sequence[int] | None = None, layers: Sequence[str] | None = None, start: Start | None = None,
            checkpoint: Path | None = None, resume: bool = False, identity: Mapping[str, Any] | None = None,
            progress: Progress | None = None, force: bool = False) -> QATResult:
    """Train (module docstring). `scheme` may be None with `start` (its scheme); ValueError on bad input."""
    import torch

    from precisionlab.ptq.measure import MemoryMeter
    from precisionlab.ptq.structure import linear_names
    from precisionlab.quant import quantize

    began = time.perf_counter()
    modules = dict(model.named_modules())
    if start is not None:
        if blocks is not None or layers is not None:
            raise ValueError("--from trains the saved result's layers; --blocks does not apply with it")
        names = sorted(start.stored)
        missing = [n for n in names if n not in modules or not isinstance(modules[n], torch.nn.Linear)]
        if missing:
            raise ValueError(f"--from {start.source}: the model has no linear layer {missing[0]!r}")
        schemes = sorted({str(q.scheme) for q in start.stored.values()})
        if len(schemes) != 1:
            raise ValueError(f"--from {start.source}: its layers use several schemes ({', '.join(schemes)}); qat "
                             "trains one")
        if scheme is not None and str(check_scheme(scheme)) != schemes[0]:
            raise ValueError(f"--scheme {scheme}: the --from result is at {schemes[0]}; leave --scheme out or "
                             "give the same")
        scheme_text = str(check_scheme(schemes[0]))
    else:
        if scheme is None:
            raise ValueError("qat needs --scheme (or --from a saved result)")
        scheme_text = str(check_scheme(scheme))
        names = list(layers) if layers is not None else linear_names(model, blocks)
        if not names:
            raise ValueError("no linear layer selected")
    meter = MemoryMeter()
    folds = _fold_groups(model, names, start)
    undo = _fold(model, folds)
    try:
        starts: dict[str, QuantizedTensor] = {}
        for name in names:
            weight = modules[name].weight.detach().float().numpy()
            starts[name] = start.stored[name] if start is not None else quantize(weight, scheme_text)
            if tuple(starts[name].shape) != tuple(weight.shape):
                raise ValueError(f"--from {start.source if start else ''}: layer {name} is {starts[name].shape} there, "
                                 f"{tuple(weight.shape)} in the model")
        grids = {n: LayerGrid.of(q) for n, q in starts.items()}
        initial = {n: torch.from_numpy(q.dequantize()) for n, q in starts.items()} if start is not None else None
        with meter.section():
            history = train(model, grids, calibration, config, initial=initial, checkpoint=checkpoint,
                            resume=resume, identity={**dict(identity or {}), "scheme": scheme_text,
                                                     "start": start.method if start else "rtn"}, progress=progress,
                            force=force)
    finally:
        if undo is not None:
            undo.restore()
    quantized = {n: grids[n].quantized(history.latents[n]) for n in names}
    changed = {n: float(np.mean(quantized[n].dequantize() != starts[n].dequantize())) for n in names}
    trained = sum(int(np.prod(starts[n].shape)) for n in names)
    frozen = sum(p.numel() * p.element_size() for p in model.parameters()) - 4 * trained
    memory = TrainingMemory(trained, int(frozen), zero_point=any(g.zero_points is not None for g in grids.values()))
    tokens = [int(b.numel()) for b in calibration]
    options = {"steps": config.steps, "lr": config.lr, "seed": config.seed, "loss": config.loss,
               "checkpoint_every": config.checkpoint_every}
    return QATResult(scheme_text, quantized, history, config, start.method if start else "rtn", starts, folds,
                     memory, sum(tokens), max(tokens), time.perf_counter() - began, meter.peak_mb, meter.source,
                     changed, options=options)


def _fold_groups(model: Any, names: Sequence[str], start: Start | None) -> list[tuple[Any, np.ndarray]]:
    """An AWQ start's folds as (ScaleGroup, scales), the groups found on the model (export.plan's rule)."""
    if start is None or not start.folds:
        return []
    from precisionlab.ptq.structure import scale_groups

    groups = {g.prev: g for g in scale_groups(model, list(names))}
    out = []
    for prev, scales in start.folds:
        if prev not in groups:
            raise ValueError(f"--from {start.source}: the saved AWQ scales fold into {prev}, which is no scale group "
                             "of this model")
        out.append((groups[prev], np.asarray(scales, dtype=np.float64)))
    return out


def _fold(model: Any, folds: list[tuple[Any, np.ndarray]]) -> Any:
    """Fold the scales into the model, reversibly (None when there is nothing to fold)."""
    if not folds:
        return None
    from precisionlab.ptq.install import install
    from precisionlab.ptq.structure import fold_values

    return install(model, lambda m: fold_values(m, folds), {}, "AWQ folds")


def qat_candidate(result: QATResult, label: str | None = None) -> Any:
    """An eval Candidate installing the trained codes (and an AWQ start's folds), reversibly, at their bytes."""
    from precisionlab.eval.candidates import Candidate
    from precisionlab.ptq.install import install_result

    name = label or f"qat:{result.scheme}"

    def prepare(model: Any, include: Sequence[str], exclude: Sequence[str] | None) -> Any:
        return install_result(model, result, label=f"qat {result.scheme}")

    return Candidate(result.scheme, name=name, prepare=prepare)


def start_candidate(result: QATResult) -> Any:
    """The starting point as an eval Candidate: its codes (and an AWQ start's folds), installed reversibly."""
    from precisionlab.ptq.install import ptq_candidate
    from precisionlab.ptq.records import PTQResult

    method = result.start if result.start in START_METHODS else "rtn"  # weights only: installed alike
    start = PTQResult(method, result.scheme, [], quantized=dict(result.start_quantized), folds=result.folds)
    return ptq_candidate(start, label=f"{result.start}:{result.scheme}")


def rtn_candidate(model: Any, result: QATResult) -> Any:
    """Round-to-nearest of the trained layers' float weights under the scheme, as an eval Candidate (the start
    itself when training started from RTN)."""
    from precisionlab.ptq.install import ptq_candidate
    from precisionlab.ptq.records import PTQResult
    from precisionlab.quant import quantize

    if result.start == "rtn" and not result.folds:
        return start_candidate(result)
    modules = dict(model.named_modules())
    quantized = {n: quantize(modules[n].weight.detach().float().numpy(), result.scheme) for n in result.quantized}
    return ptq_candidate(PTQResult("rtn", result.scheme, [], quantized=quantized), label=f"rtn:{result.scheme}")
