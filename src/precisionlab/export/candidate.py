"""A saved result as an evaluation candidate: what `export --from` would ship, evaluated as it would ship.

    candidate = result_candidate("out/recipe.json")          # or a ptq / ladder --out JSON (step=N),
    runner.evaluate(loaded, [candidate], tasks, max_drop)     # a ptq --save .safetensors file

The candidate installs the result through `export.plan.prepare`, the path `export` itself takes: a recipe's
per-layer schemes rounded to nearest, a PTQ result's stored codes (AWQ's folds first), a ladder step's scheme
or codes. So the evaluated model is exactly the exported one. The evaluation's --include / --exclude do not
apply: the result names its own layers.

The label is `from:<file stem>` (`:step<N>` for a ladder step), dots and spaces made `_` so it stays one
findings key part.
"""

from __future__ import annotations

import errno
import os
import re
from collections.abc import Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from precisionlab.export.results import Recipe, read_result


def result_label(path: str | Path, step: int | None = None) -> str:
    """`from:<stem>[:step<N>]` (see the module docstring)."""
    stem = re.sub(r"[^A-Za-z0-9_:+=-]", "_", Path(path).stem) or "result"
    return f"from:{stem}" + (f":step{step}" if step is not None else "")


def result_candidate(path: str | Path, step: int | None = None, label: str | None = None) -> Any:
    """An eval Candidate that installs the saved result at `path`: FileNotFoundError when there is no such file (the
    CLI's `error: no such file: PATH`), ValueError (one line, naming the file) when it is not a saved result. It
    rebuilds itself from the file in an evaluation's worker process (eval.workers)."""
    import dataclasses

    where = Path(path).expanduser()
    if not where.exists():
        raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), str(path))
    if where.is_dir():
        raise ValueError(f"--from {path}: a directory; give the saved result inside it (ptq.json, ladder.json, "
                         "recipe.json or a ptq --save .safetensors file)")
    recipe = read_result(path, step)
    label = label or result_label(path, step)
    rebuild = (result_candidate, (str(Path(path).expanduser().resolve()), step, label))
    return dataclasses.replace(recipe_candidate(recipe, label), rebuild=rebuild)


def recipe_candidate(recipe: Recipe, label: str) -> Any:
    """An eval Candidate that installs `recipe` as export would (export.plan.prepare)."""
    from precisionlab.eval.candidates import Candidate
    from precisionlab.export.plan import prepare

    def install(model: Any, include: Sequence[str], exclude: Sequence[str] | None) -> Any:
        return prepare(SimpleNamespace(model=model), recipe, keep_codes=False).report  # values only

    return Candidate(recipe.scheme or "mixed", name=label, prepare=install)
