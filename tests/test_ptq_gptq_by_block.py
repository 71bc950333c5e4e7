"""GPTQ / RTN capture their inputs one block at a time (one block's Hessians in memory), with the same result.

Expected values: the names of each capture (block by block, read from the layer names), and GPTQ of block 1
alone on the float model: the same codes as block 1's in a run over blocks 0 and 1 (every layer sees the float
model's inputs in the non-sequential mode, so the two runs must agree bit for bit).
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from tests.model_helpers import require_peers, tiny_llama

require_peers()
torch = pytest.importorskip("torch")

from precisionlab.ptq import CalibrationWarning, run_method  # noqa: E402
from precisionlab.ptq.runners import gptq as gptq_runner  # noqa: E402


def batches(n: int = 3, length: int = 48) -> list:  # type: ignore[type-arg]
    g = torch.Generator().manual_seed(0)
    return [torch.randint(0, 128, (1, length), generator=g) for _ in range(n)]


@pytest.mark.parametrize("method", ["gptq", "rtn"])
def test_captured_block_by_block_with_the_same_codes(method: str, monkeypatch: pytest.MonkeyPatch) -> None:
    model = tiny_llama(4)
    calls: list[list[str]] = []
    real = gptq_runner.captures

    def recording(model, names, *args, **kwargs):  # type: ignore[no-untyped-def]
        calls.append(list(names))
        return real(model, names, *args, **kwargs)

    monkeypatch.setattr(gptq_runner, "captures", recording)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", CalibrationWarning)
        both = run_method(model, method, "int4:g32", batches(), evaluation=batches(2), blocks=[0, 1])
        calls_both = list(calls)
        alone = run_method(model, method, "int4:g32", batches(), evaluation=batches(2), blocks=[1])
    assert [sorted({n.split(".")[2] for n in c}) for c in calls_both] == [["0"], ["1"]]
    assert all(len(c) == 7 for c in calls_both)
    assert both.calibration_tokens == alone.calibration_tokens == 144
    assert both.evaluation_tokens == 96
    for name, q in alone.quantized.items():
        np.testing.assert_array_equal(both.quantized[name].dequantize(), q.dequantize())
    assert [r.name for r in both.layers] == [n for c in calls_both for n in c]
