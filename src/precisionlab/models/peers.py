"""The optional peers that real models need, imported lazily with a one-line message when missing.

torch is installed first, on its own, from PyTorch's CPU wheel index (precisionlab.peers.TORCH_INSTALL:
`pip install torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu`); the rest comes with the
`models` extra: `pip install 'precisionlab[models]'` (transformers, accelerate, gguf, safetensors,
tokenizers), which pins the same torch and so keeps the CPU build in place.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import logging
from collections.abc import Iterator
from types import ModuleType

from precisionlab.peers import TORCH_INSTALL

TORCH_HINT = f"{TORCH_INSTALL} (the CPU build; from PyPI, torch is a multi-GB CUDA build)"
EXTRA_HINT = "pip install 'precisionlab[models]'"

_NOISY_LOGGERS = ("torchao", "torch.utils._pytree", "transformers", "accelerate", "huggingface_hub")
"""Loggers that print import-time or conversion chatter (unloadable optional kernels, progress bars)."""


class MissingPeer(ValueError):
    """An optional dependency is not installed (a ValueError, so the CLI prints one line and exits 2)."""


def require(*modules: str, purpose: str = "real models") -> None:
    """MissingPeer naming every missing module and how to install it."""
    missing = [name for name in modules if importlib.util.find_spec(name) is None]
    if not missing:
        return
    hints = []
    if "torch" in missing:
        hints.append(TORCH_HINT)
    if any(name != "torch" for name in missing):
        hints.append(EXTRA_HINT)
    verb = "is" if len(missing) == 1 else "are"
    raise MissingPeer(f"{purpose} need {', '.join(missing)}, which {verb} not installed: {'; '.join(hints)}")


def torch() -> ModuleType:
    require("torch")
    import torch as module

    return module


def transformers() -> ModuleType:
    require("torch", "transformers")
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
        if importlib.util.find_spec("transformers") is not None and "transformers" in _loaded():
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


def _loaded() -> set[str]:
    import sys

    return set(sys.modules)
