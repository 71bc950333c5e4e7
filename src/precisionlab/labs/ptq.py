"""Results of `precisionlab ptq` as LabResults (tables, figures, findings); the ladder's is `labs.ladder`.

Not registered as a lab: it runs a real model for minutes, and `precisionlab run` stays fast.
The command builds it from `ptq.run_method` results; the report renders it like any lab
(`--out DIR` writes <name>.json, the PNG plot and an HTML page).

    ptq_lab(result, params, evaluation=None)     per-layer table, summary, task-level tables
"""

from __future__ import annotations

from typing import Any

from precisionlab.results import Figure, LabResult, Scalar, Table

DETAIL_KEYS = ("damping", "damping_tries", "dead_columns", "alpha", "clipped_fraction", "scaled", "smoothed",
               "act_scheme", "outlier_columns", "fp32_output_error", "key_error", "value_error")


def _details(details: dict[str, Any]) -> str:
    parts = []
    for key in DETAIL_KEYS:
        if key in details and details[key] is not None:
            value = details[key]
            parts.append(f"{key}={value:.3g}" if isinstance(value, float) else f"{key}={value}")
    return ", ".join(parts)


def ptq_lab(result: Any, params: dict[str, Scalar], evaluation: Any = None, warnings: list[str] | None = None,
            eval_note: str = "") -> LabResult:
    """The `precisionlab ptq` result: one row per layer, the summary, and (given an EvalRun) its task tables."""
    m = result.method
    held_out = result.evaluation_tokens > 0
    columns = ["layer", "shape", "status", f"{m} output err", "RTN output err", "ratio"]
    if held_out:
        columns += [f"{m} held-out err", "RTN held-out err", "held-out ratio"]
    columns += ["seconds", "peak MB", "details"]
    rows: list[list[Scalar]] = []
    for r in result.layers:
        row: list[Scalar] = [r.name, "x".join(str(d) for d in r.shape) or "-", r.status, r.output_error,
                             r.rtn_output_error, r.ratio]
        if held_out:
            row += [r.eval_output_error, r.rtn_eval_output_error, r.eval_ratio]
        row += [r.seconds, r.peak_mb, _details(r.details) or r.note]
        rows.append(row)
    baseline = {"rtn": "itself", "gptq": "RTN of the same scheme", "awq": "RTN of the same scheme",
                "smoothquant": "the same W8A8 without smoothing", "llm_int8": "plain int8 (no fp16 columns)",
                "kivi": "per-token keys and values at the same bits"}[m]
    layers = Table(key="layers", title=f"{m} {result.scheme}: layer-output error against the baseline", columns=columns,
                   rows=rows,
                   note=(f"output err = ||Y_hat - Y||_F / ||Y||_F over the layer's own full-precision inputs; baseline "
                         f"('RTN' columns): {baseline}. Calibration: {result.calibration_tokens} tokens of the "
                         f"calibration data" + (f"; held-out: {result.evaluation_tokens} tokens of the evaluation "
                                                  "part, never seen by the method" if held_out else "")
                         + "; ratio < 1: the method is better on that layer."),
                   formats={c: ".4g" for c in columns if "err" in c or "ratio" in c} | {"seconds": ".2f",
                                                                                     "peak MB": ".0f"})
    findings: dict[str, Scalar] = dict(result.findings())
    summary_keys = [k for k in findings if k.startswith(f"ptq.{m}.") and ".layers." not in k]
    summary = Table(key="summary", title=f"{m} {result.scheme}: summary (findings)", columns=["finding", "value"],
                    rows=[[k, findings[k]] for k in summary_keys],
                    note="layers_improved: layers whose output error is below the baseline's on the calibration "
                         "activations; output_error_ratio: mean over layers of method / baseline.")
    sections = [layers, summary]
    figures: list[Figure] = []
    text = (f"{m} {result.scheme}: {findings[f'ptq.{m}.layers_improved']}/{findings[f'ptq.{m}.layers_total']} "
            f"layers below the baseline, mean ratio {_fmt(findings[f'ptq.{m}.output_error_ratio'])}")
    exact = [r for r in result.layers if r.rtn_output_error == 0]
    if m in ("gptq", "awq") and exact:
        aligned = (f"RTN reproduces {len(exact)}/{len(result.layers)} layers exactly: the scheme's grid already "
                   "holds their weights (a model stored on that grid, as SmolLM2 is on Q4_1), so there is nothing "
                   "to improve there")
        text = f"{text}; {aligned}"
        layers.note += f" {aligned}."
    from precisionlab.labs.eval import embed_evaluation

    text = embed_evaluation(sections, figures, findings, text, evaluation, eval_note, warnings)
    return LabResult(name="ptq", title=f"Post-training quantization: {m} {result.scheme} on {params.get('model', '')}",
                     sections=sections, figures=figures, findings=findings, params=params, summary=text)


def _fmt(value: Any) -> str:
    return f"{value:.3g}" if isinstance(value, float) else str(value)
