"""Replace some of a model's weights and put them back bit for bit: the one substitution every command uses.

    with replace_weights(model, {"model.layers.0.mlp.down_proj": values}) as replaced:
        ...                                   # the model computes with the new values
    # the originals are back, bit for bit, also when the body raised

    replaced = replace_weights(model, new)    # the handle form; restore() is idempotent
    replaced.names, replaced.held_bytes, replaced.spilled_bytes, replaced.original(parameter)
    replaced.restore()

(`models.weights.replace_weights` is this function; every command that substitutes weights goes through it:
eval's candidates, ptq's installs, search's measures and recipes, export's plan, the ladder's steps, QAT.)

Names. A key of `new` is a parameter name as `named_parameters(remove_duplicate=False)` spells it
("model.layers.0.input_layernorm.weight"), the name of a module holding a `weight` ("lm_head"), which means
that weight, or one of the model's Parameter objects. Two names of one tied parameter are one weight: the
later value is written, the first original kept.

What is kept. Only the originals of the weights replaced; every other parameter is left as it is (the same
storage, never copied). An original stays in memory, as itself: the parameter's own tensor is set aside and the
parameter takes the new one (cast to its dtype and device), so nothing is copied, while the originals held in
memory stay within `spill_above` bytes (SPILL_ABOVE by default). Past that, the original is written to a
safetensors file (through the safetensors library: exact in every dtype) and the new values are copied into the
weight's own storage, so the model is held once. The files go to `spill_dir`, else to the directory of the
innermost `spilling_to(path)` (the eval runner's, under the cache root), else to a temporary directory made for
the handle; restore() reads each file back into its weight's storage and removes it.

Values. `new` is a Mapping or an iterable of (name, tensor) pairs, read one pair at a time: a generator that
computes each layer's values when it is asked for them holds one layer's new values at a time (on top of what
was already installed). A value may be a numpy array or a tensor of the weight's shape. When reading `new` or
writing a value fails (a generator's error, a wrong shape, KeyboardInterrupt), everything replaced so far goes
back before the error propagates.
"""

from __future__ import annotations

import contextlib
import contextvars
import shutil
import tempfile
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

from precisionlab import peers

SPILL_ABOVE = 4 * 4096 * 4096
"""Bytes of originals kept in memory before the next one is written to disk: one fp32 4096 x 4096 matrix
(64 MiB, the attention projection of a 7B Llama). A recipe of a few layers restores from memory at no I/O;
a whole-model candidate holds at most this much beside the model."""

_SPILL_PARENT: contextvars.ContextVar[Path | None] = contextvars.ContextVar("precisionlab_spill_parent", default=None)


@contextlib.contextmanager
def spilling_to(directory: str | Path | None) -> Iterator[None]:
    """Inside the block, a replace_weights without its own spill_dir writes its spill files under `directory`
    (None: the system's temporary directory)."""
    token = _SPILL_PARENT.set(Path(directory) if directory is not None else None)
    try:
        yield
    finally:
        _SPILL_PARENT.reset(token)


class ReplacedWeights:
    """The originals of the weights one replace_weights call replaced, and restore() (see the module docstring)."""

    def __init__(self, spill_above: int, spill_dir: Path | None) -> None:
        self.spill_above = int(spill_above)
        self._spill_dir = spill_dir
        self._own_dir: Path | None = None
        self._kept: list[tuple[str, Any, Any]] = []
        """(name, parameter, original): a tensor (in memory) or the Path of its spill file."""
        self._by_id: dict[int, int] = {}
        self.held_bytes = 0
        """Bytes of the originals held in memory."""
        self.spilled_bytes = 0
        """Bytes of the originals written to disk."""

    # -- reading
    @property
    def names(self) -> list[str]:
        """The parameter names replaced (a tied one under the name it was given first), in order."""
        return [name for name, _, _ in self._kept]

    @property
    def parameters(self) -> list[Any]:
        return [parameter for _, parameter, _ in self._kept]

    @property
    def spilled(self) -> list[Path]:
        return [original for _, _, original in self._kept if isinstance(original, Path)]

    def __contains__(self, parameter: Any) -> bool:
        return id(parameter) in self._by_id

    def original(self, parameter: Any) -> Any:
        """The original tensor of a replaced parameter (read from its file when spilled); KeyError otherwise."""
        index = self._by_id.get(id(parameter))
        if index is None:
            raise KeyError("this parameter was not replaced")
        original = self._kept[index][2]
        return _read(original) if isinstance(original, Path) else original

    # -- writing
    def _replace(self, name: str, parameter: Any, value: Any) -> None:
        torch = peers.torch("replacing weights")
        new = _as_tensor(value, parameter, name)
        if id(parameter) in self._by_id:  # a tied name given again: the later value, the first original
            with torch.no_grad():
                if new.data_ptr() != parameter.data.data_ptr():
                    parameter.data.copy_(new)
            return
        nbytes = parameter.numel() * parameter.element_size()
        if self.held_bytes + nbytes <= self.spill_above:
            self._by_id[id(parameter)] = len(self._kept)
            self._kept.append((name, parameter, parameter.data))
            self.held_bytes += nbytes
            parameter.data = new
            return
        path = self._directory() / f"original_{id(self):x}_{len(self._kept)}.safetensors"
        _write(parameter.data, path)
        self._by_id[id(parameter)] = len(self._kept)
        self._kept.append((name, parameter, path))
        self.spilled_bytes += nbytes
        with torch.no_grad():
            parameter.data.copy_(new)

    def _directory(self) -> Path:
        if self._spill_dir is not None:
            self._spill_dir.mkdir(parents=True, exist_ok=True)
            return self._spill_dir
        if self._own_dir is None:
            parent = _SPILL_PARENT.get()
            if parent is not None:
                parent.mkdir(parents=True, exist_ok=True)
            self._own_dir = Path(tempfile.mkdtemp(prefix="precisionlab-originals-",
                                                  dir=str(parent) if parent is not None else None))
        return self._own_dir

    def restore(self) -> None:
        """Every replaced weight back, bit for bit (last replaced, first restored); idempotent."""
        torch = peers.torch("replacing weights")
        try:
            while self._kept:
                _, parameter, original = self._kept.pop()
                if isinstance(original, Path):
                    with torch.no_grad():
                        parameter.data.copy_(_read(original))
                    original.unlink(missing_ok=True)
                else:
                    parameter.data = original
        finally:
            self._kept.clear()
            self._by_id.clear()
            self.held_bytes = self.spilled_bytes = 0
            if self._own_dir is not None:
                shutil.rmtree(self._own_dir, ignore_errors=True)
                self._own_dir = None

    def __enter__(self) -> ReplacedWeights:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.restore()


def replace_weights(model: Any, new: Mapping[str, Any] | Iterable[tuple[str, Any]], *,
                    spill_above: int | None = None, spill_dir: str | Path | None = None) -> ReplacedWeights:
    """Write `new` (name -> values) into `model`'s weights, keeping the originals of exactly those weights
    (module docstring); the returned handle's restore() (or leaving its `with` block) puts them back."""
    torch = peers.torch("replacing weights")
    module_tree = model if isinstance(model, torch.nn.Module) else getattr(model, "model", model)
    replaced = ReplacedWeights(SPILL_ABOVE if spill_above is None else spill_above,
                               Path(spill_dir) if spill_dir is not None else None)
    resolve = _resolver(module_tree)
    items = new.items() if isinstance(new, Mapping) else new
    try:
        for given, value in items:
            name, parameter = resolve(given)
            replaced._replace(name, parameter, value)
    except BaseException:
        replaced.restore()
        raise
    return replaced


def _resolver(model: Any) -> Any:
    parameters = dict(model.named_parameters(remove_duplicate=False))
    modules: dict[str, Any] | None = None

    names = {id(p): n for n, p in reversed(list(parameters.items()))}  # a tied parameter: its first name

    def resolve(name: Any) -> tuple[str, Any]:
        nonlocal modules
        if not isinstance(name, str):  # a Parameter of the model
            if id(name) not in names:
                raise ValueError("the parameter given is not one of the model's")
            return names[id(name)], name
        parameter = parameters.get(name)
        if parameter is not None:
            return name, parameter
        if modules is None:
            modules = dict(model.named_modules())
        weight = getattr(modules.get(name), "weight", None)
        if weight is None or not isinstance(weight, peers.torch().nn.Parameter):
            raise ValueError(f"the model has no parameter or weight layer named {name!r}")
        return f"{name}.weight", weight

    return resolve


def _as_tensor(value: Any, parameter: Any, name: str) -> Any:
    torch = peers.torch("replacing weights")
    tensor = value if isinstance(value, torch.Tensor) else torch.from_numpy(value)
    if tuple(tensor.shape) != tuple(parameter.shape):
        raise ValueError(f"{name}: new values of shape {tuple(tensor.shape)} for a weight of shape "
                         f"{tuple(parameter.shape)}")
    return tensor.detach().to(dtype=parameter.dtype, device=parameter.device).contiguous()


def _write(tensor: Any, path: Path) -> None:
    from safetensors.torch import save_file

    save_file({"weight": tensor.detach().contiguous()}, str(path))


def _read(path: Path) -> Any:
    from safetensors.torch import load_file

    return load_file(str(path))["weight"]
