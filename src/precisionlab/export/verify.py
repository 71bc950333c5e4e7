"""Read an export back with the ecosystem's own readers and compare every tensor with the evaluated values.

    GGUF                 gguf.GGUFReader + gguf.quants.dequantize of every tensor (Llama's q / k rows permuted
                         back), then transformers.AutoModelForCausalLM.from_pretrained(dir, gguf_file=...)
    compressed-tensors   safetensors + compressed-tensors' compressor `decompress` of every quantized layer,
                         then transformers.AutoModelForCausalLM.from_pretrained(dir) with
                         CompressedTensorsConfig(dequantize=True)

"Equal" is bit for bit (float32 bit patterns). Bytes: every tensor's bytes as stored, summed, beside the
file size; the rest of the file (header, key-value pairs, alignment padding; config and tokenizer files) is
metadata, counted apart.
"""

from __future__ import annotations

import contextlib
import io
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np


@dataclass
class Check:
    reader: str
    compared: int = 0
    mismatched: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.compared > 0 and not self.mismatched


@dataclass
class Verification:
    checks: list[Check]
    file_bytes: int
    tensor_bytes: int
    quantized_bytes: int
    predicted_quantized_bytes: int

    @property
    def metadata_bytes(self) -> int:
        return self.file_bytes - self.tensor_bytes

    @property
    def ok(self) -> bool:
        return all(c.ok for c in self.checks)


def _equal(a: np.ndarray, b: np.ndarray) -> bool:
    a = np.ascontiguousarray(a, dtype=np.float32)
    b = np.ascontiguousarray(b, dtype=np.float32)
    return a.shape == b.shape and np.array_equal(a.view(np.uint32), b.view(np.uint32))


def transformers_check(state: dict[str, np.ndarray], loaded_model: Any, reader: str) -> Check:
    check = Check(reader)
    theirs = {k: v for k, v in loaded_model.state_dict().items()}
    for name, values in state.items():
        check.compared += 1
        if name not in theirs or not _equal(theirs[name].float().numpy(), values):
            check.mismatched.append(name)
    return check


def verify_gguf(path: Path, plan: Any, state: dict[str, np.ndarray], reload: bool = True) -> Verification:
    import gguf

    from precisionlab.interop.writers.gguf_meta import unpermute

    reader = gguf.GGUFReader(str(path))
    records = {r.name: r for r in plan.records}
    check = Check("gguf.quants.dequantize")
    tensor_bytes = quantized = 0
    for t in reader.tensors:
        record = records.get(t.name)
        tensor_bytes += int(t.n_bytes)
        check.compared += 1
        if record is None:
            check.mismatched.append(t.name)
            continue
        if record.how == "quantized":
            quantized += int(t.n_bytes)
        values = gguf.quants.dequantize(np.asarray(t.data), t.tensor_type).reshape(record.shape)
        if record.source in plan.permuted:
            values = unpermute(values, plan.permuted[record.source])
        if not _equal(values, state[record.source]):
            check.mismatched.append(t.name)
    if len(reader.tensors) != len(plan.records):
        check.mismatched.append(f"{len(reader.tensors)} tensors in the file, {len(plan.records)} planned")
    checks = [check]
    if reload:
        import transformers

        from precisionlab import peers

        with peers.quiet(), contextlib.redirect_stderr(io.StringIO()):  # transformers' own tqdm bar
            model = transformers.AutoModelForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name,
                                                                      dtype=peers.torch().float32)
        checks.append(transformers_check(state, model, "transformers from_pretrained(gguf_file=...)"))
    predicted = sum(r.predicted for r in plan.records if r.how == "quantized")
    return Verification(checks, path.stat().st_size, tensor_bytes, quantized, predicted)


def verify_compressed(folder: Path, plan: Any, state: dict[str, np.ndarray], reload: bool = True) -> Verification:
    from safetensors.torch import load_file

    from precisionlab.export.compressed import WEIGHTS
    from precisionlab.interop.writers import compressed as ct

    stored = load_file(str(folder / WEIGHTS))
    groups = plan.config["quantization_config"]["config_groups"]
    check = Check("compressed-tensors decompress")
    layers = sorted(plan.predicted)
    for layer in layers:
        local = {k[len(layer) + 1 :]: v for k, v in stored.items() if k.startswith(f"{layer}.") and
                 k[len(layer) + 1 :].startswith("weight")}
        group = _group_of(layer, groups)
        scheme = ct.scheme_object(group["weights"], group["format"], list(group["targets"]))
        values = ct.compressor(group["format"]).decompress(local, scheme)["weight"].float().numpy()
        check.compared += 1
        if not _equal(values, state[f"{layer}.weight"]):
            check.mismatched.append(layer)
    def of_quantized(name: str) -> bool:
        return name.rsplit(".", 1)[0] in plan.predicted

    for name, tensor in stored.items():
        if name in state and not of_quantized(name):
            check.compared += 1
            if not _equal(tensor.float().numpy(), state[name]):
                check.mismatched.append(name)
    checks = [check]
    if reload:
        import transformers

        from precisionlab import peers

        with peers.quiet(), contextlib.redirect_stderr(io.StringIO()):
            model = transformers.AutoModelForCausalLM.from_pretrained(
                str(folder), dtype=peers.torch().float32,
                quantization_config=transformers.CompressedTensorsConfig(dequantize=True))
        checks.append(transformers_check(state, model, "transformers from_pretrained (dequantize=True)"))
    tensor_bytes = sum(int(t.numel() * t.element_size()) for t in stored.values())
    quantized = sum(int(t.numel() * t.element_size()) for k, t in stored.items() if of_quantized(k))
    files = sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())
    return Verification(checks, files, tensor_bytes, quantized, sum(plan.predicted.values()))


def _group_of(layer: str, groups: dict[str, Any]) -> dict[str, Any]:
    for group in groups.values():
        targets = group["targets"]
        if layer in targets or "Linear" in targets:
            return group
    raise ValueError(f"no config group of the written quantization_config targets {layer}")
