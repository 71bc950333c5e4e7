"""`read_checkpoint(path)`: index another toolkit's checkpoint (a .gguf file, a .safetensors file, a sharded
directory, or its index JSON) into the records of interop.checkpoint, through the readers of interop.readers."""

from __future__ import annotations

import errno
from pathlib import Path

from precisionlab.interop.checkpoint import Checkpoint


def read_checkpoint(path: str | Path) -> Checkpoint:
    """Index a checkpoint: a .gguf file, a .safetensors file, a directory of shards, or its index JSON.

    A directory is read through its model.safetensors.index.json when it has one, else every
    *.safetensors file in it, else its single .gguf file. Quantization settings come from the
    config.json (`quantization_config`), quantize_config.json or quant_config.json beside the files.
    """
    from precisionlab.interop.readers import gguf_file, safetensors_files

    p = Path(path)
    if not p.exists():
        raise FileNotFoundError(errno.ENOENT, "No such file or directory", str(p))
    if p.is_dir():
        return safetensors_files.read_directory(p, gguf_reader=gguf_file.read_gguf)
    if p.suffix.lower() == ".gguf" or gguf_file.has_gguf_magic(p):
        return gguf_file.read_gguf(p)
    if p.name.endswith(".json"):
        return safetensors_files.read_index(p)
    return safetensors_files.read_files(p, [p])
