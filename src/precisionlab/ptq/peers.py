"""The optional peers PTQ needs, imported on first use with a one-line message when absent."""

from __future__ import annotations

from typing import Any

from precisionlab.peers import TORCH_INSTALL


def require_torch(what: str = "this PTQ method") -> Any:
    """The torch module, or ImportError naming what to install."""
    try:
        import torch
    except ImportError:
        raise ImportError(f"{what} needs torch: {TORCH_INSTALL} (the CPU build is enough)") from None
    return torch


def as_numpy(x: Any, dtype: Any = None) -> Any:
    """A numpy array for a numpy array, a torch tensor (detached, on the CPU) or a nested list."""
    import numpy as np

    if type(x).__module__.startswith("torch"):
        x = x.detach().cpu()
        if str(x.dtype) == "torch.bfloat16":
            x = x.float()
        x = x.numpy()
    return np.asarray(x, dtype=dtype)
