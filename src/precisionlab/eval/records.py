"""The per-example files of an evaluation (eval.runner.EvalRun): eval_<task>_examples.jsonl, one record per example
with the reference's scores and every candidate's, paired, and eval_layers.jsonl, one record per layer and
candidate."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any


def example_records(run: Any, task: Any) -> Iterator[dict[str, Any]]:
    """One record per example: id, group, the reference's scores and every candidate's, paired."""
    reference = task.reference_examples
    for i, item in enumerate(task.spec.items):
        yield {
            "task": task.name,
            "id": item.id,
            "group": item.group,
            "reference": {k: v[i] for k, v in reference.items()},
            "candidates": {o.candidate: {k: v[i] for k, v in o.per_example.items()} for o in task.outcomes},
        }


def write_examples(run: Any, out_dir: Path) -> list[Path]:
    """eval_<task>_examples.jsonl per task and eval_layers.jsonl (per layer, per candidate) under out_dir."""
    from precisionlab._atomic import atomic_write_text
    from precisionlab.results import jsonable

    paths = []
    for task in run.tasks:
        lines = [json.dumps(jsonable(r), allow_nan=False) for r in example_records(run, task)]
        paths.append(atomic_write_text(out_dir / f"eval_{task.name}_examples.jsonl", "\n".join(lines) + "\n"))
    layer_lines = [json.dumps(jsonable({"candidate": c.label, **layer}), allow_nan=False)
                   for c in run.candidates for layer in c.layers]
    if layer_lines:
        paths.append(atomic_write_text(out_dir / "eval_layers.jsonl", "\n".join(layer_lines) + "\n"))
    return paths
