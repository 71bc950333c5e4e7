"""StoredTensor: what a quantized tensor holds, as far as reading its values back needs it.

`quant.tensor.QuantizedTensor` is the record that holds these fields (and the byte accounting);
`quant.dequant.dequantize` reads them through this protocol, so the reader needs only this module
and the record can call the reader without an import circle between the two.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np

from precisionlab.quant.blocks import Layout
from precisionlab.quant.scheme import Scheme


class StoredTensor(Protocol):
    """The stored parts of a quantized tensor (see `quant.tensor.QuantizedTensor` for each field)."""

    scheme: Scheme
    shape: tuple[int, ...]
    packed: np.ndarray
    zero_points: np.ndarray | None
    outlier_rows: np.ndarray | None
    outlier_index: np.ndarray | None
    min_values: np.ndarray | None

    @property
    def layout(self) -> Layout:
        """The payload's layout (outlier rows removed)."""
        ...

    def divisors(self) -> np.ndarray:
        """Per-block multiplier of the code values (float32, the shape of the scales)."""
        ...
