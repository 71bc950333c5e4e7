"""Scaled storage, tiled-traffic model and roofline ceilings of precisionlab.gemm."""

from __future__ import annotations

import numpy as np
import pytest

from precisionlab.gemm import Variant, scale_and_round
from precisionlab.gemm.ceilings import datasheet, parse_peaks
from precisionlab.gemm.roofline import Ceilings
from precisionlab.gemm.scaling import block_amax
from precisionlab.gemm.traffic import check_sizes, tiled_traffic, variant_traffic


def test_scales_put_each_block_amax_on_the_top_value() -> None:
    ml_dtypes = pytest.importorskip("ml_dtypes")
    rng = np.random.default_rng(0)
    x = rng.normal(size=(5, 300)) * np.exp2(rng.integers(-8, 8, (5, 1)))
    scaled = scale_and_round(x, "e4m3", (1, 128))
    assert scaled.scales.shape == (5, 3)
    for i in range(5):
        for j, (lo, hi) in enumerate([(0, 128), (128, 256), (256, 300)]):
            amax = np.abs(x[i, lo:hi]).max()
            assert scaled.scales[i, j] == float(np.float32(amax / 448))
            assert np.abs(scaled.q[i, lo:hi]).max() == 448
    # every stored value is an e4m3 value: the ml_dtypes cast leaves it unchanged
    np.testing.assert_array_equal(scaled.q.astype(ml_dtypes.float8_e4m3fn).astype(np.float64), scaled.q)
    rel = np.abs(scaled.dequantize() - x) / np.abs(x)
    assert rel[np.abs(x) / scaled.expanded_scales() >= 2.0**-6].max() <= 2.0**-4  # half ulp(1) of e4m3, normals


def test_fnuz_scales_use_240() -> None:
    x = np.linspace(0.5, 3.0, 12).reshape(3, 4)
    scaled = scale_and_round(x, "e4m3fnuz")
    assert scaled.scales.shape == (1, 1)
    assert scaled.scales[0, 0] == float(np.float32(3.0 / 240))
    assert np.abs(scaled.q).max() == 240


def test_block_amax_handles_ragged_edges() -> None:
    x = np.arange(15.0).reshape(3, 5)
    np.testing.assert_array_equal(block_amax(x, (2, 2)), [[6, 8, 9], [11, 13, 14]])
    np.testing.assert_array_equal(scale_and_round(np.zeros((2, 2)), "e4m3").scales, [[1.0]])


@pytest.mark.parametrize(("storage", "width"), [("fp32", 4), ("fp16", 2), ("bf16", 2), ("e4m3", 1)])
@pytest.mark.parametrize("tile", [16, 32, 64])
def test_square_tiled_read_intensity_is_tile_over_width(storage: str, width: int, tile: int) -> None:
    """A06's derivation: 2MNK FLOPs over 2MNK·w/T bytes read = T/w (T/4 fp32, T/2 16-bit)."""
    size = 4 * tile
    traffic = variant_traffic(Variant(storage, storage), size, size, size, tile)
    assert traffic.read_intensity == pytest.approx(tile / width)
    assert traffic.write_bytes == size * size * 4
    assert traffic.flops == 2 * size**3


def test_16bit_storage_halves_the_read_traffic_exactly() -> None:
    fp32 = tiled_traffic(512, 512, 512, 4, 32)
    fp16 = tiled_traffic(512, 512, 512, 2, 32)
    assert fp32.read_bytes == 2 * fp16.read_bytes
    assert fp32.write_bytes == fp16.write_bytes


def test_gemv_reads_the_matrix_about_once() -> None:
    n = 4096
    t = tiled_traffic(1, n, n, 2, 32)
    assert t.read_bytes == (n // 32) * (n + n * 32) * 2
    assert t.read_intensity == pytest.approx(2 * n * n / (n * n * 2 * (1 + 1 / 32)))


def test_block_scales_add_their_bytes() -> None:
    plain = tiled_traffic(256, 256, 256, 1, 32)
    blocked = tiled_traffic(256, 256, 256, 1, 32, scaling="block")
    tiles = 8 * 8
    assert blocked.read_bytes - plain.read_bytes == tiles * (32 * 2 + 2 * 1) * 4


@pytest.mark.parametrize(("sizes", "message"), [((0, 32, 32, 32), "positive"), ((32, 48, 32, 32), "multiple"),
                                                 ((3, 32, 32, 32), "multiple"), ((32, 32, -1, 32), "positive")])
def test_bad_sizes_raise(sizes: tuple[int, int, int, int], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        check_sizes(*sizes)
    check_sizes(1, 64, 64, 32)  # a GEMV is allowed M = 1


def test_roofline_bound_and_attainable() -> None:
    roof = Ceilings("toy", bandwidth_gbs=100.0, peaks_gflops={"bf16": 1000.0})
    assert roof.ridge("bf16") == 10.0
    assert roof.attainable("bf16", 2.0) == 200.0 and roof.bound("bf16", 2.0) == "memory"
    assert roof.attainable("bf16", 50.0) == 1000.0 and roof.bound("bf16", 50.0) == "compute"
    with pytest.raises(ValueError, match="no fp8"):
        roof.peak("fp8")


def test_datasheet_overrides() -> None:
    assert parse_peaks(["989", "fp8=1979"]) == {"bf16": 989.0, "fp8": 1979.0}
    assert datasheet(None) is None
    h200 = datasheet("h200")
    assert h200 is not None and h200.bandwidth_gbs == 4800 and h200.peak("bf16") == 989.5e3
    custom = datasheet("h200", ["bf16=500"], 1000)
    assert custom is not None and custom.peak("bf16") == 500e3 and custom.bandwidth_gbs == 1000
    bare = datasheet(None, ["100"], 50)
    assert bare is not None and bare.ridge("bf16") == 100e3 / 50
    with pytest.raises(ValueError, match="needs both"):
        datasheet(None, ["100"])
    with pytest.raises(ValueError, match="PREC=VALUE"):
        parse_peaks(["fast"])
