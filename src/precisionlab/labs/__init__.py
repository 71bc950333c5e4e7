"""Lab registry. A lab is a module in this package that defines `LAB = Lab(...)`.

Each lab calls domain code and returns a LabResult; it never prints. `precisionlab run`
runs every registered lab in `order` with its default options (or `quick` ones).
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from precisionlab.results import Figure, LabResult, Scalar, Series, Table


@dataclass(frozen=True)
class Lab:
    name: str
    title: str
    run: Callable[..., LabResult]
    order: int = 100
    quick: dict[str, Any] = field(default_factory=dict)
    """Options that make the lab fast enough for tests and `precisionlab run --quick`."""


def all_labs() -> list[Lab]:
    """Every lab module's LAB, sorted by order then name."""
    labs: list[Lab] = []
    for info in pkgutil.iter_modules(__path__):
        if info.name.startswith("_"):
            continue
        module = importlib.import_module(f"{__name__}.{info.name}")
        lab = getattr(module, "LAB", None)
        if isinstance(lab, Lab):
            labs.append(lab)
    return sorted(labs, key=lambda lab: (lab.order, lab.name))


def select_labs(names: list[str]) -> list[Lab]:
    """The labs named, in run order. A command's name selects every lab of that command
    ('quant' selects quant_demo and quant_drill). ValueError for none or an unknown name."""
    labs = all_labs()
    listing = ", ".join(lab.name for lab in labs)
    if not names:
        raise ValueError(f"give at least one lab name; labs: {listing}")

    def chosen_by(name: str) -> list[Lab]:
        return [lab for lab in labs if lab.name == name or lab.name.startswith(f"{name}_")]

    unknown = sorted({name for name in names if not chosen_by(name)})
    if unknown:
        raise ValueError(f"unknown lab(s) {', '.join(unknown)}; labs: {listing}")
    return [lab for lab in labs if any(lab in chosen_by(name) for name in names)]


def get_lab(name: str) -> Lab:
    labs = {lab.name: lab for lab in all_labs()}
    if name not in labs:
        raise ValueError(f"unknown lab {name!r}; labs: {', '.join(labs)}")
    return labs[name]


__all__ = ["Figure", "Lab", "LabResult", "Scalar", "Series", "Table", "all_labs", "get_lab", "select_labs"]
