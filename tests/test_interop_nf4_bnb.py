"""`nf4:...:bnb` against bitsandbytes' own quantize_4bit, code for code; `nf4` keeps the exact rule.

Oracle: bitsandbytes.functional.quantize_4bit (0.50, its default CPU path), unpacked high nibble first,
on a million random weights and on weights placed on and beside every level boundary.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

import precisionlab as pl

torch = pytest.importorskip("torch")
bnb = pytest.importorskip("bitsandbytes")


def bnb_codes(w: Any, blocksize: int) -> tuple[np.ndarray, np.ndarray]:
    """(codes in element order, absmax) as bitsandbytes quantizes w."""
    try:
        packed, state = bnb.functional.quantize_4bit(w, blocksize=blocksize, quant_type="nf4")
    except Exception as exc:  # a build without its CPU path
        pytest.skip(f"bitsandbytes' CPU path does not run here: {exc}")
    p = packed.reshape(-1).numpy()
    codes = np.stack([p >> 4, p & 15], axis=1).reshape(-1)[: w.numel()]
    return codes.astype(np.uint8), state.absmax.numpy()


def ours(w: Any, scheme: str) -> tuple[np.ndarray, np.ndarray]:
    q = pl.quantize(w, scheme)
    return np.asarray(q.codes).reshape(-1), np.asarray(q.scales, dtype=np.float32).reshape(-1)


@pytest.mark.parametrize(("dtype", "blocksize"), [(torch.float32, 64), (torch.bfloat16, 64), (torch.float16, 128),
                                                 (torch.float32, 256)])
def test_nf4_bnb_equals_quantize_4bit_on_a_million_random_weights(dtype: Any, blocksize: int) -> None:
    g = torch.Generator().manual_seed(7)
    w = (torch.randn(1024, 1024, generator=g) * 0.02).to(dtype)
    w[3, 5] = 0.5  # an outlier
    w[9, :blocksize] = 0  # an all-zero block
    codes, absmax = bnb_codes(w, blocksize)
    got_codes, got_scales = ours(w, f"nf4:g{blocksize}:bnb")
    assert np.array_equal(got_codes, codes)
    nonzero = absmax != 0  # an all-zero block: bitsandbytes stores absmax 0, precisionlab scale 1 (both decode to 0)
    assert np.array_equal(got_scales[nonzero].view(np.uint32), absmax[nonzero].view(np.uint32))
    assert np.all(got_scales[~nonzero] == 1) and (~nonzero).sum() == 1


def boundary_weights(seed: int = 3, blocks: int = 4096) -> Any:
    """Blocks of 64: the absmax a, then for each of the 15 level boundaries m the float32 values nearest m * a
    (bitsandbytes' float32 midpoint times a, the exact midpoint times a, one float32 ulp either side), signs
    as the boundary's."""
    from precisionlab.formats.codebook import NF4

    rng = np.random.default_rng(seed)
    a = rng.uniform(0.01, 2.0, size=blocks).astype(np.float32)
    exact = NF4.midpoints  # float64, exact
    fp32 = NF4.midpoints32
    rows = np.zeros((blocks, 64), dtype=np.float32)
    rows[:, 0] = a
    col = 1
    for m64, m32 in zip(exact, fp32, strict=True):
        near = (m32 * a).astype(np.float32)
        for v in (near, (m64 * a.astype(np.float64)).astype(np.float32), np.nextafter(near, np.float32(np.inf)),
                  np.nextafter(near, np.float32(-np.inf))):
            if col < 64:
                rows[:, col] = v
                col += 1
    rows[:, col:] = rows[:, 1 : 1 + 64 - col]
    return torch.from_numpy(rows)


def test_nf4_bnb_equals_quantize_4bit_on_every_level_boundary() -> None:
    w = boundary_weights()
    codes, absmax = bnb_codes(w, 64)
    got_codes, got_scales = ours(w, "nf4:g64:bnb")
    assert np.array_equal(got_codes, codes)
    assert np.array_equal(got_scales.view(np.uint32), absmax.view(np.uint32))
    exact_codes, _ = ours(w, "nf4:g64")  # the exact rule differs from bitsandbytes right at the boundaries
    assert 0 < np.mean(exact_codes != codes) < 0.5


def test_the_exact_rule_is_the_nearest_level_of_the_exact_ratio() -> None:
    """nf4 (no option): the code of the level nearest to x / absmax computed in exact rationals, a tie to the lower."""
    from fractions import Fraction

    from precisionlab.formats.codebook import NF4

    w = boundary_weights(seed=5, blocks=64).numpy()
    codes, scales = ours(w, "nf4:g64")
    levels = [Fraction(float(v)) for v in NF4.table]
    flat, amax = w.reshape(-1, 64), scales
    for b in range(0, 64, 7):
        for j in range(64):
            r = Fraction(float(flat[b, j])) / Fraction(float(amax[b]))
            dist = [abs(r - lv) for lv in levels]
            best = min(range(16), key=lambda k: (dist[k], k))
            assert codes[b * 64 + j] == best


def test_the_option_parses_and_prints() -> None:
    s = pl.parse_scheme("nf4:g64:bnb")
    assert str(s) == "nf4:g64:bnb" and s.codebook_rule == "bnb"
    assert str(pl.parse_scheme("nf4:g64")) == "nf4:g64"
    with pytest.raises(ValueError, match="does not apply to int4"):
        pl.parse_scheme("int4:g64:bnb")


def test_the_reader_reports_the_variant_that_wrote_the_file(tmp_path: Path) -> None:
    """A bitsandbytes file re-quantized from its weights with its own scheme gives back its codes and absmax."""
    from safetensors.torch import save_file

    g = torch.Generator().manual_seed(11)
    w = torch.randn(256, 384, generator=g) * 0.05
    packed, state = bnb.functional.quantize_4bit(w, blocksize=64, quant_type="nf4")
    save_file({"l.weight": packed, **{f"l.weight.{k}": v for k, v in state.as_dict(packed=True).items()}},
              str(tmp_path / "m.safetensors"))
    t = pl.read_checkpoint(tmp_path / "m.safetensors")["l.weight"]
    assert t.scheme == "nf4:g64:bnb"
    codes, absmax = bnb_codes(w, 64)
    got_codes, got_scales = ours(w, t.scheme)
    assert np.array_equal(got_codes, codes) and np.array_equal(got_scales, absmax)
    assert np.array_equal(pl.quantize(w, t.scheme).dequantize(), t.dequantize())
    # blocks that run across rows (384 % 256 != 0) are not the scheme's groups: no scheme string for them
    packed, state = bnb.functional.quantize_4bit(w, blocksize=256, quant_type="nf4")
    save_file({"l.weight": packed, **{f"l.weight.{k}": v for k, v in state.as_dict(packed=True).items()}},
              str(tmp_path / "ragged.safetensors"))
    assert pl.read_checkpoint(tmp_path / "ragged.safetensors")["l.weight"].scheme is None
