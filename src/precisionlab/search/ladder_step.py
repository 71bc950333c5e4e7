"""A search's recipe as a rung of the escalation ladder, after the uniform (granularity) rungs.

    step, assignment = recipe_step("out/recipe.json")
    steps = with_recipe_step(ladder_steps("int4"), step)
    evaluator = RecipeStepEvaluator(loaded, tasks, max_drop, calibration, recipe=assignment, blocks=...)

The rung installs every layer of the recipe in its own format (`recipes.recipe_prepare`, the search's own
evaluation) and leaves the rest in float; the other rungs are the ladder's, unchanged. Its scheme names the
recipe's content (`mixed:<sha256 prefix>`), so a resumed ladder notices another recipe.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from precisionlab.ptq.ladder import ModelEvaluator
from precisionlab.ptq.ladder.steps import GRANULARITY, Step

RECIPE = "recipe"


def recipe_step(path: str | Path) -> tuple[Step, dict[str, str]]:
    """The rung of a recipe.json (ValueError, one line, for a file that is not one) and its layer -> format."""
    from precisionlab.search.recipes import load_recipe

    assignment = load_recipe(path)
    digest = hashlib.sha256(json.dumps(sorted(assignment.items())).encode()).hexdigest()[:12]
    counts: dict[str, int] = {}
    for fmt in assignment.values():
        counts[fmt] = counts.get(fmt, 0) + 1
    mix = ", ".join(f"{fmt} {n}" for fmt, n in sorted(counts.items()))
    step = Step(RECIPE, f"mixed:{digest}", RECIPE, description=f"the per-layer recipe {Path(path).name} ({mix})",
                remedy=RECIPE)
    return step, assignment


def with_recipe_step(steps: Sequence[Step], step: Step) -> list[Step]:
    """`steps` with `step` after the last granularity rung (the uniform schemes)."""
    out = list(steps)
    last = max((i for i, s in enumerate(out) if s.remedy == GRANULARITY), default=-1)
    out.insert(last + 1, step)
    return out


class RecipeStepEvaluator(ModelEvaluator):
    """The ladder's evaluator, with the recipe rung evaluated as the search evaluates a recipe."""

    def __init__(self, *args: Any, recipe: dict[str, str], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.recipe = dict(recipe)

    def selection(self, step: Step) -> tuple[list[str], list[str]]:
        if step.method == RECIPE:
            return sorted(self.recipe), []
        return super().selection(step)

    def _prepare(self, step: Step) -> Callable[[Any, Any, Any], Any]:
        if step.method == RECIPE:
            from precisionlab.search.recipes import recipe_prepare

            return recipe_prepare(self.recipe, f"{step.name} {step.scheme}")
        return super()._prepare(step)
