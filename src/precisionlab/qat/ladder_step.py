"""The ladder's QAT rung: quantization-aware training at the target width, from the best GPTQ / AWQ step so far.

    evaluator = ModelEvaluator(loaded, ..., methods={"qat": QATStep(steps=100)})
    ladder_steps("int4", qat_steps=100, widen=False)         # the rung, and no width step after it

When the ladder reaches the rung, `QATStep(evaluator, model, step, selected)` picks, among the steps evaluated
(or resumed) so far, the GPTQ / AWQ step at the rung's scheme with the smallest task difference, takes its
result (the evaluator's, or run again when it was resumed from the log: the calibrated runs are deterministic),
trains from it (`run_qat` with that start: its codes, scales and AWQ folds) on the ladder's calibration tokens cut
into windows of `seq_len`, and installs the trained codes as the step's candidate. The evaluator records the
result in `step_results`, so `precisionlab export --from ladder.json --step N` ships the trained codes. Outlier
steps are not starting points: their fp16 input columns are not on any integer grid. Without a calibrated step
tried, training starts from round-to-nearest of the selected block linears.

The ptq package does not import this one (qat builds on ptq): the command wires it in (cli.ladder).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from precisionlab.qat.train import TrainConfig

SEQ_LEN = 128
START_LR = 1e-2
"""The rung's learning rate, in grid steps (qat.fakequant.parametrization). It starts from GPTQ / AWQ codes, each
latent weight at the centre of its cell, half a step from a code change; Adam moves a weight by at most about lr of
its step per update, so N steps change no code unless lr * N > 0.5: 1e-2 lets 100 steps reach one step. (Measured
on SmolLM2 block 1 when the rate was in weight units, docs/qat.md: from GPTQ, 1e-4, about 1.4e-3 of the median step,
changed no code; 3e-4 changed 0.016 %; 1e-3, about 1.4e-2, changed 0.49 % and raised the perplexity increase.)"""


def windows(batches: Sequence[Any], seq_len: int) -> list[Any]:
    """The calibration batches cut into windows of `seq_len` tokens (the last of each batch may be shorter)."""
    out = []
    for batch in batches:
        for i in range(0, int(batch.shape[-1]), seq_len):
            out.append(batch[:, i:i + seq_len])
    return out


class QATStep:
    """The rung's `prepare` for ModelEvaluator(methods={"qat": ...}) (module docstring)."""

    def __init__(self, steps: int, lr: float = START_LR, seq_len: int = SEQ_LEN, seed: int = 0,
                 progress: Any = None) -> None:
        self.config = TrainConfig(steps=steps, lr=lr, seed=seed)
        if seq_len < 2:
            raise ValueError(f"the QAT step's windows need at least 2 tokens, got {seq_len}")
        self.seq_len, self.progress = seq_len, progress
        self.results: dict[str, Any] = {}
        self.started_from: dict[str, str] = {}
        """Rung name -> the step it trained from ("rtn" when none was tried)."""

    def start(self, evaluator: Any, model: Any, step: Any, selected: dict[str, Any]) -> Any:
        """The Start of the rung: the best calibrated step at its scheme so far, or None (RTN)."""
        from precisionlab.ptq.ladder.steps import CALIBRATED
        from precisionlab.qat.run import Start

        tried = [(diff, s) for s, diff in evaluator.tried.values()
                 if s.method in CALIBRATED and s.scheme == step.scheme and math.isfinite(diff)]
        if not tried:
            self.started_from[step.name] = "rtn"
            return None
        _, best = min(tried, key=lambda pair: pair[0])
        result = evaluator.step_results.get(best.name) or evaluator.calibrated_result(model, best, selected)
        self.started_from[step.name] = best.name
        return Start(best.method, dict(result.quantized), [(g.prev, s) for g, s in result.folds],
                     source=f"ladder step {best.name}")

    def __call__(self, evaluator: Any, model: Any, step: Any, selected: dict[str, Any]) -> Any:
        import torch

        from precisionlab.ptq.install import install_result
        from precisionlab.qat.run import run_qat

        if step.name not in self.results:  # a grown evaluation of the rung reuses its training
            start = self.start(evaluator, model, step, selected)
            names = [n for n, m in selected.items() if isinstance(m, torch.nn.Linear)
                     and n.startswith(f"{evaluator.prefix}.")]
            progress = self.progress or getattr(evaluator, "progress", None)
            if progress is not None:
                progress.note(f"{step.name}: {self.config.steps} QAT steps from {self.started_from[step.name]}")

            def tick(done: int, total: int, loss: float) -> None:
                if progress is not None:
                    progress.count(f"{step.name}: training", done, total)

            self.results[step.name] = run_qat(model, None if start is not None else step.scheme,
                                              windows(evaluator.calibration, self.seq_len), self.config,
                                              layers=None if start is not None else names, start=start,
                                              progress=tick)
        result = self.results[step.name]
        evaluator.step_results[step.name] = result
        return install_result(model, result, label=f"{step.name} {result.scheme}")
