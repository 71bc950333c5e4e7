"""Optional peers (torch, transformers, ml_dtypes, triton, ...): import one if it is there, and say how to get it.

Two ways to use a peer, one module for both:

- optional: code that can do without it calls `optional_import(name)` and, on None, reports the part it
  skipped with `install_hint(name)`. A peer counts as available when `import NAME` succeeds;
  `importlib.util.find_spec` is not enough (a package can be found and still fail to import, a broken or
  mismatched build, and that must read as "not available", never as a crash).
- required: code that cannot run without it calls `require(*names, purpose=...)`, or `torch(purpose)` /
  `transformers()` for the module itself, and gets `MissingPeer` (a ValueError and an ImportError: the CLI
  prints its one line and exits 2) naming every missing peer and how to install it.

torch is installed first, on its own, from PyTorch's CPU wheel index (TORCH_INSTALL); the rest of what real
models need comes with the `models` extra (`pip install 'precisionlab[models]'`: transformers, accelerate, gguf,
safetensors, tokenizers), which pins the same torch and so keeps the CPU build in place.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import logging
import os
import sys
from collections.abc import Iterator
from types import ModuleType
from typing import Any

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
    "llama_cpp": ("CMAKE_ARGS=... pip install 'llama-cpp-python[server]==0.3.36' (docs/export.md says which build "
                  "options work)"),
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


# --------------------------------------------------------------------------- required peers
TORCH_HINT = f"{TORCH_INSTALL} (the CPU build; from PyPI, torch is a multi-GB CUDA build)"
EXTRA_HINT = "pip install 'precisionlab[models]'"

_NOISY_LOGGERS = ("torchao", "torch.utils._pytree", "transformers", "accelerate", "huggingface_hub")
"""Loggers that print import-time or conversion chatter (unloadable optional kernels, progress bars)."""


class MissingPeer(ValueError, ImportError):
    """A required optional dependency is not installed (a ValueError, so the CLI prints one line and exits 2)."""


def require(*modules: str, purpose: str = "real models") -> None:
    """MissingPeer naming every missing module and how to install it: `PURPOSE: torch is not installed: HINT`."""
    missing = [name for name in modules if importlib.util.find_spec(name) is None]
    if not missing:
        return
    hints = []
    if "torch" in missing:
        hints.append(TORCH_HINT)
    if any(name != "torch" for name in missing):
        hints.append(EXTRA_HINT)
    verb = "is" if len(missing) == 1 else "are"
    raise MissingPeer(f"{purpose}: {', '.join(missing)} {verb} not installed: {'; '.join(hints)}")


def torch(purpose: str = "real models") -> ModuleType:
    """The torch module (MissingPeer when it is not installed)."""
    require("torch", purpose=purpose)
    import torch as module

    return module


def llama_cpp(purpose: str = "scoring in llama.cpp") -> ModuleType:
    """The llama_cpp module (llama-cpp-python); MissingPeer, `PURPOSE needs llama-cpp-python: HINT`, when it is
    missing (it is built from source: the hint names the build options that work)."""
    try:
        import llama_cpp as module
    except ImportError:
        raise MissingPeer(f"{purpose} needs llama-cpp-python: {install_hint('llama_cpp')}") from None
    return module


def transformers(purpose: str = "real models") -> ModuleType:
    """The transformers module, quiet and without progress bars (MissingPeer naming torch too if missing)."""
    require("torch", "transformers", purpose=purpose)
    with quiet():
        import transformers as module

        module.utils.logging.disable_progress_bar()
    return module


@contextlib.contextmanager
def quiet() -> Iterator[None]:
    """Raise the noisy peers' loggers to ERROR for the duration (their levels are restored after)."""
    saved = {name: logging.getLogger(name).level for name in _NOISY_LOGGERS}
    for name in _NOISY_LOGGERS:
        logging.getLogger(name).setLevel(logging.ERROR)
    verbosity = None
    try:
        if "transformers" in sys.modules:
            from transformers.utils import logging as hf_logging

            verbosity = hf_logging.get_verbosity()
            hf_logging.set_verbosity_error()
        yield
    finally:
        for name, level in saved.items():
            logging.getLogger(name).setLevel(level)
        if verbosity is not None:
            from transformers.utils import logging as hf_logging

            hf_logging.set_verbosity(verbosity)


KINETO_QUIET = "6"
"""KINETO_LOG_LEVEL that silences torch.profiler's C++ log lines (6: above kineto's highest level, USDT)."""


def torch_profiler() -> ModuleType:
    """torch.profiler, with kineto's own log lines ("STAGE: ... Warm Up", "USDT: ... profiler_start" /
    "profiler_stop", written straight to stderr around every profiled region) switched off unless the caller set
    KINETO_LOG_LEVEL: they interleaved with a command's progress lines. Kineto reads the variable when it first
    starts, so this must come before the process's first profiled region (every profiler use goes through here)."""
    torch("profiling")  # a clear message where torch is missing
    os.environ.setdefault("KINETO_LOG_LEVEL", KINETO_QUIET)
    return importlib.import_module("torch.profiler")


@contextlib.contextmanager
def torch_threads(threads: int | None) -> Iterator[None]:
    """torch.set_num_threads(threads) for the block, restored afterwards (None: leave torch's choice)."""
    if threads is None:
        yield
        return
    module = torch()
    before = module.get_num_threads()
    module.set_num_threads(threads)
    try:
        yield
    finally:
        module.set_num_threads(before)


def as_numpy(x: Any, dtype: Any = None) -> Any:
    """A numpy array for a numpy array, a torch tensor (detached, on the CPU; bf16 widened) or a nested list."""
    import numpy as np

    if type(x).__module__.startswith("torch"):
        x = x.detach().cpu()
        if str(x.dtype) == "torch.bfloat16":
            x = x.float()
        x = x.numpy()
    return np.asarray(x, dtype=dtype)


__all__ = ["EXTRA_HINT", "INSTALL_HINTS", "TORCH_CPU_INDEX", "TORCH_HINT", "TORCH_INSTALL", "TORCH_VERSION",
           "MissingPeer", "as_numpy", "available", "install_hint", "missing_reason", "optional_import", "quiet",
           "require", "torch", "torch_profiler", "torch_threads", "transformers"]
