"""Integer schemes against a straightforward per-block reference written here, and byte accounting."""

from __future__ import annotations

import numpy as np
import pytest

from precisionlab.quant import quantize

ml_dtypes = pytest.importorskip("ml_dtypes")

SCALE_DTYPES = {"fp16": np.float16, "fp32": np.float32, "bf16": ml_dtypes.bfloat16, "e4m3": ml_dtypes.float8_e4m3fn}


def reference_symmetric(w: np.ndarray, bits: int, rows: int, cols: int, scale: str) -> tuple[np.ndarray, np.ndarray]:
    """Loop over blocks: s = dtype(amax / qmax); q = clip(rint(x / s), -qmax, qmax); pad columns with 0."""
    qmax = 2 ** (bits - 1) - 1
    m, n = w.shape
    n_pad = -(-n // cols) * cols
    padded = np.zeros((m, n_pad), dtype=np.float32)
    padded[:, :n] = w
    q = np.zeros((m, n_pad), dtype=np.int64)
    scales = np.zeros((-(-m // rows), n_pad // cols))
    for bi, r0 in enumerate(range(0, m, rows)):
        for bj, c0 in enumerate(range(0, n_pad, cols)):
            block = padded[r0 : r0 + rows, c0 : c0 + cols]
            amax = float(np.abs(block).max())
            s = 1.0 if amax == 0 else float(np.asarray(amax / qmax).astype(SCALE_DTYPES[scale]))
            if s == 0.0 and amax > 0:  # documented: a nonzero block never gets scale 0 (smallest subnormal)
                s = float(ml_dtypes.finfo(SCALE_DTYPES[scale]).smallest_subnormal)
            scales[bi, bj] = s
            q[r0 : r0 + rows, c0 : c0 + cols] = np.clip(np.rint(block / np.float32(s)), -qmax, qmax)
    return q, scales


def reference_dequant(q: np.ndarray, scales: np.ndarray, rows: int, cols: int, shape: tuple[int, int]) -> np.ndarray:
    s = np.repeat(np.repeat(scales, rows, axis=0), cols, axis=1)[: q.shape[0], : q.shape[1]]
    return (q * s.astype(np.float32)).astype(np.float32)[: shape[0], : shape[1]]


def signed(codes: np.ndarray, bits: int) -> np.ndarray:
    c = codes.astype(np.int64)
    return np.where(c >= 1 << (bits - 1), c - (1 << bits), c)


@pytest.fixture
def matrix() -> np.ndarray:
    rng = np.random.default_rng(7)
    w = (rng.standard_normal((40, 200)) * 0.05).astype(np.float32)
    w[5, 17] = 3.0  # an outlier
    w[9] *= 200.0  # an outlier row
    return w


@pytest.mark.parametrize(("scheme", "bits", "rows", "cols", "scale"), [
    ("int8", 8, 40, 200, "fp16"),
    ("int8:row", 8, 1, 200, "fp16"),
    ("int8:col", 8, 40, 1, "fp16"),
    ("int8:g64", 8, 1, 64, "fp16"),  # 200 = 3*64 + 8: the last group is padded
    ("int4:g32", 4, 1, 32, "fp16"),
    ("int4:g128:scale=fp32", 4, 1, 128, "fp32"),
    ("int2:g16", 2, 1, 16, "fp16"),
    ("int8:block16x64", 8, 16, 64, "fp16"),
    ("int8:tile1x128", 8, 1, 128, "fp16"),
    ("int8:row:scale=bf16", 8, 1, 200, "bf16"),
    ("int4:g32:scale=e4m3", 4, 1, 32, "e4m3"),
])
def test_symmetric_matches_reference(matrix: np.ndarray, scheme: str, bits: int, rows: int, cols: int,
                                     scale: str) -> None:
    q = quantize(matrix, scheme)
    ref_q, ref_s = reference_symmetric(matrix, bits, rows, cols, scale)
    np.testing.assert_array_equal(signed(q.codes, bits), ref_q)
    np.testing.assert_array_equal(q.scales.astype(np.float64), ref_s)
    np.testing.assert_array_equal(q.dequantize(), reference_dequant(ref_q, ref_s, rows, cols, matrix.shape))


def test_asymmetric_matches_seed_formula(matrix: np.ndarray) -> None:
    x = np.abs(matrix) + 0.01  # a range not centred on zero
    x[3] -= 0.5
    q = quantize(x, "int8:row:asym")
    codes = signed(q.codes, 8)
    for r in range(x.shape[0]):
        lo, hi = min(float(x[r].min()), 0.0), max(float(x[r].max()), 0.0)
        s = float(np.float16((hi - lo) / 255))
        z = float(np.clip(-128 - np.rint(lo / s), -128, 127))
        expected = np.clip(np.rint(x[r] / np.float32(s)) + z, -128, 127)
        np.testing.assert_array_equal(codes[r], expected)
        assert q.zero_points[0, r, 0] == z and q.scales[r, 0] == np.float32(s)
        np.testing.assert_array_equal(q.dequantize()[r], ((expected - z) * np.float32(s)).astype(np.float32))


def test_uint8_is_affine() -> None:
    x = np.linspace(0.0, 2.0, 64, dtype=np.float32).reshape(2, 32)
    q = quantize(x, "uint8:row")
    s = np.float32(np.float16(2.0 / 255))
    assert q.zero_points[0, 1, 0] == 0 and q.scales[1, 0] == s
    np.testing.assert_array_equal(q.codes[1], np.clip(np.rint(x[1] / s), 0, 255))


def test_axis_moves_groups() -> None:
    rng = np.random.default_rng(1)
    x = rng.standard_normal((64, 8)).astype(np.float32)
    along0 = quantize(x, "int8:g32:axis=0")
    plain = quantize(np.ascontiguousarray(x.T), "int8:g32")
    np.testing.assert_array_equal(along0.codes, plain.codes)
    np.testing.assert_array_equal(along0.dequantize(), plain.dequantize().T)


def test_nd_tensor_groups_run_along_last_axis() -> None:
    x = np.random.default_rng(2).standard_normal((3, 4, 64)).astype(np.float32)
    q = quantize(x, "int4:g32")
    flat = quantize(x.reshape(12, 64), "int4:g32")
    np.testing.assert_array_equal(q.codes, flat.codes)
    assert q.dequantize().shape == (3, 4, 64)


# Exercise 3's bytes column (64x256, int8, fp16 scales), from the seed's reference table.
EXERCISE3_BYTES = {"int8": 16386, "int8:row": 16512, "int8:g128": 16640, "int8:g64": 16896, "int8:g32": 17408,
                   "int8:g16": 18432, "int8:g8": 20480}


@pytest.mark.parametrize(("scheme", "expected"), sorted(EXERCISE3_BYTES.items()))
def test_exercise3_bytes(scheme: str, expected: int) -> None:
    q = quantize(np.ones((64, 256), dtype=np.float32), scheme)
    assert q.nbytes == expected
    assert q.nbytes == 64 * 256 + q.layout.n_blocks * 2


def test_bytes_count_everything() -> None:
    x = np.random.default_rng(3).standard_normal((64, 250)).astype(np.float32)
    q = quantize(x, "int4:g128:asym")
    # 250 columns -> 2 groups of 128, the last padded with 6 zeros, stored and counted
    assert q.padded_elements == 64 * 6
    assert q.byte_breakdown() == {"payload": 64 * 256 // 2, "scales": 128 * 2, "zero_points": 128 // 2, "mins": 0,
                                  "outliers": 0, "tensor_scale": 0}
    out = quantize(x, "int8:row:outliers=1")
    assert out.byte_breakdown()["outliers"] == 250 * 2 + 4
    assert out.byte_breakdown()["payload"] == 63 * 250


@pytest.mark.parametrize(("scheme", "shape", "expected"), [
    # layout by hand: packed codes + scale bits per block + zero-point bits (element width) per block
    ("int4:g128:asym", (8, 128), 8 * 128 * 4 // 8 + 8 * 2 + 8 * 4 // 8),         # 512 + 16 + 4
    ("int4:g128:asym", (1, 128), 64 + 2 + 1),                                     # one 4-bit zero: a whole byte
    ("int4:g128", (64, 250), 64 * 256 // 2 + 128 * 2),                             # 250 -> 256: padded, counted
    ("e4m3:block128x128", (128, 256), 128 * 256 + 2 * 4),
    ("mxfp6", (4, 64), 4 * 64 * 3 // 4 + 8),                                        # four codes per three bytes
    ("nvfp4", (2, 32), 2 * 32 // 2 + 4 + 4),                                        # e4m3 block scales, fp32 g
    ("int8:row:outliers=1", (4, 8), 3 * 8 + 3 * 2 + 8 * 2 + 4),                    # fp16 row + int32 index
])
def test_byte_model_without_data(scheme: str, shape: tuple[int, int], expected: int) -> None:
    from precisionlab.quant import bits_per_element, stored_bytes

    assert sum(stored_bytes(scheme, shape).values()) == expected
    assert bits_per_element(scheme, shape) == 8 * expected / (shape[0] * shape[1])
    q = quantize(np.random.default_rng(0).standard_normal(shape).astype(np.float32), scheme)
    assert q.nbytes == expected and q.byte_breakdown() == stored_bytes(scheme, shape)


def test_outlier_rows_kept_in_fp16(matrix: np.ndarray) -> None:
    q = quantize(matrix, "int8:outliers=1")
    assert q.outlier_index.tolist() == [9]
    out = q.dequantize()
    np.testing.assert_array_equal(out[9], matrix[9].astype(np.float16).astype(np.float32))
    rest = np.delete(matrix, 9, axis=0)
    ref_q, ref_s = reference_symmetric(rest, 8, rest.shape[0], rest.shape[1], "fp16")
    np.testing.assert_array_equal(np.delete(out, 9, axis=0), reference_dequant(ref_q, ref_s, 39, 200, rest.shape))


def test_all_zero_block_has_unit_scale_and_zero_codes() -> None:
    x = np.zeros((2, 64), dtype=np.float32)
    x[1, 40] = 1.0
    q = quantize(x, "int8:g32")
    assert q.scales[0].tolist() == [1.0, 1.0] and q.scales[1, 0] == 1.0
    assert not q.codes[0].any()
    a = quantize(np.zeros((1, 32), dtype=np.float32), "int8:row:asym")
    assert q.scales.dtype == np.float32 and a.zero_points[0, 0, 0] == 0 and not a.codes.any()


def test_nan_input_is_an_error_by_default() -> None:
    x = np.ones((2, 32), dtype=np.float32)
    x[0, 3] = np.nan
    with pytest.raises(ValueError, match="NaN or inf in 1 block"):
        quantize(x, "int8:row")
    q = quantize(x, "int8:row:nonfinite=nan")
    out = q.dequantize()
    assert np.isnan(out[0]).all()
    np.testing.assert_array_equal(out[1], np.float32(127) * np.float32(np.float16(1 / 127)))


def test_inputs_of_every_float_dtype() -> None:
    x = np.random.default_rng(4).standard_normal((4, 32))
    q64 = quantize(x, "int8:row")
    q32 = quantize(x.astype(np.float32), "int8:row")
    assert q64.dtype == "float64" and q32.dtype == "float32"
    q16 = quantize(x.astype(np.float16), "int8:row")
    np.testing.assert_array_equal(q16.codes, quantize(x.astype(np.float16).astype(np.float32), "int8:row").codes)
    with pytest.raises(TypeError, match="float"):
        quantize(np.arange(8), "int8")


def test_big_endian_float_input_is_float_data() -> None:
    # a big-endian .npy (np.save keeps the byte order) holds float32 values like any other:
    # it was refused with "quantize needs ... float32 ... got dtype >f4"
    x = np.random.default_rng(8).standard_normal((4, 32)).astype(np.float32)
    for be in (x.astype(">f4"), x.astype(np.float64).astype(">f8"), x.astype(np.float16).astype(">f2")):
        q = quantize(be, "int4:g16")
        native = quantize(be.astype(be.dtype.newbyteorder("=")), "int4:g16")
        assert q.dtype == native.dtype == be.dtype.newbyteorder("=").name
        np.testing.assert_array_equal(q.packed, native.packed)
        np.testing.assert_array_equal(q.dequantize(), native.dequantize())


def test_torch_bf16_input() -> None:
    torch = pytest.importorskip("torch")
    t = torch.randn(4, 64).to(torch.bfloat16)
    q = quantize(t, "int4:g32")
    np.testing.assert_array_equal(q.codes, quantize(t.float().numpy(), "int4:g32").codes)
    assert q.dtype == "bfloat16"


def test_large_tensor_chunks_agree_with_small_chunks(monkeypatch: pytest.MonkeyPatch) -> None:
    import precisionlab.quant.chunking as chunking

    x = np.random.default_rng(5).standard_normal((300, 520)).astype(np.float32)
    schemes = ["int4:g128", "int8", "int8:col", "nvfp4", "mxfp6", "e4m3:block128x128", "int2:g32:asym"]
    expected = {s: quantize(x, s) for s in schemes}
    monkeypatch.setattr(chunking, "CHUNK", 1000)
    monkeypatch.setattr(chunking, "PARALLEL_MIN", 1)
    for s in schemes:
        q = quantize(x, s)
        np.testing.assert_array_equal(q.packed, expected[s].packed)
        np.testing.assert_array_equal(q.dequantize(), expected[s].dequantize())


@pytest.mark.parametrize(("shape", "scheme", "bits", "rows", "cols"), [
    ((3, 3, 9), "int4:block2x3", 4, 2, 3),  # 27 codes per batch: batches start mid-byte
    ((5, 3, 3), "int2:block2x3", 2, 2, 3),
    ((3, 5, 7), "int4:block2x4", 4, 2, 4),  # columns padded 7 -> 8
    ((2, 3, 5), "int8:block4x2", 8, 4, 2),  # R > M: one shorter block row
])
def test_2d_blocks_over_batches_match_reference(shape: tuple[int, int, int], scheme: str, bits: int, rows: int,
                                                cols: int) -> None:
    # block<R>x<C> on a 3-D tensor: each leading index is its own matrix, quantized independently
    x = np.random.default_rng(8).standard_normal(shape).astype(np.float32)
    q = quantize(x, scheme)
    codes = signed(q.codes, bits)
    out = q.dequantize()
    for b in range(shape[0]):
        ref_q, ref_s = reference_symmetric(x[b], bits, rows, cols, "fp16")
        np.testing.assert_array_equal(codes[b], ref_q)
        np.testing.assert_array_equal(out[b], reference_dequant(ref_q, ref_s, rows, cols, shape[1:]))


ML_DTYPES_ELEMENTS = {"e4m3": "float8_e4m3fn", "e5m2": "float8_e5m2", "e4m3fnuz": "float8_e4m3fnuz",
                      "e5m2fnuz": "float8_e5m2fnuz", "e3m2": "float6_e3m2fn", "e2m3": "float6_e2m3fn",
                      "e2m1": "float4_e2m1fn"}
# bitsandbytes' NF4 table (bitsandbytes/functional.py, get_4bit_type("nf4"))
NF4_TABLE = [-1.0, -0.6961928009986877, -0.5250730514526367, -0.39491748809814453, -0.28444138169288635,
             -0.18477343022823334, -0.09105003625154495, 0.0, 0.07958029955625534, 0.16093020141124725,
             0.24611230194568634, 0.33791524171829224, 0.44070982933044434, 0.5626170039176941,
             0.7229568362236023, 1.0]


def element_grid(element: str) -> tuple[np.ndarray, float]:
    """(every finite value of the element, ascending, float64; the value the block amax maps to), from
    ml_dtypes' own decoding of every bit pattern (integers: the symmetric range; nf4: bitsandbytes' table)."""
    if element.startswith(("int", "uint")):
        bits = int(element.lstrip("uint"))
        top = 2 ** (bits - 1) - 1
        return np.arange(-top, top + 1, dtype=np.float64), float(top)
    if element == "nf4":
        return np.asarray(NF4_TABLE), 1.0
    dtype = getattr(ml_dtypes, ML_DTYPES_ELEMENTS[element])
    codes = np.arange(256, dtype=np.uint8)
    if ml_dtypes.finfo(dtype).bits < 8:
        codes = codes[: 1 << ml_dtypes.finfo(dtype).bits]
    values = np.unique(codes.view(dtype).astype(np.float64))
    values = values[np.isfinite(values)]
    return values, float(values.max())


def block_ids(shape: tuple[int, int, int], granularity: str) -> np.ndarray:
    """The block number of each element of a (B, M, N) tensor whose last axis the groups run along: 2-D blocks
    per leading index; every other granularity sees the tensor as B*M rows of N (groups padded at the end)."""
    b, m, n = shape
    if granularity == ":block2x8":
        k, r, c = np.meshgrid(np.arange(b), np.arange(m), np.arange(n), indexing="ij")
        row_blocks, col_blocks = -(-m // 2), -(-n // 8)
        return (k * row_blocks + r // 2) * col_blocks + c // 8
    r, c = np.meshgrid(np.arange(b * m), np.arange(n), indexing="ij")
    ids = {"": np.zeros_like(r), ":row": r, ":col": c, ":g16": r * -(-n // 16) + c // 16,
           ":tile1x8": r * -(-n // 8) + c // 8}[granularity]
    return ids.reshape(b, m, n)


@pytest.mark.parametrize("element", ["int8", "int4", "int2", "uint8", "uint4", "e4m3", "e5m2", "e4m3fnuz",
                                     "e5m2fnuz", "e3m2", "e2m3", "e2m1", "nf4"])
@pytest.mark.parametrize("granularity", ["", ":row", ":col", ":g16", ":block2x8", ":tile1x8"])
def test_every_element_and_granularity_on_nd_with_axis(element: str, granularity: str) -> None:
    # axis=k means: move axis k last, quantize, move it back (bytes and values identical)
    x = np.random.default_rng(9).standard_normal((3, 40, 5)).astype(np.float32)
    spec = f"{element}{granularity}"
    q = quantize(x, f"{spec}:axis=1")
    moved = quantize(np.ascontiguousarray(np.moveaxis(x, 1, -1)), spec)
    assert q.nbytes == moved.nbytes
    out = q.dequantize()
    assert out.shape == x.shape
    np.testing.assert_array_equal(out, np.moveaxis(moved.dequantize(), -1, 1))
    # each element is the nearest point of its block's grid, checked against a grid built here: the scale s by
    # hand (amax / max code, rounded once into fp16 for integers, fp32 for floats and nf4; asymmetric: s =
    # (max(hi, 0) - min(lo, 0)) / (2^b - 1), z = clip(qmin - rint(lo / s))), the element values from ml_dtypes
    # (or the integers, or bitsandbytes' NF4 table); so |x - x_hat| = s * (distance of x / s to the grid),
    # up to the float32 rounding of x_hat, and at most s/2 inside the grid's range
    v = np.moveaxis(x, 1, -1).astype(np.float64)  # the (3, 5, 40) view quantized
    ids = block_ids(v.shape, granularity)
    grid, top = element_grid(element)
    asym = element.startswith("uint")
    scale_dtype = np.float16 if element.startswith(("int", "uint")) else np.float32
    err = np.abs(np.moveaxis(out, 1, -1).astype(np.float64) - v)
    for block in np.unique(ids):
        members = ids == block
        values = v[members]
        if asym:
            bits = int(element[4:])
            lo, hi = min(values.min(), 0.0), max(values.max(), 0.0)
            s = float(scale_dtype((hi - lo) / (2**bits - 1)))
            z = float(np.clip(-np.rint(lo / s), 0, 2**bits - 1))
            points = (np.arange(2**bits, dtype=np.float64) - z) * s
        else:
            s = float(scale_dtype(np.abs(values).max() / top))
            points = grid * s
        idx = np.clip(np.searchsorted(points, values), 1, points.size - 1)
        distance = np.minimum(np.abs(values - points[idx - 1]), np.abs(values - points[idx]))
        slack = np.spacing(np.float32(np.abs(values).max() + s * (grid[1] - grid[0]))).astype(np.float64)
        np.testing.assert_allclose(err[members], distance, rtol=0, atol=float(slack))
        inside = (values >= points[0]) & (values <= points[-1])
        step = np.diff(points).max()
        assert (err[members][inside] <= step / 2 + slack).all()


def test_outlier_row_beyond_fp16_is_an_error() -> None:
    x = np.ones((4, 8), dtype=np.float32)
    x[2] *= 70000.0  # fp16 max is 65504: the kept row would become inf
    with pytest.raises(ValueError, match="beyond fp16's range"):
        quantize(x, "int8:row:outliers=1")
    x[2] = 60000.0
    assert (quantize(x, "int8:row:outliers=1").dequantize()[2] == 60000.0).all()  # 60000 = 1875 * 2^5, exact
    x[2, 3] = np.nan  # a NaN row is the "largest" and is kept as is
    out = quantize(x, "int8:row:outliers=1").dequantize()
    assert np.isnan(out[2, 3]) and np.isfinite(np.delete(out, 2, axis=0)).all()


def reference_asymmetric(w: np.ndarray, bits: int, unsigned: bool, rows: int, cols: int
                         ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Loop over blocks: lo = min(x, 0), hi = max(x, 0), s = fp16((hi - lo) / (2^b - 1)),
    z = clip(qmin - rint(lo / s), qmin, qmax), q = clip(rint(x / s) + z, qmin, qmax); all-zero: s = 1, z = 0."""
    qmin, qmax = (0, 2**bits - 1) if unsigned else (-(2 ** (bits - 1)), 2 ** (bits - 1) - 1)
    m, n = w.shape
    n_pad = -(-n // cols) * cols
    padded = np.zeros((m, n_pad), dtype=np.float32)
    padded[:, :n] = w
    q = np.zeros((m, n_pad), dtype=np.int64)
    out = np.zeros((m, n_pad), dtype=np.float32)
    zs = np.zeros((-(-m // rows), n_pad // cols))
    for bi, r0 in enumerate(range(0, m, rows)):
        for bj, c0 in enumerate(range(0, n_pad, cols)):
            blk = padded[r0 : r0 + rows, c0 : c0 + cols]
            lo, hi = min(float(blk.min()), 0.0), max(float(blk.max()), 0.0)
            if hi == lo:
                s, z = 1.0, 0.0
            else:
                s = float(np.float16((hi - lo) / (qmax - qmin))) or 2.0**-24  # never 0: fp16's smallest subnormal
                z = float(np.clip(qmin - np.rint(lo / s), qmin, qmax))
            qb = np.clip(np.rint(blk / np.float32(s)) + z, qmin, qmax)
            q[r0 : r0 + rows, c0 : c0 + cols] = qb
            out[r0 : r0 + rows, c0 : c0 + cols] = ((qb - z) * np.float32(s)).astype(np.float32)
            zs[bi, bj] = z
    return q, zs, out[:, :n]


@pytest.mark.parametrize(("scheme", "bits", "unsigned", "rows", "cols"), [
    ("int4:g32:asym", 4, False, 1, 32),  # 200 = 6 * 32 + 8: padded last group
    ("int2:g16:asym", 2, False, 1, 16),
    ("uint4:g64", 4, True, 1, 64),
    ("uint8", 8, True, 40, 200),
    ("int8:col:asym", 8, False, 40, 1),
    ("int8:block8x32:asym", 8, False, 8, 32),
])
def test_asymmetric_matches_reference(matrix: np.ndarray, scheme: str, bits: int, unsigned: bool, rows: int,
                                      cols: int) -> None:
    x = matrix + 0.04  # shift so that blocks are not centred on zero
    x[:, 100:164] = np.abs(x[:, 100:164])  # some blocks entirely positive
    x[3] = 0.0  # an all-zero row
    q = quantize(x, scheme)
    ref_q, ref_z, ref_out = reference_asymmetric(x, bits, unsigned, rows, cols)
    codes = q.codes.astype(np.int64) if unsigned else signed(q.codes, bits)
    np.testing.assert_array_equal(codes, ref_q)
    np.testing.assert_array_equal(q.zero_points[0].astype(np.float64), ref_z)
    np.testing.assert_array_equal(q.dequantize(), ref_out)


def test_ml_dtypes_bf16_input() -> None:
    x = np.random.default_rng(6).standard_normal((4, 64)).astype(ml_dtypes.bfloat16)
    q = quantize(x, "int4:g32")
    assert q.dtype == "bfloat16"
    np.testing.assert_array_equal(q.dequantize(), quantize(x.astype(np.float32), "int4:g32").dequantize())
