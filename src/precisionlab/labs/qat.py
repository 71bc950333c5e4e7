"""The result of `precisionlab qat` as a LabResult: the training summary, the memory bill, the per-layer
table, the loss curve and, given an evaluation, its task tables (qat, its start and RTN against the float model).

Not registered as a lab: it trains a real model for minutes, and `precisionlab run` stays fast.

    qat_lab(result, params, evaluation=None, warnings=None, eval_note="")
"""

from __future__ import annotations

import math
from typing import Any

from precisionlab.results import Figure, LabResult, Scalar, Series, Table

SUMMARY_NOTE = ("loss: the training loss of each step before its update (kl: KL(float || quantized) in nats per token "
                "on the step's calibration window; nll: next-token cross-entropy); loss_first is the starting "
                "point's, on another window than loss_last: compare train_loss_start and train_loss_end, the loss "
                "on the same first calibration windows before the first step and after the last. codes_changed: "
                "the share of weights whose code differs from the start's. seconds_per_step: "
                "the mean over this run's steps (a resumed run: those after the checkpoint).")


def qat_lab(result: Any, params: dict[str, Scalar], evaluation: Any = None, warnings: list[str] | None = None,
            eval_note: str = "") -> LabResult:
    findings: dict[str, Scalar] = dict(result.findings())
    summary = Table(key="summary", title=f"qat {result.scheme} from {result.start}: training (findings)",
                    columns=["finding", "value"],
                    rows=[[k, v] for k, v in findings.items() if not k.startswith("qat.memory.")],
                    note=SUMMARY_NOTE, formats={"value": ".4g"})
    sections = [summary]
    if result.memory is not None:
        mem = result.memory
        rows: list[list[Scalar]] = [[k, v, v * mem.trained / 1e6] for k, v in mem.per_trained.items()]
        rows.append(["per trained parameter, in all", mem.bytes_per_trained, mem.trained_bytes / 1e6])
        rows.append(["frozen parameters (stored width)", None, mem.frozen_bytes / 1e6])
        sections.append(Table(
            key="memory", title=f"Memory: {mem.trained:,} trained parameters", columns=["component", "bytes/param",
                                                                                        "MB"], rows=rows,
            note=(f"What is trained: every weight of the quantized linears, as a float32 offset from the start in "
                  f"grid steps under the start's fixed scales. Weights, gradients and Adam's two moments are the "
                  f"fp32 + Adam bill of training.memory ({mem.adam_bytes_per_param:g} bytes per trained parameter); "
                  "the float reference (the distillation teacher's weight), the start the offset is added to, the "
                  "straight-through mask and the expanded grid come on top. "
                  "Activations are not counted here: the measured peak is qat.peak_mb."),
            formats={"bytes/param": ".3g", "MB": ".2f"}))
    layer_rows: list[list[Scalar]] = [[n, "x".join(str(d) for d in result.quantized[n].shape),
                                       result.changed_codes.get(n), int(result.quantized[n].nbytes)]
                                      for n in result.layers]
    sections.append(Table(key="layers", title="Trained layers", columns=["layer", "shape", "codes changed", "bytes"],
                          rows=layer_rows, note="codes changed: share of the layer's weights whose code moved away "
                                                "from the start's; bytes: as stored (codes, scales, zero points).",
                          formats={"codes changed": ".3g"}))
    losses = [float(v) for v in result.losses]
    steps = list(range(len(losses)))
    figure = Figure(key="loss", title=f"qat {result.scheme}: training loss per step", xlabel="step",
                    ylabel=f"loss ({result.config.loss}, nats/token)",
                    series=[Series("loss", steps, losses), *_smoothed(losses)],
                    yscale="log" if losses and min(losses) > 0 else "linear",
                    vlines=[(float(result.history.resumed_from), "resumed")] if result.history.resumed_from else [],
                    note="each step's loss on its own calibration window, before its update; the line: the mean "
                         "over the last 10 steps")
    figures = [figure]
    first, last = findings.get("qat.train_loss_start"), findings.get("qat.train_loss_end")
    text = (f"qat {result.scheme} from {result.start}: {findings['qat.steps']} steps, training loss {_fmt(first)} -> "
            f"{_fmt(last)} (the same {result.history.probe_windows} calibration windows before and after), "
            f"{_fmt(findings['qat.seconds_per_step'])} s/step")
    from precisionlab.labs.eval import embed_evaluation

    fidelity = _fidelity(sections, findings, evaluation) if evaluation is not None else ""
    text = embed_evaluation(sections, figures, findings, text, evaluation, eval_note, warnings) + fidelity
    return LabResult(name="qat", title=f"Quantization-aware training: {result.scheme} on {params.get('model', '')}",
                     sections=sections, figures=figures, findings=findings, params=params, summary=text)


def _fidelity(sections: list[Table], findings: dict[str, Scalar], evaluation: Any) -> str:
    """The paired held-out KL of the trained model against its start and RTN (qat.fidelity), as a table (before
    the evaluation's tables), findings, and a line per comparison for the summary (returned)."""
    from precisionlab.qat.fidelity import kl_differences

    rows = kl_differences(evaluation)
    if not rows:
        return ""
    for row in rows:
        findings.update(row.findings())
    sections.append(Table(
        key="fidelity", title="Held-out KL to the float model: the trained model against the others, paired",
        columns=["task", "candidate", "KL", "against", "its KL", "difference", "ci_low", "ci_high"],
        rows=[[r.task, r.candidate, r.kl, r.other, r.other_kl, r.difference, r.ci_low, r.ci_high] for r in rows],
        note=(f"KL(float || model) in nats per token on the evaluation's held-out documents; difference: the "
              f"candidate's minus the other's, with its {rows[0].confidence:.0%} interval from the paired bootstrap "
              "over the same documents (eval.stats.bootstrap_ratio of the per-document KL differences): below 0 "
              "at both ends, the trained model is closer to the float model."),
        formats={"KL": ".4g", "its KL": ".4g", "difference": "+.4g", "ci_low": "+.4g", "ci_high": "+.4g"}))
    return "".join(f"\n{r.line()}" for r in rows)


def _smoothed(losses: list[float], window: int = 10) -> list[Series]:
    if len(losses) < window:
        return []
    means = [sum(losses[i - window + 1:i + 1]) / window for i in range(window - 1, len(losses))]
    return [Series(f"mean of {window}", list(range(window - 1, len(losses))), means)]


def _fmt(value: Any) -> str:
    return f"{value:.3g}" if isinstance(value, float) and math.isfinite(value) else str(value)
