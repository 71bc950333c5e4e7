"""Accelerator presets against the numbers the seeds and the cited datasheets give."""

from __future__ import annotations

import pytest

from precisionlab.hardware import get_accelerator


def test_seed_figures() -> None:
    # seeds/000: "MI300X ≈ 5.3 TB/s, H100 ≈ 3.35 TB/s"; seeds/004: H100 bf16 -> fp8 "989.5 to 1979 TFLOP/s,
    # dense"; B200 "FP4 9 PFLOPS dense ... against 4.5 for FP8"
    h100, mi300x, b200 = get_accelerator("h100"), get_accelerator("mi300x"), get_accelerator("b200")
    assert h100.bandwidth_gbs == 3350 and mi300x.bandwidth_gbs == 5300
    assert (h100.peak_tflops["bf16"], h100.peak_tflops["fp8"]) == (989.5, 1979)
    assert (b200.peak_tflops["fp4"], b200.peak_tflops["fp8"]) == (9000, 4500)
    # seeds/000 "FP8 peak throughput is 16x the FP32 peak" (CDNA 3 white paper, MI300X)
    assert mi300x.peak_tflops["fp8"] / mi300x.peak_tflops["fp32"] == pytest.approx(16, rel=1e-3)
    # seeds/000's A100 table (Ampere whitepaper): fp32 19.5, tf32 156, fp16/bf16 312, int8 624
    a100 = get_accelerator("a100")
    assert [a100.peak_tflops[k] for k in ("fp32", "tf32", "bf16", "fp16", "int8")] == [19.5, 156, 312, 312, 624]


def test_rtx4090_rates_share_one_accumulator() -> None:
    # Ada whitepaper, RTX 4090, dense: fp16/bf16 with fp32 accumulate 165.2; fp8 with fp32 accumulate 330.3
    # (660.6 is fp8 with fp16 accumulate); int8 660.6 TOPS. The preset states "fp32 accumulate", so fp8 is
    # twice bf16, not four times
    rtx = get_accelerator("rtx4090")
    assert rtx.peak_tflops["bf16"] == 165.2
    assert rtx.peak_tflops["fp8"] == 330.3
    assert rtx.peak_tflops["int8"] == 660.6
