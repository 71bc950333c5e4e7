"""`quant compare`: every scheme on every float tensor of a user's .npy or .safetensors file.

Not a registered lab (it needs a file). Tensors are memory-mapped and processed one at a
time; bf16 and fp8 tensors are decoded exactly to float32; integer tensors are skipped
(and listed). Non-finite values are refused with an error that names the tensor, since
no integer scheme can store them. Per tensor and scheme: relative error, SQNR (dB), max
error, fraction clipped, bytes and bits per element (see `precisionlab.quant.metrics`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np

from precisionlab.labs.result import Figure, LabResult, Scalar, Series, Table
from precisionlab.quant import error_metrics, parse_scheme, quantize
from precisionlab.quant.safetensors_io import TAG_KEY, read_safetensors
from precisionlab.quant.scheme import Granularity

DEFAULT_SCHEMES = ("int8:row", "int4:g128", "nf4:g64", "mxfp8", "mxfp4", "nvfp4", "dsv3_weight")

Progress = Callable[[str], None]


def iter_tensors(path: Path) -> tuple[list[tuple[str, Callable[[], np.ndarray]]], list[str]]:
    """(name, loader) for each float tensor of the file, and the names of skipped integer tensors."""
    suffix = path.suffix.lower()
    if not path.is_file():
        raise OSError(f"no such file: {path}")
    if suffix == ".npy":
        try:
            arr = np.load(path, mmap_mode="r", allow_pickle=False)
        except (ValueError, OSError, EOFError) as exc:
            raise ValueError(f"{path}: not a readable .npy array ({exc})") from None
        if arr.dtype.kind != "f":
            raise ValueError(f"{path}: holds {arr.dtype} values; compare needs a float array")
        return [(path.stem, lambda: np.asarray(arr, dtype=np.float32 if arr.dtype == np.float16 else arr.dtype))], []
    if suffix == ".safetensors":
        entries, metadata = read_safetensors(path)
        if TAG_KEY in metadata:
            raise ValueError(f"{path}: holds quantized tensors (precisionlab tag); compare reads source tensors")
        tensors, skipped = [], []
        for name, entry in entries.items():
            if entry.dtype in ("F64", "F32", "F16", "BF16", "F8_E4M3", "F8_E5M2") and entry.raw.size:
                tensors.append((name, entry.to_float32))
            else:
                skipped.append(name)
        if not tensors:
            raise ValueError(f"{path}: no float tensors to compare")
        return tensors, skipped
    raise ValueError(f"compare reads .npy or .safetensors files, got {path.name!r}")


def _applicable(scheme: str, ndim: int) -> bool:
    return ndim >= 2 or parse_scheme(scheme).granularity is not Granularity.BLOCK


def compare(path: Path, schemes: list[str], progress: Progress | None = None) -> LabResult:
    parsed = list(dict.fromkeys(str(parse_scheme(s)) for s in schemes))  # fail fast on a bad scheme; no repeats
    tensors, skipped = iter_tensors(path)
    rows: list[list[Scalar]] = []
    findings: dict[str, Scalar] = {}
    points: dict[str, tuple[list[float], list[float]]] = {s: ([], []) for s in parsed}
    for name, load in tensors:
        arr = load()
        bad = int(np.size(arr) - np.count_nonzero(np.isfinite(arr)))
        if bad:
            raise ValueError(f"tensor {name!r} holds {bad} NaN/inf value(s); the schemes here store finite values "
                             "only (MX/NVFP4 would poison whole blocks): clean the tensor first")
        for scheme in parsed:
            if progress is not None:
                progress(f"{name}: {scheme}")
            if not _applicable(scheme, arr.ndim):
                rows.append([name, str(tuple(arr.shape)), scheme, None, None, None, None, None, None, None])
                continue
            q = quantize(arr, scheme)
            m = error_metrics(arr, q)
            rows.append([name, str(tuple(arr.shape)), scheme, m.rel_err, m.sqnr_db, m.max_err, m.frac_clipped,
                         q.nbytes, q.bits_per_element, q.padded_elements])
            key = f"compare.{name}.{scheme}"
            findings[f"{key}.rel_err"] = m.rel_err
            findings[f"{key}.sqnr_db"] = m.sqnr_db
            findings[f"{key}.bits_per_element"] = q.bits_per_element
            points[scheme][0].append(q.bits_per_element)
            points[scheme][1].append(m.rel_err)
    note = ("rel err = ||x_hat - x|| / ||x||; SQNR = 10 log10(sum x^2 / sum err^2); clipped = share of elements "
            "that saturated (beyond their block's largest value, or asym range, by more than half the top step); "
            "bytes include scales, zero points, padding, outlier rows and tensor scales; padded = zeros added to fill "
            "the last group of each row (stored and counted in the bytes). Empty cells: a 2-D block scheme on a "
            "1-D tensor.")
    if skipped:
        note += f" Skipped integer tensors: {', '.join(skipped)}."
    table = Table(key="compare", title=f"Schemes on {path.name}",
                  columns=["tensor", "shape", "scheme", "rel err", "SQNR dB", "max err", "clipped", "bytes",
                           "bits/elem", "padded"],
                  rows=rows, note=note,
                  formats={"rel err": ".4g", "SQNR dB": ".2f", "max err": ".4g", "clipped": ".3g",
                           "bits/elem": ".4g"})
    figure = Figure(key="error_vs_bits", title=f"Error against bits per element: {path.name}",
                    xlabel="bits per element (scales included)", ylabel="relative error",
                    series=[Series(s, xs, ys, kind="scatter") for s, (xs, ys) in points.items() if xs],
                    yscale="log")
    return LabResult(name="quant_compare", title=f"Quantization schemes compared on {path.name}",
                     sections=[table], figures=[figure], findings=findings,
                     params={"file": str(path), "schemes": ",".join(parsed)})


def progress_total(path: Path, schemes: list[str]) -> int:
    tensors, _ = iter_tensors(path)
    return len(tensors) * len({str(parse_scheme(s)) for s in schemes})


def split_schemes(values: tuple[str, ...]) -> Iterator[str]:
    for value in values:
        for part in value.split(","):
            if part.strip():
                yield part.strip()
