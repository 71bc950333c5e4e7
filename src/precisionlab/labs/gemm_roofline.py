"""The GEMM lab's roofline figure, drawn by both backends (labs.gemm on the CPU, labs.gemm_gpu on a GPU):
the measured ceilings (and a datasheet's), the tile lines, and where each timed kernel sits."""

from __future__ import annotations

from precisionlab.gemm.roofline import Ceilings, roof_curve
from precisionlab.gemm.timing import Timing
from precisionlab.results import Figure, Scalar, Series

ROOF_PRECISIONS = ("fp32", "tf32", "bf16", "fp16", "fp8")


def roofline_figure(hardware: list[Timing], measured: Ceilings, datasheet: Ceilings | None,
                    params: dict[str, Scalar]) -> Figure:
    tile = int(params["tile"]) if isinstance(params["tile"], int) else 32
    xs = [t.intensity for t in hardware] + [tile / 4, tile / 2]
    x_min, x_max = min(xs) / 4, max(xs) * 4
    series: list[Series] = []
    for roof in [measured] + ([datasheet] if datasheet is not None else []):
        for precision in ROOF_PRECISIONS:
            if precision in roof.peaks_gflops:
                x, y = roof_curve(roof, precision, x_min, max(x_max, 4 * roof.ridge(precision)))
                series.append(Series(f"{roof.name} {precision}", x, y, style="-"))
    for t in hardware:
        series.append(Series(f"{t.name} {t.shape}", [t.intensity], [t.gflops], kind="scatter"))
    return Figure(
        key="roofline", title="Roofline: measured ceilings and where each kernel sits",
        xlabel="arithmetic intensity (FLOP/byte)", ylabel="GFLOP/s", xscale="log", yscale="log", series=series,
        vlines=[(tile / 4, f"tiled fp32 T/4 (T={tile})"), (tile / 2, f"tiled 16-bit T/2 (T={tile})")],
    )
