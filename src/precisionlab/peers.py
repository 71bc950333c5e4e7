"""Optional peers (torch, ml_dtypes, triton, ...): import one if it is there, and say how to get it.

A peer counts as available when `import NAME` succeeds. `importlib.util.find_spec` is not
enough: a package can be found and still fail to import (a broken or mismatched build), and
that must read as "not available", never as a crash. Code that can use a peer calls
`optional_import` and, on None, reports the part it skipped with `install_hint(name)`.
"""

from __future__ import annotations

import importlib
from types import ModuleType

TORCH_VERSION = "2.13.0"
"""The torch release precisionlab is tested with (the `models` extra and .ci/constraints.txt pin it too)."""
TORCH_CPU_INDEX = "https://download.pytorch.org/whl/cpu"
"""PyTorch's index of CPU-only wheels. Its torch is `2.13.0+cpu`: `==2.13.0` matches it (PEP 440 ignores a
candidate's local label when the specifier has none), while PyPI's `torch==2.13.0` is the CUDA build (cuDNN,
NCCL, cuBLAS: gigabytes) and pins triton 3.7.1."""
TORCH_INSTALL = f"pip install torch=={TORCH_VERSION} --index-url {TORCH_CPU_INDEX}"
"""The CPU-only install line PyTorch documents, pinned: every hint and the README give this one."""

INSTALL_HINTS = {
    "torch": TORCH_INSTALL,
    "ml_dtypes": "pip install ml_dtypes",
    "triton": "pip install triton==3.9.0",
    "torchao": "pip install --no-deps torchao==0.18.0",
    "safetensors": "pip install safetensors",
}


def optional_import(name: str) -> ModuleType | None:
    """The module, or None when it is not installed or fails to import."""
    try:
        return importlib.import_module(name)
    except ImportError:
        return None


def available(name: str) -> bool:
    return optional_import(name) is not None


def install_hint(name: str) -> str:
    """How to install a peer, e.g. 'pip install ml_dtypes'."""
    return INSTALL_HINTS.get(name, f"pip install {name}")


def missing_reason(name: str) -> str:
    return f"{name} is not installed"


__all__ = ["INSTALL_HINTS", "TORCH_CPU_INDEX", "TORCH_INSTALL", "TORCH_VERSION", "available", "install_hint",
           "missing_reason", "optional_import"]
