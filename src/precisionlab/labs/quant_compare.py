"""`quant compare`: every scheme on every float tensor of a user's .npy or .safetensors file.

Not a registered lab (it needs a file). Tensors are read (.npy: memory-mapped) and processed one at a
time; bf16 and fp8 tensors are decoded exactly to float32; integer tensors are skipped
(and listed). Non-finite values are refused with an error that names the tensor, since
no integer scheme can store them. Per tensor and scheme: relative error, SQNR (dB), max
error, fraction clipped, bytes and bits per element (see `precisionlab.quant.metrics`).
"""

from __future__ import annotations

import fnmatch
import math
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from precisionlab.quant import QuantizationWarning, QuantizedTensor, error_metrics, parse_scheme, quantize
from precisionlab.quant.diagnostics import CLIPPED_WARN_FRACTION, FLOORED_WARN_FRACTION, warning_messages
from precisionlab.quant.safetensors_io import SOURCE_DTYPES, TAG_KEY, read_safetensors
from precisionlab.quant.scheme import Granularity
from precisionlab.results import Figure, LabResult, Scalar, Series, Table

DEFAULT_SCHEMES = ("int8:row", "int4:g128", "nf4:g64", "mxfp8", "mxfp4", "nvfp4", "dsv3_weight")

Progress = Callable[[str], None]

_NPY_MAGIC = b"\x93NUMPY"




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


NOT_FLOAT = "not a float tensor"
EMBEDDING_PATTERNS = ("*embed*", "*lm_head*", "*wte*", "*wpe*", "output.weight")
"""Names of embedding and output-projection tensors (Llama's embed_tokens / lm_head, GPT-2's wte / wpe,
the original Llama checkpoints' tok_embeddings / output.weight), which --keep-embeddings passes through."""


@dataclass(frozen=True)
class Selection:
    """Which tensors of a model file are quantized; every other tensor passes through unchanged.

    A tensor is quantized when it holds floats, matches one of `include` (fnmatch patterns on the full
    name, e.g. '*.mlp.*'; none given: every name), matches no `exclude` pattern, is not an embedding or
    lm_head when `keep_embeddings` (EMBEDDING_PATTERNS), has at least `min_size` elements, and has two
    or more dimensions when `matrices_only` (the usual practice: weight matrices are quantized, biases
    and norm scales stay as they are)."""

    include: tuple[str, ...] = ()
    exclude: tuple[str, ...] = ()
    min_size: int = 1
    matrices_only: bool = True
    keep_embeddings: bool = False

    def __post_init__(self) -> None:
        if isinstance(self.min_size, bool) or not isinstance(self.min_size, int) or self.min_size < 1:
            raise ValueError(f"min_size must be a positive number of elements, got {self.min_size!r}")

    def reason(self, name: str, shape: tuple[int, ...], is_float: bool) -> str | None:
        """Why the tensor is not quantized, or None when it is."""
        if not is_float:
            return NOT_FLOAT
        if self.include and not any(fnmatch.fnmatchcase(name, p) for p in self.include):
            return "matches no --include pattern"
        hit = next((p for p in self.exclude if fnmatch.fnmatchcase(name, p)), None)
        if hit is not None:
            return f"excluded by --exclude {hit}"
        if self.keep_embeddings and any(fnmatch.fnmatchcase(name, p) for p in EMBEDDING_PATTERNS):
            return "an embedding or lm_head (--keep-embeddings)"
        size = math.prod(shape)
        if size == 0:
            return "empty"
        if self.matrices_only and len(shape) < 2:
            return f"{len(shape)}-D: only matrices are quantized (--vectors quantizes 1-D tensors too)"
        if size < self.min_size:
            return f"{size} elements, under --min-size {self.min_size}"
        return None

    def params(self) -> dict[str, Scalar]:
        return {"include": ",".join(self.include), "exclude": ",".join(self.exclude), "min_size": self.min_size,
                "matrices_only": self.matrices_only, "keep_embeddings": self.keep_embeddings}


@dataclass(frozen=True)
class FileTensor:
    """One tensor of a user's file: its name, shape, dtype as stored, and how to read it.

    stored: the safetensors dtype (BF16, F32, I32, ...) it is written back with when it passes through;
    source_dtype: the float name a quantized record keeps (None for integers); load(): float values
    (BF16 / F8 decoded exactly); raw(): the stored values as written (BF16 / F8 as their bit patterns)."""

    name: str
    shape: tuple[int, ...]
    stored: str
    source_dtype: str | None
    load: Callable[[], np.ndarray]
    raw: Callable[[], np.ndarray]

    @property
    def is_float(self) -> bool:
        return self.source_dtype is not None


_NUMPY_TO_SAFETENSORS = {"float64": "F64", "float32": "F32", "float16": "F16", "int64": "I64", "int32": "I32",
                         "int16": "I16", "int8": "I8", "uint64": "U64", "uint32": "U32", "uint16": "U16",
                         "uint8": "U8", "bool": "BOOL"}


def file_tensors(path: Path) -> list[FileTensor]:
    """Every tensor of a .npy (one) or .safetensors file, in file order, read only when asked for."""
    suffix = path.suffix.lower()
    if suffix == ".npy":
        [(name, load, source)], _ = iter_tensors(path)  # its checks: magic bytes, float dtype, not empty
        arr = np.load(path, mmap_mode="r", allow_pickle=False)
        return [FileTensor(name, tuple(arr.shape), _NUMPY_TO_SAFETENSORS.get(arr.dtype.name, arr.dtype.name), source,
                           load, lambda: np.asarray(arr))]
    if suffix == ".safetensors":
        if not path.is_file():
            raise OSError(f"no such file: {path}")
        entries, metadata = read_safetensors(path)
        if TAG_KEY in metadata:
            raise ValueError(f"{path}: holds quantized tensors (precisionlab tag); source tensors are needed")
        return [FileTensor(name, entry.shape, entry.dtype, SOURCE_DTYPES.get(entry.dtype) if entry.size else None,
                           entry.to_float32, entry.raw) for name, entry in entries.items()]
    iter_tensors(path)  # the same one-line errors as compare (no such file, not .npy / .safetensors)
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


def compare(path: Path, schemes: list[str], progress: Progress | None = None,
            selection: Selection | None = None) -> LabResult:
    """Every scheme on every selected float tensor of the file (see Selection; compare keeps 1-D tensors
    by default). A tensor a scheme cannot take (NaN/inf values, a 2-D block scheme on a 1-D tensor, an
    option that does not fit its shape) gets an empty row with the reason, not an error for the file;
    only when no tensor can take any scheme is it an error."""
    chosen = selection if selection is not None else Selection(matrices_only=False)
    parsed = list(dict.fromkeys(str(parse_scheme(s)) for s in schemes))  # fail fast on a bad scheme; no repeats
    tensors = file_tensors(path)
    rows: list[list[Scalar]] = []
    findings: dict[str, Scalar] = {}
    points: dict[str, tuple[list[float], list[float]]] = {s: ([], []) for s in parsed}
    warned: list[str] = []
    left_out: list[tuple[str, str]] = []
    failures: list[str] = []
    for tensor in tensors:
        reason = chosen.reason(tensor.name, tensor.shape, tensor.is_float)
        if reason is not None:
            left_out.append((tensor.name, reason))
            continue
        name = tensor.name
        arr = tensor.load()
        bad = int(np.size(arr) - np.count_nonzero(np.isfinite(arr)))
        for scheme in parsed:
            if progress is not None:
                progress(f"{name}: {scheme}")
            why = (f"holds {bad} NaN/inf value(s); the schemes here store finite values only (MX/NVFP4 would "
                   "poison whole blocks): clean the tensor first" if bad else
                   None if _applicable(scheme, arr.ndim) else "a 2-D block scheme on a 1-D tensor")
            q = None
            if why is None:
                try:
                    q = quantize_named(name, arr, scheme)
                except ValueError as exc:
                    why = str(exc)
            if q is None:
                rows.append([name, str(tuple(arr.shape)), scheme, *[None] * 8, why])
                failures.append(f"tensor {name!r}: {why}")
                continue
            m = error_metrics(arr, q)
            floored = q.diagnostics.floored_fraction if q.diagnostics is not None else None
            rows.append([name, str(tuple(arr.shape)), scheme, m.rel_err, m.sqnr_db, m.max_err, m.frac_clipped,
                         floored, q.nbytes, q.bits_per_element, q.padded_elements, ""])
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
    if not findings:
        if failures:
            more = f" (and {len(failures) - 1} more)" if len(failures) > 1 else ""
            raise ValueError(f"{path}: no tensor can take {', '.join(parsed)}: {failures[0]}{more}")
        raise ValueError(f"{path}: no tensor is selected to compare: "
                         + "; ".join(f"{n} ({r})" for n, r in left_out[:5]))
    note = ("rel err = ||x_hat - x|| / ||x||; SQNR = 10 log10(sum x^2 / sum err^2); clipped = share of elements "
            "that saturated (beyond their block's largest value, or asym range, by more than half the top step); "
            "floored = share of blocks whose scale sits at its format's floor, above what the block needs; "
            "bytes include scales, zero points, padding, outlier rows and tensor scales; padded = zeros added to fill "
            "the last group of each row (stored and counted in the bytes). Empty cells: the scheme cannot take the "
            "tensor, for the reason in the note column.")
    integers = [n for n, r in left_out if r == NOT_FLOAT]
    if integers:
        note += f" Skipped integer tensors: {', '.join(integers)}."
    others = [f"{n} ({r})" for n, r in left_out if r != NOT_FLOAT]
    if others:
        note += f" Not compared: {', '.join(others)}."
    if warned:
        note += f" Warnings (more than {CLIPPED_WARN_FRACTION:.1%} clipped or {FLOORED_WARN_FRACTION:.0%} floored): " \
            + " | ".join(warned)
    table = Table(key="compare", title=f"Schemes on {path.name}",
                  columns=["tensor", "shape", "scheme", "rel err", "SQNR dB", "max err", "clipped", "floored",
                           "bytes", "bits/elem", "padded", "note"],
                  rows=rows, note=note,
                  formats={"rel err": ".4g", "SQNR dB": ".2f", "max err": ".4g", "clipped": ".3g", "floored": ".3g",
                           "bits/elem": ".4g"})
    figure = Figure(key="error_vs_bits", title=f"Error against bits per element: {path.name}",
                    xlabel="bits per element (scales included)", ylabel="relative error",
                    series=[Series(s, xs, ys, kind="scatter") for s, (xs, ys) in points.items() if xs],
                    yscale="log")
    return LabResult(name="quant_compare", title=f"Quantization schemes compared on {path.name}",
                     sections=[table], figures=[figure], findings=findings,
                     params={"file": str(path), "schemes": ",".join(parsed), **chosen.params()})


def progress_total(path: Path, schemes: list[str], selection: Selection | None = None) -> int:
    chosen = selection if selection is not None else Selection(matrices_only=False)
    picked = [t for t in file_tensors(path) if chosen.reason(t.name, t.shape, t.is_float) is None]
    return len(picked) * len({str(parse_scheme(s)) for s in schemes})


def split_schemes(values: tuple[str, ...]) -> Iterator[str]:
    for value in values:
        for part in value.split(","):
            if part.strip():
                yield part.strip()


def quantize_file(path: Path, scheme: str, out: Path, progress: Progress | None = None,
                  selection: Selection | None = None) -> LabResult:
    """Quantize the selected tensors of a .npy / .safetensors file under one scheme into a tagged safetensors
    file (`quant.safetensors_io.save_quantized`, written whole or not at all); every other tensor is
    written through unchanged (same dtype, same bytes) and recorded in the tag as passed through, with why.

    Selection (default: every float tensor of two or more dimensions) picks what is quantized in a
    .safetensors file; a .npy file is one array and is quantized as given. A tensor the scheme cannot
    take (NaN/inf under nonfinite=error, outliers=k on k rows or fewer, a 2-D block scheme on a 1-D
    tensor, ...) passes through with that reason and a warning, instead of failing the whole file; only
    when nothing can be quantized is it an error. The quantized tensors are held in memory until the
    single write (about bits/32 of the float32 size), the passed-through ones as stored.
    """
    from precisionlab.quant.safetensors_io import PassThrough, save_quantized

    if "," in scheme:
        raise ValueError(f"save takes one scheme, got a list: {scheme!r} (run save once per scheme)")
    parsed = str(parse_scheme(scheme))
    if parse_scheme(parsed).is_two_level:
        raise ValueError(f"{parsed} is a two-level (K-quant) layout, which tagged safetensors files do not hold; "
                         "GGUF is its file format")
    if out.suffix.lower() != ".safetensors":
        raise ValueError(f"the output must be a .safetensors file, got {out.name!r}")
    if out.exists() and out.resolve() == path.resolve():
        raise ValueError(f"the output {out} would overwrite the input")
    if not out.parent.is_dir():
        raise OSError(f"no such directory for the output: {out.parent}")
    chosen = selection if selection is not None else Selection()
    single = path.suffix.lower() == ".npy"
    if single:
        chosen = Selection(matrices_only=False)
    quantized: dict[str, QuantizedTensor] = {}
    passed: dict[str, PassThrough] = {}
    failures: list[str] = []
    rows: list[list[Scalar]] = []
    for tensor in file_tensors(path):
        if progress is not None:
            progress(tensor.name)
        reason = chosen.reason(tensor.name, tensor.shape, tensor.is_float)
        q = None
        if reason is None:
            arr = tensor.load()
            if not _applicable(parsed, arr.ndim):
                reason = f"{arr.ndim}-D under the 2-D block scheme {parsed}"
            else:
                try:
                    q = quantize_named(tensor.name, arr, parsed)
                except ValueError as exc:
                    reason = f"{parsed} cannot take it: {exc}"
                    failures.append(f"tensor {tensor.name!r}: {exc}")
        shape = str(tuple(tensor.shape))
        if q is not None:
            q.dtype = str(tensor.source_dtype)  # the file's dtype (bf16 / fp16 / fp8 are widened exactly to quantize)
            quantized[tensor.name] = q
            rows.append([tensor.name, shape, tensor.stored, parsed, q.nbytes, q.bits_per_element, q.padded_elements,
                         ""])
            continue
        assert reason is not None
        if single:  # the one array of the file: nothing else to write
            raise ValueError(f"{path}: {failures[0] if failures else reason}")
        try:
            raw = tensor.raw()
        except TypeError as exc:
            raise ValueError(f"{path}: tensor {tensor.name!r} cannot be quantized ({reason}) nor written through "
                             f"unchanged: {exc}") from None
        passed[tensor.name] = PassThrough(tensor.stored, raw, reason)
        rows.append([tensor.name, shape, tensor.stored, "unchanged", int(raw.nbytes),
                     8.0 * raw.dtype.itemsize, 0, reason])
    if not quantized:
        detail = failures[0] if failures else "; ".join(f"{n}: {p.reason}" for n, p in list(passed.items())[:5])
        raise ValueError(f"{path}: no tensor was quantized with {parsed} ({detail})")
    for line in failures:
        warnings.warn(f"{line}; written through unchanged", QuantizationWarning, stacklevel=2)
    save_quantized(out, quantized, passthrough=passed)
    note = (f"Written to {out} (precisionlab.quant tag; load_quantized reads the quantized tensors, "
            "load_passthrough the unchanged ones). bytes include scales, zero points, padding, outlier rows and "
            "tensor scales; a tensor written unchanged keeps its dtype and bytes, and its record in the tag says "
            "why it was not quantized.")
    if passed:
        note += f" Unchanged: {', '.join(f'{n} ({p.reason})' for n, p in passed.items())}."
    table = Table(key="quantized", title=f"{path.name} under {parsed}",
                  columns=["tensor", "shape", "source dtype", "stored as", "bytes", "bits/elem", "padded", "note"],
                  rows=rows, note=note, formats={"bits/elem": ".4g"})
    passed_bytes = sum(int(p.array.nbytes) for p in passed.values())
    findings: dict[str, Scalar] = {"save.tensors": len(quantized),
                                   "save.bytes": sum(q.nbytes for q in quantized.values()),
                                   "save.passthrough_tensors": len(passed), "save.passthrough_bytes": passed_bytes}
    return LabResult(name="quant_save", title=f"{path.name} quantized with {parsed}", sections=[table],
                     findings=findings,
                     params={"file": str(path), "scheme": parsed, "output": str(out), **chosen.params()})
