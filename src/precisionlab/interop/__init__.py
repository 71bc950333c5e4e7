"""Readers of other toolkits' quantized checkpoints (GGUF, GPTQ, AWQ, compressed-tensors,
bitsandbytes NF4, fp8 OCP/FNUZ), convention checks, and the checkpoint auditor.

Peers (gguf, safetensors, dask) are imported lazily, inside the functions that need them.
"""

from precisionlab.interop.checkpoint import Checkpoint, CheckpointTensor, PartRef
from precisionlab.interop.reading import read_checkpoint

__all__ = ["Checkpoint", "CheckpointTensor", "PartRef", "read_checkpoint"]
