"""Sequential GPTQ: calibrate and quantize layers in stages, each stage on the inputs the model gives while
the earlier stages hold their quantized weights (the option `sequential`, `support.SEQUENTIAL`).

Block layers are captured on their own block only, run on its recorded inputs (`calibration.block_calls`),
and the next block's inputs come from running the quantized block (`calibration.next_block_calls`): one pass
of the block per stage and one to hand its output on, instead of a forward from the embeddings per stage.
Layers outside the blocks come last, each stage captured by whole-model forwards. Every weight is restored
when done, or on an error (models.weights.replace_weights, one handle per stage: only the layers quantized so far
have their originals kept).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from typing import Any

from precisionlab import peers
from precisionlab.models.weights import replace_weights
from precisionlab.ptq.calibration import (
    CalibrationWarning,
    Capture,
    block_calls,
    capture,
    check_tokens,
    next_block_calls,
)
from precisionlab.ptq.measure import MemoryMeter
from precisionlab.ptq.records import PTQResult
from precisionlab.ptq.runners import common
from precisionlab.ptq.structure import block_of
from precisionlab.ptq.structure import blocks as model_blocks

QuantizeLayers = Callable[[Sequence[str], Capture, Capture | None], None]


def sequential(model: Any, names: Sequence[str], mode: str, calibration: Sequence[Any],
               evaluation: Sequence[Any] | None, meter: MemoryMeter, progress: common.Progress | None,
               result: PTQResult, quantize_layers: QuantizeLayers) -> None:
    """Calibrate and quantize `names` in the stages of `mode` ("block" or "layer"; module docstring)."""
    peers.torch("sequential GPTQ")
    prefix, children = model_blocks(model)
    installed: list[Any] = []  # one replace_weights handle per stage: only the quantized layers' originals
    by_block: dict[int | None, list[str]] = {}
    for n in names:
        b = block_of(n)
        inside = b is not None and b < len(children) and n.startswith(f"{prefix}.{b}." if prefix else f"{b}.")
        by_block.setdefault(b if inside else None, []).append(n)

    def stages(layers: list[str], cal_batches: Sequence[Any], ev_batches: Sequence[Any] | None) -> None:
        if not layers:
            return
        if mode == "block":
            sets = [layers]
        else:  # the sets of layers reading one input, in module order, from one batch's forward
            shared = capture(model, layers, cal_batches[:1]).shared_with
            sets = [[n for n in layers if shared[n] == leader] for leader in dict.fromkeys(shared[n] for n in layers)]
        for stage in sets:
            first = not result.calibration_tokens  # the progress of the first capture only
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", CalibrationWarning)  # checked below, for this stage's layers
                cal, ev = common.captures(model, stage, cal_batches, ev_batches, meter,
                                          progress=progress if first else None)
            if first:
                result.calibration_tokens, result.evaluation_tokens = cal.tokens, ev.tokens if ev else 0
            check_tokens(cal.stats)
            quantize_layers(stage, cal, ev)
            installed.append(replace_weights(model, ((n, result.quantized[n].dequantize()) for n in stage
                                                     if n in result.quantized)))

    numbered = sorted(b for b in by_block if b is not None)
    try:
        if numbered:
            with meter.section():
                block = f"{prefix}.{numbered[0]}" if prefix else str(numbered[0])
                cal_calls = block_calls(model, block, calibration)
                ev_calls = block_calls(model, block, evaluation) if evaluation else None
            for b in range(numbered[0], numbered[-1] + 1):
                stages(list(by_block.get(b, [])), cal_calls, ev_calls)
                if b < numbered[-1]:
                    cal_calls = next_block_calls(cal_calls, children[b + 1])
                    ev_calls = next_block_calls(ev_calls, children[b + 1]) if ev_calls else None
        if None in by_block:
            stages(list(by_block[None]), calibration, evaluation)
    finally:
        while installed:
            installed.pop().restore()
