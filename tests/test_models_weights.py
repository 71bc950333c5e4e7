"""Weight-only fake quantization: selection, exact values, honest bytes, skips, ties, restore, grid alignment.

Expected values: int8 per-row by hand (fp16 scale = amax / 127, codes rounded half to even, read
back as code * scale); bytes by arithmetic over the layer shapes; errors against the quant
library's own float64 metrics (quant.metrics); the Q8_0 embedding of SmolLM2 as a grid-aligned case.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from tests.model_helpers import require_peers, smollm2

torch = pytest.importorskip("torch")

from precisionlab.models.weights import (  # noqa: E402
    DEFAULT_EXCLUDE,
    linear_layers,
    quantize_weights,
    quantized_weights,
)
from precisionlab.quant import error_metrics, quantize  # noqa: E402


class Tiny(torch.nn.Module):
    """An embedding, two linears (one with bias) and an output head tied to the embedding."""

    def __init__(self, tie: bool = True) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.embed_tokens = torch.nn.Embedding(40, 64)
        self.block = torch.nn.ModuleDict({"up": torch.nn.Linear(64, 96, bias=True),
                                          "down": torch.nn.Linear(96, 64, bias=False)})
        self.norm = torch.nn.LayerNorm(64)
        self.lm_head = torch.nn.Linear(64, 40, bias=False)
        if tie:
            self.lm_head.weight = self.embed_tokens.weight

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        h = self.embed_tokens(ids)
        h = self.block["down"](torch.relu(self.block["up"](h)))
        return self.lm_head(self.norm(h))


def int8_row_by_hand(w: np.ndarray) -> np.ndarray:
    """s = fp16(amax / 127) per row, q = round-half-even(x / s) (x / s in float32), x_hat = q * s."""
    amax = np.abs(w.astype(np.float64)).max(axis=1, keepdims=True)
    s = (amax / 127).astype(np.float16).astype(np.float32)
    q = np.rint(w.astype(np.float32) / s)
    return (q * s).astype(np.float32)


def test_selection_default_excludes_head_and_embeddings() -> None:
    model = Tiny()
    assert set(linear_layers(model)) == {"block.up", "block.down"}
    assert set(linear_layers(model, exclude=())) == {"embed_tokens", "block.up", "block.down", "lm_head"}
    assert set(linear_layers(model, include=["block.*"], exclude=["*.down"])) == {"block.up"}
    assert DEFAULT_EXCLUDE == ("lm_head", "*embed*")
    with pytest.raises(ValueError, match=r"--include 'blocks\.\*' matches no weight layer"):
        linear_layers(model, include=["blocks.*"])


def test_int8_row_values_are_exact_and_the_forward_is_unhooked() -> None:
    model = Tiny()
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    report = quantize_weights(model, "int8:row")
    for name in ("block.up", "block.down"):
        weight = dict(model.named_modules())[name].weight.detach().numpy()
        np.testing.assert_array_equal(weight, int8_row_by_hand(before[f"{name}.weight"].numpy()))
    assert torch.equal(model.block["up"].bias, before["block.up.bias"])  # biases stay
    assert torch.equal(model.embed_tokens.weight, before["embed_tokens.weight"])
    # replaced once, in place: no hooks, same parameter objects, same dtype and shape, so the forward is unchanged
    assert all(not m._forward_pre_hooks and not m._forward_hooks for m in model.modules())
    assert model.block["up"].weight.dtype == torch.float32 and model.block["up"].weight.is_contiguous()
    report.restore()
    for name, p in model.named_parameters():
        assert torch.equal(p, before[name]), name


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_spilled_originals_wait_on_disk_and_the_weights_are_written_in_their_own_storage(
        tmp_path, dtype) -> None:  # type: ignore[no-untyped-def]
    """spill_dir: the model holds its weights once (the dequantized values in the same storage, the originals in
    one safetensors file per weight), the values are those of the in-memory mode, and restore is bit-exact."""
    model = Tiny(tie=False).to(dtype)
    reference = Tiny(tie=False).to(dtype)  # the same seed: identical weights, quantized the default way
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    pointers = {n: p.data_ptr() for n, p in model.named_parameters()}
    in_memory = quantize_weights(reference, "int4:g32", exclude=())
    report = quantize_weights(model, "int4:g32", exclude=(), spill_dir=tmp_path / "spill")
    assert len(list((tmp_path / "spill").glob("*.safetensors"))) == len(report.quantized) == 4
    for (name, p), (_, q) in zip(model.named_parameters(), reference.named_parameters(), strict=True):
        assert p.data_ptr() == pointers[name], name  # written in place: no second copy of the weight
        assert torch.equal(p, q), name
    assert not all(torch.equal(p, before[n]) for n, p in model.named_parameters())
    for parameter in report.replaced:  # one original at a time, read from its file
        name = next(n for n, p in model.named_parameters() if p is parameter)
        original = report.original(parameter)
        assert original.dtype == dtype and torch.equal(original, before[name])
    with pytest.raises(KeyError):
        report.original(model.norm.weight)
    report.restore()
    report.restore()  # idempotent
    assert not list((tmp_path / "spill").glob("*.safetensors"))
    for name, p in model.named_parameters():
        assert p.data_ptr() == pointers[name] and torch.equal(p, before[name]), name
    in_memory.restore()


def test_a_failure_midway_restores_the_spilled_weights(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from precisionlab.models import weights

    model = Tiny(tie=False)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    real = weights.quantize
    calls = []

    def failing(matrix, scheme):  # type: ignore[no-untyped-def]
        calls.append(1)
        if len(calls) == 3:
            raise KeyboardInterrupt
        return real(matrix, scheme)

    monkeypatch.setattr(weights, "quantize", failing)
    with pytest.raises(KeyboardInterrupt):
        quantize_weights(model, "int8:row", exclude=(), spill_dir=tmp_path)
    for name, p in model.named_parameters():
        assert torch.equal(p, before[name]), name


def test_bytes_are_quantized_layers_plus_the_rest_at_their_width() -> None:
    model = Tiny()
    report = quantize_weights(model, "int8:row")
    # int8:row: one byte per weight and one fp16 scale per row
    up = 96 * 64 + 96 * 2
    down = 64 * 96 + 64 * 2
    rest = 4 * (40 * 64 + 96 + 2 * 64)  # tied embedding/head once, the up bias, LayerNorm weight and bias
    assert report.model_bytes == up + down + rest
    assert report.reference_bytes == 4 * (40 * 64 + 96 * 64 + 96 + 64 * 96 + 2 * 64)
    assert report.bits_per_weight == pytest.approx(8 * (up + down) / (2 * 96 * 64))
    report.restore()


def test_groups_that_do_not_divide_a_row_are_padded_and_counted() -> None:
    layer = torch.nn.Sequential(torch.nn.Linear(576, 8, bias=False))
    report = quantize_weights(layer, "int4:g128", exclude=())
    (record,) = report.layers
    # 576 = 4.5 groups of 128: each row stores 640 codes (320 bytes) and 5 fp16 scales
    assert record.nbytes == 8 * (320 + 5 * 2) and record.padded == 8 * 64
    assert "576 padded to 640" in record.note and report.notes()
    report.restore()


def test_a_scheme_that_cannot_apply_skips_the_layer_with_a_note() -> None:
    model = Tiny()
    report = quantize_weights(model, "int8:row:outliers=80")  # 80 fp16 rows: more than block.down has (64)
    skipped = {r.name: r.note for r in report.skipped}
    assert set(skipped) == {"block.down"} and "outliers=80" in skipped["block.down"]
    assert [r.name for r in report.quantized] == ["block.up"]
    assert any("block.down: skipped" in line for line in report.notes())
    report.restore()


def test_tied_weight_is_one_tensor_quantized_once() -> None:
    model = Tiny()
    report = quantize_weights(model, "int8:row", exclude=())
    names = [r.name for r in report.layers]
    assert names.count("embed_tokens") + names.count("lm_head") == 1
    tied = next(r for r in report.layers if r.name in ("embed_tokens", "lm_head"))
    assert set(tied.tied) | {tied.name} == {"embed_tokens", "lm_head"}
    assert model.lm_head.weight is model.embed_tokens.weight
    expected_rest = 4 * (96 + 2 * 64)
    quantized = sum(r.nbytes for r in report.quantized)
    assert report.model_bytes == quantized + expected_rest
    report.restore()


def test_errors_agree_with_the_quant_library_metrics() -> None:
    model = Tiny()
    original = model.block["up"].weight.detach().clone().numpy()
    with quantized_weights(model, "nvfp4", include=["block.up"]) as report:
        (record,) = report.quantized
        expected = error_metrics(original, quantize(original, "nvfp4"))
        assert record.rel_err == pytest.approx(expected.rel_err, rel=1e-6)
        assert record.sqnr_db == pytest.approx(expected.sqnr_db, rel=1e-6)
        assert report.rel_err == pytest.approx(expected.rel_err, rel=1e-6)
        assert not record.unchanged and report.alignment == "no"
    np.testing.assert_array_equal(model.block["up"].weight.detach().numpy(), original)


def test_conv1d_is_quantized_along_its_inputs() -> None:
    require_peers()
    from transformers.pytorch_utils import Conv1D

    torch.manual_seed(1)
    layer = torch.nn.Sequential(Conv1D(24, 64))  # weight (in=64, out=24)
    weight = layer[0].weight.detach().clone().numpy()
    with quantized_weights(layer, "int4:g32", exclude=()) as report:
        (record,) = report.quantized
        assert record.kind == "conv1d" and record.shape == (24, 64)
        expected = quantize(np.ascontiguousarray(weight.T), "int4:g32").dequantize().T
        np.testing.assert_array_equal(layer[0].weight.detach().numpy(), expected)


def test_smollm2_all_linears_bytes_by_arithmetic() -> None:
    loaded = smollm2()
    with quantized_weights(loaded.model, "int4:g128") as report:
        assert len(report.quantized) == 30 * 7 and not report.skipped
        # per row: 576 inputs -> 640 padded codes (320 bytes) + 5 fp16 scales; 1536 inputs -> 768 + 12 * 2
        narrow, wide = 320 + 10, 768 + 24
        per_block = (576 + 192 + 192 + 576 + 1536 + 1536) * narrow + 576 * wide
        floats = 4 * (49152 * 576 + 30 * 2 * 576 + 576)  # tied embedding, two norms per block, the final norm
        assert report.model_bytes == 30 * per_block + floats
        assert report.reference_bytes == loaded.nbytes
        assert report.alignment == "no"  # int4:g128's integer zero points do not hold the Q4_1 grid (a float minimum)


def test_smollm2_q8_0_embedding_is_detected_as_grid_aligned() -> None:
    """The tied embedding is Q8_0 in the GGUF (int8 codes, an fp16 scale per 32): int8:g32 reproduces it exactly
    and the report says so; the Q4_1 linears are not on that grid."""
    loaded = smollm2()
    embedding = loaded.model.model.embed_tokens.weight.detach().clone()
    with quantized_weights(loaded.model, "int8:g32", include=["model.embed_tokens", "model.layers.0.mlp.*"],
                           exclude=()) as report:
        aligned = {r.name: r.unchanged for r in report.quantized}
        assert aligned["model.embed_tokens"] and not aligned["model.layers.0.mlp.up_proj"]
        assert report.alignment == f"partly (1/{len(report.quantized)} layers)"
        assert math.isinf(next(r.sqnr_db for r in report.quantized if r.name == "model.embed_tokens"))
    assert torch.equal(loaded.model.model.embed_tokens.weight, embedding)
