"""`quant compare`: every scheme on every float tensor of a user's .npy or .safetensors file.

Not a registered lab (it needs a file). Tensors are read (.npy: memory-mapped) and processed one at a
time; bf16 and fp8 tensors are decoded exactly to float32; integer tensors are skipped
(and listed). Non-finite values are refused with an error that names the tensor, since
no integer scheme can store them. Per tensor and scheme: relative error, SQNR (dB), max
error, fraction clipped, bytes and bits per element (see `precisionlab.quant.metrics`).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np

from precisionlab.labs.result import Figure, LabResult, Scalar, Series, Table
from precisionlab.quant import QuantizationWarning, QuantizedTensor, error_metrics, parse_scheme, quantize
from precisionlab.quant.diagnostics import CLIPPED_WARN_FRACTION, FLOORED_WARN_FRACTION, warning_messages
from precisionlab.quant.safetensors_io import TAG_KEY, read_safetensors
from precisionlab.quant.scheme import Granularity

DEFAULT_SCHEMES = ("int8:row", "int4:g128", "nf4:g64", "mxfp8", "mxfp4", "nvfp4", "dsv3_weight")

Progress = Callable[[str], None]

_NPY_MAGIC = b"\x93NUMPY"


SOURCE_DTYPES = {"F64": "float64", "F32": "float32", "F16": "float16", "BF16": "bfloat16", "F8_E4M3": "float8_e4m3fn",
                 "F8_E5M2": "float8_e5m2"}
"""safetensors float dtypes and the name a quantized tensor records as its source dtype."""


def iter_tensors(path: Path) -> tuple[list[tuple[str, Callable[[], np.ndarray], str]], list[str]]:
    """(name, loader, source dtype) for each float tensor of the file, and the names of skipped integer tensors."""
    suffix = path.suffix.lower()
    if not path.is_file():
        raise OSError(f"no such file: {path}")
    if suffix == ".npy":
        with path.open("rb") as handle:
            if handle.read(len(_NPY_MAGIC)) != _NPY_MAGIC:  # np.load would try to unpickle it
                raise ValueError(f"{path}: not a .npy file (it does not start with the NumPy magic bytes)")
        try:
            arr = np.load(path, mmap_mode="r", allow_pickle=False)
        except (ValueError, OSError, EOFError) as exc:
            raise ValueError(f"{path}: not a readable .npy array ({exc})") from None
        if arr.dtype.kind != "f":
            raise ValueError(f"{path}: holds {arr.dtype} values; quantizing needs a float array")
        if arr.size == 0:
            raise ValueError(f"{path}: holds an empty array of shape {arr.shape}; there is nothing to quantize")
        load = lambda: np.asarray(arr, dtype=np.float32 if arr.dtype == np.float16 else arr.dtype)  # noqa: E731
        return [(path.stem, load, arr.dtype.name)], []
    if suffix == ".safetensors":
        entries, metadata = read_safetensors(path)
        if TAG_KEY in metadata:
            raise ValueError(f"{path}: holds quantized tensors (precisionlab tag); source tensors are needed")
        tensors, skipped = [], []
        for name, entry in entries.items():
            if entry.dtype in SOURCE_DTYPES and entry.size:
                tensors.append((name, entry.to_float32, SOURCE_DTYPES[entry.dtype]))
            else:
                skipped.append(name)
        if not tensors:
            raise ValueError(f"{path}: no non-empty float tensors to quantize")
        return tensors, skipped
    raise ValueError(f"quant compare and save read .npy or .safetensors files, got {path.name!r}")


def quantize_named(name: str, arr: np.ndarray, scheme: str) -> QuantizedTensor:
    """quantize(arr, scheme), its QuantizationWarnings warned again with the tensor's name in front."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", QuantizationWarning)
        q = quantize(arr, scheme)
    for record in caught:
        if issubclass(record.category, QuantizationWarning):
            warnings.warn(f"tensor {name!r}: {record.message}", QuantizationWarning, stacklevel=3)
        else:
            warnings.warn_explicit(record.message, record.category, record.filename, record.lineno)
    return q


def _applicable(scheme: str, ndim: int) -> bool:
    return ndim >= 2 or parse_scheme(scheme).granularity is not Granularity.BLOCK


def compare(path: Path, schemes: list[str], progress: Progress | None = None) -> LabResult:
    parsed = list(dict.fromkeys(str(parse_scheme(s)) for s in schemes))  # fail fast on a bad scheme; no repeats
    tensors, skipped = iter_tensors(path)
    rows: list[list[Scalar]] = []
    findings: dict[str, Scalar] = {}
    points: dict[str, tuple[list[float], list[float]]] = {s: ([], []) for s in parsed}
    warned: list[str] = []
    for name, load, _ in tensors:
        arr = load()
        bad = int(np.size(arr) - np.count_nonzero(np.isfinite(arr)))
        if bad:
            raise ValueError(f"tensor {name!r} holds {bad} NaN/inf value(s); the schemes here store finite values "
                             "only (MX/NVFP4 would poison whole blocks): clean the tensor first")
        for scheme in parsed:
            if progress is not None:
                progress(f"{name}: {scheme}")
            if not _applicable(scheme, arr.ndim):
                rows.append([name, str(tuple(arr.shape)), scheme, *[None] * 8])
                continue
            q = quantize_named(name, arr, scheme)
            m = error_metrics(arr, q)
            floored = q.diagnostics.floored_fraction if q.diagnostics is not None else None
            rows.append([name, str(tuple(arr.shape)), scheme, m.rel_err, m.sqnr_db, m.max_err, m.frac_clipped,
                         floored, q.nbytes, q.bits_per_element, q.padded_elements])
            key = f"compare.{name}.{scheme}"
            findings[f"{key}.rel_err"] = m.rel_err
            findings[f"{key}.sqnr_db"] = m.sqnr_db
            findings[f"{key}.bits_per_element"] = q.bits_per_element
            findings[f"{key}.frac_clipped"] = m.frac_clipped
            findings[f"{key}.frac_floored"] = floored
            if q.diagnostics is not None:
                warned.extend(f"tensor {name!r}: {line}" for line in warning_messages(q.diagnostics, q.scheme))
            points[scheme][0].append(q.bits_per_element)
            points[scheme][1].append(m.rel_err)
    note = ("rel err = ||x_hat - x|| / ||x||; SQNR = 10 log10(sum x^2 / sum err^2); clipped = share of elements "
            "that saturated (beyond their block's largest value, or asym range, by more than half the top step); "
            "floored = share of blocks whose scale sits at its format's floor, above what the block needs; "
            "bytes include scales, zero points, padding, outlier rows and tensor scales; padded = zeros added to fill "
            "the last group of each row (stored and counted in the bytes). Empty cells: a 2-D block scheme on a "
            "1-D tensor.")
    if skipped:
        note += f" Skipped integer tensors: {', '.join(skipped)}."
    if warned:
        note += f" Warnings (more than {CLIPPED_WARN_FRACTION:.1%} clipped or {FLOORED_WARN_FRACTION:.0%} floored): " \
            + " | ".join(warned)
    table = Table(key="compare", title=f"Schemes on {path.name}",
                  columns=["tensor", "shape", "scheme", "rel err", "SQNR dB", "max err", "clipped", "floored",
                           "bytes", "bits/elem", "padded"],
                  rows=rows, note=note,
                  formats={"rel err": ".4g", "SQNR dB": ".2f", "max err": ".4g", "clipped": ".3g", "floored": ".3g",
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


def quantize_file(path: Path, scheme: str, out: Path, progress: Progress | None = None) -> LabResult:
    """Quantize every float tensor of a .npy / .safetensors file under one scheme and write a tagged
    safetensors file (`quant.safetensors_io.save_quantized`, written whole or not at all).

    A 2-D block scheme skips 1-D tensors (listed); NaN/inf follow the scheme's nonfinite= policy.
    The quantized tensors are held in memory until the single write (about bits/32 of the float32 size).
    """
    from precisionlab.quant.safetensors_io import save_quantized

    if "," in scheme:
        raise ValueError(f"save takes one scheme, got a list: {scheme!r} (run save once per scheme)")
    parsed = str(parse_scheme(scheme))
    if out.suffix.lower() != ".safetensors":
        raise ValueError(f"the output must be a .safetensors file, got {out.name!r}")
    if out.exists() and out.resolve() == path.resolve():
        raise ValueError(f"the output {out} would overwrite the input")
    if not out.parent.is_dir():
        raise OSError(f"no such directory for the output: {out.parent}")
    tensors, skipped = iter_tensors(path)
    quantized = {}
    rows: list[list[Scalar]] = []
    for name, load, source_dtype in tensors:
        if progress is not None:
            progress(name)
        arr = load()
        if not _applicable(parsed, arr.ndim):
            skipped.append(name)
            continue
        q = quantize_named(name, arr, parsed)
        q.dtype = source_dtype  # the file's dtype (bf16 / fp16 / fp8 are widened exactly to quantize)
        quantized[name] = q
        rows.append([name, str(tuple(arr.shape)), source_dtype, q.nbytes, q.bits_per_element, q.padded_elements])
    if not quantized:
        raise ValueError(f"{path}: no tensor can take scheme {parsed}")
    save_quantized(out, quantized)
    note = (f"Written to {out} (precisionlab.quant tag; load with precisionlab.quant.safetensors_io.load_quantized). "
            "bytes include scales, zero points, padding, outlier rows and tensor scales.")
    if skipped:
        note += f" Skipped (integer, or 1-D under a 2-D block scheme): {', '.join(skipped)}."
    table = Table(key="quantized", title=f"{path.name} under {parsed}",
                  columns=["tensor", "shape", "source dtype", "bytes", "bits/elem", "padded"], rows=rows, note=note,
                  formats={"bits/elem": ".4g"})
    findings: dict[str, Scalar] = {"save.tensors": len(quantized),
                                   "save.bytes": sum(q.nbytes for q in quantized.values())}
    return LabResult(name="quant_save", title=f"{path.name} quantized with {parsed}", sections=[table],
                     findings=findings, params={"file": str(path), "scheme": parsed, "output": str(out)})
