"""models.replace.replace_weights: only the replaced weights are kept, in memory or on disk, and come back exactly.

Expected values: the test's own clones of the weights taken before anything is replaced (torch.equal, bit for
bit), the storage pointers of the untouched parameters (data_ptr), and byte counts by arithmetic over shapes.
"""

from __future__ import annotations

import numpy as np
import pytest

from tests.model_helpers import require_peers, tiny_llama

require_peers()
torch = pytest.importorskip("torch")

from precisionlab.models import replace  # noqa: E402
from precisionlab.models.weights import SPILL_ABOVE, replace_weights, spilling_to  # noqa: E402

DOWN = "model.layers.0.mlp.down_proj"
UP = "model.layers.1.mlp.up_proj.weight"


def _state(model):  # type: ignore[no-untyped-def]
    return {n: p.detach().clone() for n, p in model.named_parameters()}


def _pointers(model):  # type: ignore[no-untyped-def]
    return {n: p.data_ptr() for n, p in model.named_parameters()}


def _new_values(model):  # type: ignore[no-untyped-def]
    params = dict(model.named_parameters())
    return {DOWN: torch.full_like(params[f"{DOWN}.weight"], 0.25),
            UP: np.full(tuple(params[UP].shape), -0.5, dtype=np.float32)}


@pytest.mark.parametrize("spill_above", [None, 0])
def test_restored_bit_for_bit_and_untouched_weights_keep_their_storage(spill_above, tmp_path) -> None:  # type: ignore[no-untyped-def]
    model = tiny_llama(2)
    before, pointers = _state(model), _pointers(model)
    with spilling_to(tmp_path):
        replaced = replace_weights(model, _new_values(model), spill_above=spill_above)
    params = dict(model.named_parameters())
    assert torch.equal(params[f"{DOWN}.weight"], torch.full_like(before[f"{DOWN}.weight"], 0.25))
    assert torch.equal(params[UP], torch.full_like(before[UP], -0.5))
    assert replaced.names == [f"{DOWN}.weight", UP]
    nbytes = 4 * (64 * 128 + 128 * 64)
    assert replaced.held_bytes + replaced.spilled_bytes == nbytes
    assert replaced.spilled_bytes == (nbytes if spill_above == 0 else 0)
    for name, p in model.named_parameters():
        if name not in (f"{DOWN}.weight", UP):
            assert p.data_ptr() == pointers[name] and torch.equal(p, before[name]), name
    assert torch.equal(replaced.original(params[UP]), before[UP])
    replaced.restore()
    replaced.restore()  # idempotent
    for name, p in model.named_parameters():
        assert torch.equal(p, before[name]), name
        assert p.data_ptr() == pointers[name], name  # the very tensors (in memory) or storages (spilled) back


def test_past_the_threshold_the_originals_go_to_disk_and_the_values_into_their_own_storage(tmp_path) -> None:  # type: ignore[no-untyped-def]
    model = tiny_llama(2)
    before, pointers = _state(model), _pointers(model)
    one = 4 * 64 * 128  # bytes of either weight: the first stays in memory, the second spills
    replaced = replace_weights(model, _new_values(model), spill_above=one, spill_dir=tmp_path)
    assert replaced.held_bytes == one and replaced.spilled_bytes == one
    files = list(tmp_path.glob("*.safetensors"))
    assert len(files) == 1 and replaced.spilled == files
    assert dict(model.named_parameters())[UP].data_ptr() == pointers[UP]  # written into its own storage
    assert torch.equal(replaced.original(dict(model.named_parameters())[UP]), before[UP])  # read from the file
    replaced.restore()
    assert not list(tmp_path.glob("*.safetensors"))
    for name, p in model.named_parameters():
        assert torch.equal(p, before[name]), name


def test_spill_above_is_one_fp32_4096_square_matrix() -> None:
    assert SPILL_ABOVE == 4 * 4096 * 4096 == 64 * 2**20


def test_restored_on_an_exception_in_the_block_and_midway(tmp_path) -> None:  # type: ignore[no-untyped-def]
    model = tiny_llama(2)
    before = _state(model)
    with pytest.raises(RuntimeError, match="boom"), replace_weights(model, _new_values(model), spill_above=0,
                                                                    spill_dir=tmp_path):
        assert not torch.equal(dict(model.named_parameters())[UP], before[UP])
        raise RuntimeError("boom")
    for name, p in model.named_parameters():
        assert torch.equal(p, before[name]), name

    def values():  # type: ignore[no-untyped-def]
        yield DOWN, torch.zeros(128 * 64).reshape(64, 128)
        yield UP, torch.zeros(128, 64)
        raise KeyboardInterrupt

    for threshold in (None, 0):
        with pytest.raises(KeyboardInterrupt):
            replace_weights(model, values(), spill_above=threshold, spill_dir=tmp_path)
        for name, p in model.named_parameters():
            assert torch.equal(p, before[name]), name
    assert not list(tmp_path.glob("*.safetensors"))


def test_a_wrong_shape_or_name_is_refused_with_everything_put_back() -> None:
    model = tiny_llama(2)
    before = _state(model)
    with pytest.raises(ValueError, match=r"model.layers.1.mlp.up_proj.weight: new values of shape \(3, 3\)"):
        replace_weights(model, [(DOWN, torch.zeros(64, 128)), (UP, torch.zeros(3, 3))])
    with pytest.raises(ValueError, match=r"no parameter or weight layer named .model\.nope."):
        replace_weights(model, {"model.nope": torch.zeros(1)})
    for name, p in model.named_parameters():
        assert torch.equal(p, before[name]), name


def test_a_tied_weight_is_one_weight() -> None:
    model = tiny_llama(2)
    model.lm_head.weight = model.model.embed_tokens.weight
    original = model.lm_head.weight.detach().clone()
    shape = tuple(original.shape)
    with replace_weights(model, [("lm_head", torch.ones(shape)), ("model.embed_tokens.weight", torch.full(shape, 2.0))]
                         ) as replaced:
        assert replaced.names == ["lm_head.weight"] and replaced.held_bytes == original.numel() * 4
        assert torch.equal(model.model.embed_tokens.weight, torch.full(shape, 2.0))
    assert torch.equal(model.lm_head.weight, original) and model.lm_head.weight is model.model.embed_tokens.weight


def test_a_spill_file_is_exact_in_bfloat16(tmp_path) -> None:  # type: ignore[no-untyped-def]
    model = tiny_llama(2).to(torch.bfloat16)
    before = _state(model)
    with replace_weights(model, _new_values(model), spill_above=0, spill_dir=tmp_path) as replaced:
        assert dict(model.named_parameters())[UP].dtype == torch.bfloat16
        assert replace._read(replaced.spilled[0]).dtype == torch.bfloat16
    for name, p in model.named_parameters():
        assert torch.equal(p, before[name]), name
