"""The loss-scaling lab: gradient underflow census, the fp16 training run with and without each
piece of mixed precision (master copy, dynamic loss scaling, skip on overflow, clip order),
and the memory bill of training. Calls `precisionlab.training`; never prints."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from precisionlab.formats import FloatFormat, get_format
from precisionlab.labs import Lab
from precisionlab.results import Figure, LabResult, Part, Scalar, Series, Table
from precisionlab.training import memory, toy
from precisionlab.training.census import (
    CENSUS_FORMATS,
    GradientSample,
    census,
    load_gradients,
    max_power_of_two_scale,
)
from precisionlab.training.example import example_histogram

PARTS = ("census", "train", "bill")


def _load_sample(census_file: str | Path | None) -> GradientSample:
    return example_histogram() if census_file is None else load_gradients(census_file)


def census_part(sample: GradientSample) -> Part:
    """Census table (each format, then fp16 after the largest safe power-of-two scale), figure, findings."""
    if sample.max_magnitude == 0:
        raise ValueError(f"{sample.source}: every gradient is zero; there is nothing to census or scale")
    exponent = max_power_of_two_scale(sample.max_magnitude, "fp16")
    rows = [census(sample, name) for name in CENSUS_FORMATS]
    scaled = census(sample, "fp16", exponent)
    findings: dict[str, Scalar] = {"census.values": sample.total, "census.max_magnitude": sample.max_magnitude,
                                   "census.max_power_of_two_scale": _power_of_two(exponent),
                                   "census.max_power_of_two_exponent": exponent}
    for row in rows:
        for name in ("subnormal", "zero", "overflow", "normal"):
            findings[f"census.{row.format}.{name}_fraction"] = row.fraction(name)
    for name in ("subnormal", "zero", "overflow", "normal"):
        findings[f"census.fp16_scaled.{name}_fraction"] = scaled.fraction(name)
    table = Table(
        key="census",
        title=f"Underflow census of {sample.source} ({sample.total:.6g} values)",
        columns=["format", "scale", "zero (flushed)", "subnormal", "normal", "overflow", "input zeros"],
        rows=[[r.format, f"2^{r.scale_exponent}", r.zero, r.subnormal, r.normal, r.overflow, r.input_zero]
              for r in [*rows, scaled]],
        note=(f"Fractions of all values after one exact rounding of |g|. zero: nonzero values that round to 0 "
              f"(|g| <= min_subnormal/2); subnormal: kept with fewer significant bits. The largest power of two "
              f"that keeps the largest gradient ({sample.max_magnitude:.4g}) finite in fp16 is 2^{exponent}; the "
              f"last row is fp16 after multiplying by it. bf16 has fp32's exponent range (min normal 2^-126)."),
        formats={c: ".4f" for c in ("zero (flushed)", "subnormal", "normal", "overflow", "input zeros")},
    )
    return Part([table], [_census_figure(sample, exponent)], findings)


def _power_of_two(exponent: int) -> float:
    """2^exponent as a float; inf past float64's range (gradients below 1e-308 ask for 2^1024 and more)."""
    return math.ldexp(1.0, exponent) if exponent < 1024 else math.inf


def _census_figure(sample: GradientSample, exponent: int) -> Figure:
    fp16 = get_format("fp16")
    assert isinstance(fp16, FloatFormat)
    positive = sample.magnitudes > 0
    logs = np.log10(sample.magnitudes[positive])
    weights = sample.weights[positive] / sample.total
    edges = np.arange(math.floor(logs.min() * 8) / 8, logs.max() + 0.25, 0.125)
    series = []
    for label, shift in (("gradients", 0.0), (f"gradients x 2^{exponent}", exponent * math.log10(2))):
        counts, _ = np.histogram(logs + shift, bins=edges + (shift if shift else 0.0), weights=weights)
        series.append(Series(label, (edges[:-1] + (shift if shift else 0.0)).tolist(), counts.tolist(), kind="step"))
    return Figure(
        key="census_histogram",
        title="Gradient magnitudes against fp16's range",
        xlabel="log10 |gradient|",
        ylabel="fraction of values per 1/8 decade",
        series=series,
        vlines=[(math.log10(fp16.min_subnormal / 2), "fp16 flush to 0"),
                (math.log10(fp16.min_normal), "fp16 min normal"),
                (math.log10(fp16.max_finite), "fp16 max")],
    )


def train_part(steps: int = 400, samples: int = 16384) -> Part:
    """Run every variant and trap on the toy problem; tables, loss/scale figures, findings."""
    config = toy.TrainConfig(steps=steps)
    study = toy.run_study(toy.make_problem(samples=samples), config)
    findings: dict[str, Scalar] = {"train.initial_loss": study.runs["fp32"].loss[0], "train.target_loss": study.target}
    rows: list[list[Scalar]] = []
    window = study.runs["fp32"].steps_to(study.target) or steps
    findings["train.lost_update_window"] = window
    for name, log in study.runs.items():
        v = log.variant
        reached = log.steps_to(study.target)
        lost = float(np.mean(log.lost_updates[:window])) if log.lost_updates else 0.0
        findings[f"train.{name}.final_loss"] = log.final_loss
        findings[f"train.{name}.steps_to_target"] = reached
        findings[f"train.{name}.stalled"] = log.stalled(study.target)
        findings[f"train.{name}.flushed_fraction"] = log.flushed[-1]
        findings[f"train.{name}.lost_update_fraction"] = lost
        if v.loss_scaling:
            findings[f"train.{name}.skipped_steps"] = sum(log.skipped)
            findings[f"train.{name}.final_scale"] = log.scale[-1]
        rows.append([name, v.compute, v.master, v.loss_scaling, log.final_loss, reached, log.stalled(study.target),
                     sum(log.skipped), sum(log.clipped), log.scale[-1], log.flushed[-1], lost])
    clip = study.runs["clip_before_unscale"]
    no_skip = study.runs["no_skip"]
    findings["train.clip_before_unscale.slowdown"] = study.slowdown()
    findings["train.clip_before_unscale.clipped_steps"] = sum(clip.clipped)
    findings["train.fp16_master_scaled.clipped_steps"] = sum(study.runs["fp16_master_scaled"].clipped)
    findings["train.no_skip.nan_weights"] = no_skip.first_nan_step is not None
    findings["train.no_skip.first_nan_step"] = no_skip.first_nan_step
    table = Table(
        key="training",
        title=(f"Toy regression, {samples} samples, {steps} SGD-momentum steps, every tensor rounded "
               f"after every op (target loss = initial x {config.target_ratio:.3g})"),
        columns=["variant", "compute", "fp32 master", "loss scaling", "final loss", "steps to target", "stalled",
                 "skipped", "clipped", "final scale", "flushed grads", "lost updates"],
        rows=rows,
        note=("flushed grads: fraction of nonzero output gradients 2r/N that rounded to 0 in the last step; "
              "lost updates: fraction of weight updates that rounded away (w - u == w) over the steps fp32 needs "
              "to reach the target. Without loss scaling fp16's gradients flush to zero once the residuals shrink "
              "and the run stalls; scaling by S (a power of two, exact) moves them back into range. bf16 reaches "
              "the target with no scaling, and without a master copy it loses updates to rounding. Clipping "
              "before unscaling clips S-times-too-large gradients on most steps (the clipped column): the curve "
              "looks ordinary, only slower. Applying a step with inf gradients makes the weights NaN for good."),
        formats={"final loss": ".3e", "final scale": ".4g", "flushed grads": ".3f", "lost updates": ".3f"},
    )
    return Part([table], _train_figures(study), findings)


def _train_figures(study: toy.TrainingStudy) -> list[Figure]:
    loss_series = [Series(name, list(range(len(log.loss))), log.loss, style="--" if name == "fp16_master" else "-")
                   for name, log in study.runs.items() if name != "no_skip"]
    loss = Figure(key="loss_per_step", title="Loss per step, each variant in emulated precision",
                  xlabel="step", ylabel="loss (mean squared error)", series=loss_series, yscale="log",
                  hlines=[(study.target, "target")],
                  note="no_skip is left out: its loss is NaN from the step after the first overflow.")
    scale_series = []
    for name in ("fp16_master_scaled", "clip_before_unscale", "high_scale_skip", "no_skip"):
        log = study.runs[name]
        stop = len(log.scale) if log.first_nan_step is None else log.first_nan_step + 1
        style = "--" if name == "clip_before_unscale" else "-"
        scale_series.append(Series(name, list(range(stop)), log.scale[:stop], kind="step", style=style))
    scale = Figure(key="scale_per_step", title="Dynamic loss scale per step (halve on overflow, double when clean)",
                   xlabel="step", ylabel="loss scale S", series=scale_series, yscale="log",
                   note=("no_skip is drawn until its weights turn NaN; clip_before_unscale (dashed) shares "
                         "fp16_master_scaled's scale trace."))
    return [loss, scale]


def bill_part(params: float = 7e9, optimizer: str = "adam", devices: int = 8, zero_stage: int = 0,
              matrix_dim: int = 4096) -> Part:
    """Memory bill tables (components, recipe x optimizer matrix, ZeRO stages) and findings."""
    count = memory.check_params(params)
    chosen = memory.check_optimizer(optimizer)
    memory.check_sharding(devices, zero_stage)
    findings: dict[str, Scalar] = {"bill.params": count}
    for b in memory.all_bills(matrix_dim=matrix_dim):
        findings[f"bill.{b.recipe.name}_{b.optimizer}.bytes_per_param"] = b.bytes_per_param
    rows: list[list[Scalar]] = []
    for recipe in memory.RECIPES:
        b = memory.bill(recipe, chosen, matrix_dim)
        c = b.components
        total = b.total_bytes(count) / 1e9
        per_device = b.per_device_bytes(count, devices, zero_stage) / 1e9
        findings[f"bill.{recipe.name}_{chosen}.total_gb"] = total
        findings[f"bill.{recipe.name}_{chosen}.per_device_gb"] = per_device
        rows.append([recipe.name, c["weights"], c["weight_copy"], c["master"], c["gradients"], c["optimizer"],
                     b.bytes_per_param, total, per_device])
    components = Table(
        key="bill",
        title=f"Memory bill for {count:.4g} parameters with {chosen} ({devices} device(s), ZeRO stage {zero_stage})",
        columns=["recipe", "weights B", "weight copy B", "master B", "grads B", "optimizer B", "B/param", "total GB",
                 "per device GB"],
        rows=rows,
        note=("Bytes per parameter, each a format's bits/8. Mixed precision (bf16 weights 2 + fp32 master 4 + fp32 "
              "Adam moments 8 + bf16 gradients 2) costs 16 B, the same as fp32 training: it does not halve parameter "
              "memory. Activations are not included: they scale with batch x sequence x hidden x layers, and storing "
              "them in 16 bits instead of 32 is what mixed precision does halve. GB = 1e9 bytes. "
              + "; ".join(f"{r.name}: {r.description}" for r in memory.RECIPES) + "."),
        formats={"total GB": ".4g", "per device GB": ".4g", "optimizer B": ".4g", "B/param": ".4g"},
    )
    matrix = Table(
        key="bill_matrix",
        title="Bytes per parameter, recipe x optimizer",
        columns=["recipe", *memory.OPTIMIZERS],
        rows=[[r.name, *(memory.bill(r, o, matrix_dim).bytes_per_param for o in memory.OPTIMIZERS)]
              for r in memory.RECIPES],
        note=(f"adam/adamw: two moments; sgd: one momentum buffer; adafactor: factored second moment of a "
              f"{matrix_dim}x{matrix_dim} matrix (2/{matrix_dim} state elements per parameter), no first moment; "
              f"adam8bit: two int8 moments plus one fp32 absmax per {memory.ADAM8BIT_BLOCK} values."),
        formats={o: ".4g" for o in memory.OPTIMIZERS},
    )
    tables = [components, matrix]
    if devices > 1:
        zero_rows: list[list[Scalar]] = []
        for recipe in memory.RECIPES:
            b = memory.bill(recipe, chosen, matrix_dim)
            zero_rows.append([recipe.name, *(b.per_device_bytes(count, devices, s) / 1e9 for s in range(4))])
        mixed = memory.bill("mixed_precision", chosen, matrix_dim)
        for stage in range(4):
            findings[f"bill.mixed_precision_{chosen}.zero{stage}_per_device_gb"] = (
                mixed.per_device_bytes(count, devices, stage) / 1e9)
        tables.append(Table(
            key="bill_zero",
            title=f"Per-device GB with {chosen} over {devices} devices, ZeRO stages 0-3",
            columns=["recipe", "stage 0", "stage 1", "stage 2", "stage 3"],
            rows=zero_rows,
            note=("Stage 1 shards the optimizer state and master weights over the devices, stage 2 also the "
                  "gradients, stage 3 also the weights; a sharded component costs bytes/N per device."),
            formats={f"stage {s}": ".4g" for s in range(4)},
        ))
    return Part(tables, findings=findings)


def run(parts: tuple[str, ...] = PARTS, census_file: str | Path | None = None, steps: int = 400,
        samples: int = 16384, params: float = 7e9, optimizer: str = "adam", devices: int = 8,
        zero_stage: int = 0, matrix_dim: int = 4096) -> LabResult:
    """The lab: any of the census, training and bill parts."""
    unknown = sorted(set(parts) - set(PARTS))
    if unknown or not parts:
        raise ValueError(f"unknown lab part(s) {', '.join(unknown) or '(none)'}; parts: {', '.join(PARTS)}")
    result = LabResult(name="lossscale", title="Loss scaling, master weights and the memory bill of training",
                       params={"parts": ",".join(parts), "census_file": str(census_file) if census_file else None,
                               "steps": steps, "samples": samples, "params": params, "optimizer": optimizer,
                               "devices": devices, "zero_stage": zero_stage})
    if "census" in parts:
        result.add(census_part(_load_sample(census_file)))
    if "train" in parts:
        result.add(train_part(steps, samples))
    if "bill" in parts:
        result.add(bill_part(params, optimizer, devices, zero_stage, matrix_dim))
    result.summary = _summary(result.findings)
    return result


def _summary(f: dict[str, Scalar]) -> str:
    lines = []
    if "census.fp16.subnormal_fraction" in f:
        lines.append(f"fp16 census: {_pct(f['census.fp16.subnormal_fraction'])} subnormal, "
                     f"{_pct(f['census.fp16.zero_fraction'])} flushed to zero; largest safe loss scale "
                     f"2^{f['census.max_power_of_two_exponent']}.")
    if "train.fp16_plain.stalled" in f:
        stalled = "stalled" if f["train.fp16_plain.stalled"] else "did not stall"
        nan = "the weights became NaN" if f["train.no_skip.nan_weights"] else "the weights stayed finite"
        lines.append(f"Training: fp16 without scaling {stalled} (final loss {_num(f['train.fp16_plain.final_loss'])}); "
                     f"with dynamic scaling {_num(f['train.fp16_master_scaled.final_loss'])}; bf16 + master with no "
                     f"scaling {_num(f['train.bf16_master.final_loss'])}. Clip before unscale: "
                     f"{_num(f['train.clip_before_unscale.slowdown'])}x slower; no skip on overflow: {nan}.")
    if "bill.mixed_precision_adam.bytes_per_param" in f:
        lines.append(f"Mixed precision with Adam: {_num(f['bill.mixed_precision_adam.bytes_per_param'])} B/param, "
                     f"fp32 training: {_num(f['bill.fp32_adam.bytes_per_param'])} B/param.")
    return " ".join(lines)


def _pct(value: Scalar) -> str:
    return f"{float(value) * 100:.1f}%" if isinstance(value, (int, float)) else str(value)


def _num(value: Scalar) -> str:
    return f"{value:.3g}" if isinstance(value, (int, float)) and not isinstance(value, bool) else str(value)


LAB = Lab(name="lossscale", title="Loss scaling and the memory bill", run=run, order=40,
          quick={"steps": 300, "samples": 16384})
