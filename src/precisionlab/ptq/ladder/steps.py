"""The ladder's rungs, and the plan that keeps "cheapest first" true in bytes on the model at hand.

    steps = ladder_steps("int4")                  # the nine rungs, model-independent
    plan = plan_steps(steps, evaluator.planned_bytes)
    plan.steps                                    # what the ladder will test, in order
    plan.skipped                                  # rungs dearer than a later rung of the same remedy

Rungs at a target width (int4 shown; int2 / int8 and fp4 / fp8 alike), each keeping the remedies
before it unless it replaces one (`Step.remedy` names the remedy a rung tries):

    per-tensor      int4               granularity   one scale per weight matrix (embeddings, lm_head too)
    per-channel     int4:row           granularity   one scale per output row
    g128            int4:g128          granularity   one scale per 128 inputs of a row
    g64             int4:g64           granularity
    outliers-fp16   int4:g64 + fp16    outliers      each linear's OUTLIER_FRACTION input columns of
                    columns                          largest calibration magnitude kept in fp16
    keep-sensitive  step 5             sensitive     embeddings, lm_head, first and last blocks in float
    gptq-g128       int4:g128          gptq          GPTQ (replacing the outlier columns), block by block
    awq-g128        int4:g128          awq           AWQ, its scales folded into the norms
    qat-g128        int4:g128          qat           with qat_steps > 0: quantization-aware training
                                                     (precisionlab.qat) from the best GPTQ / AWQ step
    int8            int8:row           width         one bit width up (left out with widen=False)

Plan rule. A rung is skipped when a later rung of the same remedy stores no more bytes (computed
by the quant library for the layers the rung quantizes on this model): it would be tried first
although it costs at least as much as a rung that tries the same remedy further. On SmolLM2 the
576 input columns of most linears pad to 640 at g128, so g128 stores more than g64 and is skipped.
The calibrated rungs take their group size from a granularity rung (`Step.groups_of`): when that
rung is skipped they take the scheme of the rung that replaced it (gptq-g64 instead of gptq-g128).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

OUTLIER_FRACTION = 0.01
"""Share of each linear's input columns kept in fp16 at the outlier step (at least one)."""

CALIBRATED_OPTIONS: dict[str, dict[str, Any]] = {"gptq": {"sequential": "block"}, "awq": {}}
"""The step methods that run a PTQ method (`ptq.run.run_method`) on the calibration batches, with their
options: GPTQ block by block, each block calibrated on the model with the blocks before it quantized (the
paper's order; its other settings are run_method's defaults); AWQ as its reference code runs, every block on
float inputs."""
CALIBRATED = tuple(CALIBRATED_OPTIONS)

GRANULARITY = "granularity"
"""The remedy of the first rungs: finer scale groups."""

_WIDTH = re.compile(r"^(u?int|fp)(\d+)$")
_UP = {"int2": "int4", "int4": "int8", "int8": "int16", "fp4": "fp8", "fp8": "fp16"}
_ELEMENT = {"fp4": "e2m1", "fp8": "e4m3", "fp16": "fp16"}


@dataclass(frozen=True)
class Step:
    """One rung: what is quantized, how, and what is left in float."""

    name: str
    scheme: str
    """The weight scheme (the grid of every quantized layer)."""
    method: str = "rtn"
    """"rtn" (the scheme as it is), "outliers" (fp16 outlier input columns), "gptq" or "awq" (`CALIBRATED`)."""
    keep_sensitive: bool = False
    """Embeddings, lm_head and the first and last blocks left in float."""
    description: str = ""
    remedy: str = ""
    """What the rung tries; rungs of one remedy are compared by bytes (`plan_steps`)."""
    groups_of: str | None = None
    """A calibrated rung: the granularity rung whose scheme it uses."""


@dataclass(frozen=True)
class Skipped:
    """A rung left out of the plan: it stores `bytes`, at least as much as the later rung `instead`."""

    step: Step
    bytes: int
    instead: Step
    instead_bytes: int

    @property
    def reason(self) -> str:
        return (f"skipped: {self.bytes / 1e6:.2f} MB, not less than the later {self.instead.name} "
                f"({self.instead.scheme}, {self.instead_bytes / 1e6:.2f} MB) of the same remedy ({self.step.remedy})")


@dataclass(frozen=True)
class Plan:
    """The rungs the ladder tests, in order, and the ones it leaves out (with the bytes that decided it)."""

    steps: list[Step]
    skipped: list[Skipped] = field(default_factory=list)
    bytes: dict[str, int] = field(default_factory=dict)
    """The planned bytes of every rung that was compared, by name."""

    def notes(self) -> list[str]:
        out = [f"{k.step.name} ({k.step.scheme}) {k.reason}" for k in self.skipped]
        for s in self.steps:
            replaced = [k.step.name for k in self.skipped if s.groups_of and k.instead.name == s.groups_of]
            if replaced:
                out.append(f"{s.name} runs at {s.scheme}, the scheme of {s.groups_of} ({replaced[0]} was skipped)")
        return out


def ladder_steps(target: str = "int4", qat_steps: int = 0, widen: bool = True) -> list[Step]:
    """The rungs at `target` (int2, int4, int8, uint4 ..., fp4, fp8) in the order of the module docstring; with
    `qat_steps` a QAT rung of that many training steps before the width rung; `widen=False` drops the width rung
    (the ladder ends at the target width)."""
    text = str(target).strip().lower()
    base = text[1:] if text.startswith("u") else text
    if not _WIDTH.match(text) or base not in _UP:
        raise ValueError(f"ladder target must be a bit width such as int4, int8, int2, fp4 or fp8; got {target!r}")
    element = _ELEMENT.get(base, text)
    up = _UP[base]
    up_element = _ELEMENT.get(up, up)
    if qat_steps and not text.replace("u", "").startswith("int"):
        raise ValueError(f"--qat-steps: quantization-aware training here trains integer grids; target {target!r} "
                         "is a float width")
    steps = [
        Step("per-tensor", element, description="one scale per weight matrix; embeddings and lm_head quantized too",
             remedy=GRANULARITY),
        Step("per-channel", f"{element}:row", description="one scale per output row", remedy=GRANULARITY),
        Step("g128", f"{element}:g128", description="one scale per 128 inputs of a row", remedy=GRANULARITY),
        Step("g64", f"{element}:g64", description="one scale per 64 inputs of a row", remedy=GRANULARITY),
        Step("outliers-fp16", f"{element}:g64", "outliers",
             description=f"g64, and each linear's {OUTLIER_FRACTION:.0%} largest-magnitude input columns in fp16",
             remedy="outliers"),
        Step("keep-sensitive", f"{element}:g64", "outliers", True,
             description="and embeddings, lm_head, the first and last blocks in float", remedy="sensitive"),
        Step("gptq-g128", f"{element}:g128", "gptq", True,
             description="GPTQ, block by block, on the layers the previous step quantizes", remedy="gptq",
             groups_of="g128"),
        Step("awq-g128", f"{element}:g128", "awq", True,
             description="AWQ on the same layers, its scales folded into the norms", remedy="awq", groups_of="g128"),
    ]
    if qat_steps:
        steps.append(Step("qat-g128", f"{element}:g128", "qat", True, remedy="qat", groups_of="g128",
                          description=f"quantization-aware training, {qat_steps} steps, from the best GPTQ / AWQ step"))
    if widen:
        steps.append(Step(f"{up}", f"{up_element}:row", "rtn", True,
                          description=f"one bit width up: {up_element} per channel", remedy="width"))
    return steps


def plan_steps(steps: Sequence[Step], bytes_of: Callable[[Step], int] | None = None) -> Plan:
    """The plan over `steps` (see the module docstring); without `bytes_of` every rung is kept as it is.

    `bytes_of(step)` is the model's bytes with the rung applied (the quant library's count); it is asked only
    for rungs that share their remedy with another rung."""
    steps = list(steps)
    names = [s.name for s in steps]
    if len(set(names)) != len(names):
        raise ValueError(f"ladder step names must be unique, got {', '.join(names)}")
    if bytes_of is None:
        return Plan(steps)
    compared = [s for s in steps if s.remedy and sum(o.remedy == s.remedy for o in steps) > 1]
    cost = {s.name: int(bytes_of(s)) for s in compared}
    skipped: dict[str, Skipped] = {}
    for i in range(len(steps) - 1, -1, -1):  # from the last: a later rung's fate is known when it is compared
        step = steps[i]
        if step.name not in cost:
            continue
        instead = next((o for o in steps[i + 1:] if o.remedy == step.remedy and o.name not in skipped
                        and cost[o.name] <= cost[step.name]), None)
        if instead is not None:
            skipped[step.name] = Skipped(step, cost[step.name], instead, cost[instead.name])
    kept = []
    for step in steps:
        if step.name in skipped:
            continue
        if step.groups_of in skipped:
            kept.append(_regrouped(step, skipped[step.groups_of].instead))
        else:
            kept.append(step)
    return Plan(kept, [skipped[s.name] for s in steps if s.name in skipped], cost)


def _regrouped(step: Step, rung: Step) -> Step:
    """A calibrated rung moved to the scheme of the granularity rung that replaced its own."""
    return dataclasses.replace(step, name=f"{step.method}-{rung.name}", scheme=rung.scheme, groups_of=rung.name,
                               description=step.description + f" (at {rung.scheme}: {step.groups_of} was skipped)")
