"""The records `read_checkpoint(path)` (interop.reading) returns: every tensor of another toolkit's checkpoint,
read lazily and exactly.

    ckpt = read_checkpoint("model.gguf")          # or a .safetensors file, a sharded directory,
    t = ckpt["blk.0.attn_q.weight"]               #    or its model.safetensors.index.json
    t.layout        # "gguf:Q4_1", "gptq:v1", "awq:gemm", "compressed-tensors:pack-quantized", ...
    t.scheme        # the precisionlab scheme string ("int8:g32"), or None where the grammar cannot say it
    t.shape         # logical (dequantized) shape, numpy order
    t.parts()       # the raw stored arrays, memory-mapped
    t.dequantize()  # float32: exactly what the toolkit's own dequantization gives

Nothing is decoded while indexing: a `CheckpointTensor` holds only where its parts lie (file, byte
offset, dtype, shape) and how to decode them, so it pickles cheaply and can be sent to another
process. A tensor whose layout is not recognised is kept, with layout "unknown" and a note in
`Checkpoint.notes` (reading goes on); its `dequantize()` raises a ValueError that says why.
Files that cannot be read at all (missing, unreadable, truncated, an index naming a missing shard)
raise a one-line OSError / ValueError naming the file.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

UNKNOWN = "unknown"


@dataclass(frozen=True)
class PartRef:
    """Where one stored array lies: a byte range of a file, its raw numpy dtype and shape."""

    file: str
    offset: int
    nbytes: int
    dtype: str
    """numpy dtype of the raw elements ('<i4', 'u1', '<u2' for BF16 bits, ...)."""
    shape: tuple[int, ...]
    stored_dtype: str
    """The file's own name for the dtype: safetensors 'I32', 'F8_E4M3', 'BF16', or a GGML type 'Q4_1'."""

    def load(self) -> np.ndarray:
        """The array, memory-mapped read-only (an empty array for zero elements)."""
        count = math.prod(self.shape)
        if count == 0:
            return np.zeros(self.shape, dtype=self.dtype)
        try:
            mapped = np.memmap(self.file, dtype=self.dtype, mode="r", offset=self.offset, shape=(count,))
            return mapped.reshape(self.shape)
        except (OSError, ValueError) as exc:
            raise OSError(f"{self.file}: cannot map {self.nbytes} bytes at offset {self.offset} ({exc})") from None


Decoder = Callable[["CheckpointTensor"], np.ndarray]
"""A reader's dequantizer: the tensor in, float32 values in its shape out."""


@dataclass
class CheckpointTensor:
    """One logical tensor of a checkpoint (for GPTQ / AWQ the qweight, qzeros, scales and g_idx are one)."""

    name: str
    layout: str
    scheme: str | None
    shape: tuple[int, ...]
    source_file: str
    refs: dict[str, PartRef] = field(default_factory=dict)
    """Stored parts by role ('qweight', 'scales', 'weight', 'blocks', ...)."""
    decoder: Decoder | None = None
    """The reader's dequantizer (None for unknown layouts): a module-level function of the reader that made the
    tensor, so the tensor pickles by reference to it and decodes in any process."""
    details: dict[str, Any] = field(default_factory=dict)
    """What the reader found: bits, group size, zero-point convention, int4 range, act order, ..."""
    note: str = ""
    """Why the layout is unknown, or what the reader assumed."""

    @property
    def stored_nbytes(self) -> int:
        """Bytes on disk of every part (payload, scales, zero points, indices)."""
        return sum(ref.nbytes for ref in self.refs.values())

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    @property
    def bits_per_weight(self) -> float:
        """8 * stored bytes / logical elements."""
        return 8.0 * self.stored_nbytes / self.size if self.size else math.nan

    def parts(self) -> dict[str, np.ndarray]:
        """The raw stored arrays by role, memory-mapped (BF16 and FP8 parts as their bit patterns)."""
        return {role: ref.load() for role, ref in self.refs.items()}

    def dequantize(self) -> np.ndarray:
        """float32 values in `shape`: what the toolkit's own dequantization gives, bit for bit."""
        if self.layout == UNKNOWN or self.decoder is None:
            raise ValueError(f"{self.name}: layout unknown, cannot dequantize ({self.note or 'no reader'})")
        out = self.decoder(self)
        if out.shape != self.shape or out.dtype != np.float32:  # a reader bug, never the file's fault
            raise RuntimeError(f"{self.name}: decoder {self.decoder.__name__} gave {out.dtype}{out.shape}, not "
                               f"float32{self.shape}")
        return out

    def __repr__(self) -> str:
        return (f"CheckpointTensor({self.name!r}, layout={self.layout!r}, scheme={self.scheme!r}, "
                f"shape={self.shape}, stored_nbytes={self.stored_nbytes})")


class Checkpoint(Mapping[str, CheckpointTensor]):
    """A read-only mapping name -> CheckpointTensor, in file order, with what was found while indexing."""

    def __init__(self, path: str, tensors: list[CheckpointTensor], source_files: list[str],
                 metadata: dict[str, Any], notes: list[str]) -> None:
        self.path = path
        self.source_files = source_files
        self.metadata = metadata
        self.notes = notes
        self._tensors: dict[str, CheckpointTensor] = {}
        for tensor in tensors:
            if tensor.name in self._tensors:
                notes.append(f"{tensor.name}: appears twice (in {self._tensors[tensor.name].source_file} and "
                             f"{tensor.source_file}); the first is kept")
                continue
            self._tensors[tensor.name] = tensor

    def __getitem__(self, name: str) -> CheckpointTensor:
        try:
            return self._tensors[name]
        except KeyError:
            raise KeyError(f"{name!r} is not a tensor of {self.path}") from None

    def __iter__(self) -> Iterator[str]:
        return iter(self._tensors)

    def __len__(self) -> int:
        return len(self._tensors)

    @property
    def stored_nbytes(self) -> int:
        return sum(t.stored_nbytes for t in self._tensors.values())

    def layouts(self) -> dict[str, int]:
        """Tensor count per layout."""
        counts: dict[str, int] = {}
        for t in self._tensors.values():
            counts[t.layout] = counts.get(t.layout, 0) + 1
        return counts

    def __repr__(self) -> str:
        return f"Checkpoint({self.path!r}, {len(self)} tensors, layouts={self.layouts()})"
