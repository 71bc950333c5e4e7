"""What a ladder run records so that `precisionlab export --from ladder.json --step N` ships what step N evaluated.

    step_findings(evaluator, result, folder)

appends, per step i: ladder.steps.<i>.include / .exclude (the step's layer patterns, comma-joined, as
models.weights.linear_layers reads them) and, for a GPTQ / AWQ step, ladder.steps.<i>.weights: the file
(in `folder`, the --out staging folder, beside ladder.json) holding the step's codes as a tagged precisionlab
safetensors file, AWQ's folded scales with them (the format `precisionlab ptq --save` writes).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any


def step_findings(evaluator: Any, result: Any, folder: Path | None) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for record in result.steps:
        base = f"ladder.steps.{record.index}"
        include, exclude = evaluator.selection(record.step)
        out[f"{base}.include"] = ",".join(include)
        out[f"{base}.exclude"] = ",".join(exclude)
        ptq = getattr(evaluator, "step_results", {}).get(record.step.name)
        if ptq is not None and folder is not None:
            name = f"step{record.index}-{record.step.method}.safetensors"
            save_result(ptq, folder / name)
            out[f"{base}.weights"] = name
    return out


def save_result(result: Any, path: Path) -> None:
    """A PTQResult's quantized layers (and AWQ's folded scales) as a tagged safetensors file."""
    from precisionlab.quant.safetensors_io import PassThrough, save_quantized

    passthrough = {f"{group.prev}.awq_scales": PassThrough(
        "F64", scales.astype("float64"),
        f"folded AWQ scales: {group.prev} is divided by them, {', '.join(group.layers)} multiplied")
        for group, scales in result.folds}
    save_quantized(path, dict(result.quantized), passthrough)
