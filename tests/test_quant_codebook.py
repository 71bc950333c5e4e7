"""NF4 codebook: values from normal quantiles against the published table; nearest-value encoding."""

from __future__ import annotations

import numpy as np

from precisionlab.formats.codebook import NF4

# Published NF4 table (QLoRA, Dettmers et al. 2023, appendix E; bitsandbytes' float32 constants).
PUBLISHED = [
    -1.0, -0.6961928009986877, -0.5250730514526367, -0.39491748809814453, -0.28444138169288635,
    -0.18477343022823334, -0.09105003625154495, 0.0, 0.07958029955625534, 0.16093020141124725,
    0.24611230194568634, 0.33791524171829224, 0.44070982933044434, 0.5626170039176941,
    0.7229568362236023, 1.0,
]


def test_nf4_matches_published_table() -> None:
    # bitsandbytes builds the table with float32 torch.linspace and scipy; ours uses exact
    # linspace and statistics.NormalDist, so the two agree to a few float32 ulps.
    assert len(NF4.values) == 16 and NF4.bits == 4
    np.testing.assert_allclose(NF4.values, PUBLISHED, rtol=0, atol=1e-6)
    assert NF4.values[7] == 0.0 and NF4.values[0] == -1.0 and NF4.values[-1] == 1.0


def test_nf4_encode_picks_nearest() -> None:
    table = np.asarray(NF4.values)
    v = np.linspace(-1.2, 1.2, 2001).astype(np.float32)
    codes = NF4.encode(v)
    distance = np.abs(v[:, None].astype(np.float64) - table[None, :])
    expected = distance.argmin(axis=1)  # argmin takes the first (smaller) value on a tie
    np.testing.assert_array_equal(codes, expected)
    np.testing.assert_array_equal(NF4.decode(codes), table[codes].astype(np.float32))
