"""Accelerator presets: memory, bandwidth and dense peak rate per precision, with sources.

Shared by the GEMM roofline and the capacity model. Units are the vendors' own:
memory in decimal GB (1e9 bytes), bandwidth in GB/s (1e9 bytes/s), peak rates in dense
(no structured sparsity) TFLOP/s, or TOP/s for integer precisions. A precision the part
has no matrix path for is simply absent from `peak_tflops`.
"""

from __future__ import annotations

import dataclasses
import difflib
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Accelerator:
    name: str
    memory_gb: float
    bandwidth_gbs: float
    peak_tflops: dict[str, float] = field(default_factory=dict)
    source: str = ""
    fp8_formats: tuple[str, str] = ("e4m3", "e5m2")
    """The (E4M3, E5M2) encodings its matrix units implement: OCP on NVIDIA Hopper, Ada and
    Blackwell; FNUZ on AMD gfx940/941/942 (MI300X), per AMD's HIP low-precision types reference."""

    @property
    def memory_bytes(self) -> float:
        return self.memory_gb * 1e9

    @property
    def bandwidth_bytes_per_s(self) -> float:
        return self.bandwidth_gbs * 1e9

    def peak(self, precision: str) -> float:
        """Dense peak in FLOP/s (or OP/s) for a precision name such as 'bf16' or 'fp8'."""
        if precision not in self.peak_tflops:
            known = ", ".join(self.peak_tflops)
            raise ValueError(f"{self.name} lists no {precision} peak rate; it lists {known}")
        return self.peak_tflops[precision] * 1e12

    def ridge_flop_per_byte(self, precision: str) -> float:
        """Arithmetic intensity at which the compute ceiling meets the bandwidth ceiling."""
        return self.peak(precision) / self.bandwidth_bytes_per_s

    def with_overrides(self, memory_gb: float | None = None, bandwidth_gbs: float | None = None,
                       peak_tflops: dict[str, float] | None = None) -> Accelerator:
        """A copy with datasheet numbers replaced (e.g. from the command line)."""
        for label, value in (("memory", memory_gb), ("bandwidth", bandwidth_gbs)):
            if value is not None and not _positive_finite(value):
                raise ValueError(f"{label} must be a positive number up to {MAX_OVERRIDE:g}, got {value}")
        peaks = dict(self.peak_tflops)
        for precision, value in (peak_tflops or {}).items():
            if not _positive_finite(value):
                raise ValueError(f"peak rate for {precision} must be a positive number up to {MAX_OVERRIDE:g}, "
                                 f"got {value}")
            peaks[precision] = value
        return dataclasses.replace(
            self,
            name=self.name if memory_gb is None and bandwidth_gbs is None and not peak_tflops else f"{self.name}*",
            memory_gb=memory_gb if memory_gb is not None else self.memory_gb,
            bandwidth_gbs=bandwidth_gbs if bandwidth_gbs is not None else self.bandwidth_gbs,
            peak_tflops=peaks,
        )


MAX_OVERRIDE = 1e290
"""Largest override: finite even in base units (GB -> bytes, TFLOP/s -> FLOP/s) and in products of them."""


def _positive_finite(value: float) -> bool:
    return 0 < value <= MAX_OVERRIDE


# Dense rates; sparse figures on datasheets are twice these.
PRESETS: dict[str, Accelerator] = {
    # NVIDIA H100 SXM5 80GB datasheet: 3.35 TB/s HBM3; 989.5 TFLOP/s bf16/fp16, 1979 fp8, 494.7 tf32,
    # 67 fp32/fp64 (tensor), 1979 int8 TOPS (half of the datasheet's with-sparsity numbers).
    "h100": Accelerator("H100 SXM 80GB", 80, 3350,
                        {"fp64": 67, "fp32": 67, "tf32": 494.7, "bf16": 989.5, "fp16": 989.5, "fp8": 1979,
                         "int8": 1979}, "NVIDIA H100 Tensor Core GPU datasheet (SXM5)"),
    # NVIDIA H200 SXM 141GB datasheet: 4.8 TB/s HBM3e; same tensor rates as H100 SXM.
    "h200": Accelerator("H200 SXM 141GB", 141, 4800,
                        {"fp64": 67, "fp32": 67, "tf32": 494.7, "bf16": 989.5, "fp16": 989.5, "fp8": 1979,
                         "int8": 1979}, "NVIDIA H200 Tensor Core GPU datasheet (SXM)"),
    # NVIDIA DGX B200 datasheet, per GPU (the system's figures over 8): 1,440 GB -> 180 GB HBM3e,
    # 64 TB/s -> 8 TB/s (the later HGX B200 table lists 7.7 TB/s; override with --bandwidth), dense
    # 2.25 PFLOP/s bf16, 4.5 fp8, 9 fp4 (“Low precision: FP8, FP4, and microscaling”: FP4 9 PFLOPS dense,
    # 18 sparse, against 4.5 for FP8), 1.1 tf32, 37 TF fp64 (296 TF over 8).
    "b200": Accelerator("B200 180GB", 180, 8000,
                        {"fp64": 37, "fp32": 75, "tf32": 1100, "bf16": 2250, "fp16": 2250, "fp8": 4500,
                         "fp4": 9000, "int8": 4500},
                        "NVIDIA DGX B200 datasheet (per GPU); “Low precision: FP8, FP4, and microscaling” "
                        "(FP4 vs FP8 peaks)"),
    # AMD Instinct MI300X datasheet: 192 GB HBM3 at 5.3 TB/s; dense 1307.4 TFLOP/s fp16/bf16,
    # 2614.9 fp8 and int8, 653.7 tf32, 163.4 fp32 and fp64 (matrix).
    "mi300x": Accelerator("MI300X 192GB", 192, 5300,
                          {"fp64": 163.4, "fp32": 163.4, "tf32": 653.7, "bf16": 1307.4, "fp16": 1307.4,
                           "fp8": 2614.9, "int8": 2614.9}, "AMD Instinct MI300X datasheet; CDNA 3 white paper",
                          fp8_formats=("e4m3fnuz", "e5m2fnuz")),
    # NVIDIA A100 80GB SXM: 2.039 TB/s HBM2e; 312 bf16/fp16, 156 tf32, 19.5 fp32 (vector), 624 int8
    # (the A100 table of the “Precision & Quantization” course notes, from the Ampere architecture whitepaper).
    "a100": Accelerator("A100 SXM 80GB", 80, 2039,
                        {"fp64": 19.5, "fp32": 19.5, "tf32": 156, "bf16": 312, "fp16": 312, "int8": 624},
                        "NVIDIA A100 datasheet; Ampere architecture whitepaper"),
    # NVIDIA GeForce RTX 4090 (Ada whitepaper, dense, fp32 accumulate): 24 GB GDDR6X at 1008 GB/s;
    # 165.2 fp16/bf16, 82.6 tf32, 82.6 fp32 (shader), 330.3 fp8, 660.6 int8 TOPS (int32 accumulate).
    # GeForce tensor cores run fp32 accumulation at half rate: the whitepaper's 330.3 fp16 and 660.6 fp8
    # figures are with fp16 accumulation, which no training or inference recipe here uses.
    "rtx4090": Accelerator("RTX 4090 24GB", 24, 1008,
                           {"fp32": 82.6, "tf32": 82.6, "bf16": 165.2, "fp16": 165.2, "fp8": 330.3,
                            "int8": 660.6}, "NVIDIA Ada Lovelace architecture whitepaper (RTX 4090)"),
}

_ALIASES = {
    "h100-80gb": "h100", "h100_sxm": "h100", "h200-141gb": "h200", "mi300": "mi300x", "a100-80gb": "a100",
    "4090": "rtx4090", "rtx-4090": "rtx4090",
}


def list_accelerators() -> list[Accelerator]:
    return list(PRESETS.values())


def preset_keys() -> list[str]:
    return list(PRESETS)


def get_accelerator(name: str) -> Accelerator:
    """A preset by key (h100, h200, b200, mi300x, a100, rtx4090); errors name close matches."""
    key = name.strip().lower().replace(" ", "")
    key = _ALIASES.get(key, key)
    if key in PRESETS:
        return PRESETS[key]
    close = difflib.get_close_matches(key, [*PRESETS, *_ALIASES], n=3, cutoff=0.4)
    hint = f"; did you mean {', '.join(close)}?" if close else ""
    raise ValueError(f"unknown accelerator {name!r}{hint} (presets: {', '.join(PRESETS)})")


__all__ = ["PRESETS", "Accelerator", "get_accelerator", "list_accelerators", "preset_keys"]
