"""Position buckets: a scored token's index in the window the model saw (the prefix token is 0, so the first
token of a document is 1 and has one token of context). Edges grow fourfold from 128:

    p0_127, p128_511, p512_2047, p2048_8191, p8192_32767, ...

so a long-context degradation shows as a curve over the buckets."""

from __future__ import annotations

import numpy as np

FIRST_EDGE = 128
GROWTH = 4


def position_edges(max_position: int) -> list[int]:
    """Bucket starts 0, 128, 512, ... up to the bucket holding max_position."""
    edges = [0, FIRST_EDGE]
    while edges[-1] <= max_position:
        edges.append(edges[-1] * GROWTH)
    return edges[:-1]


def position_names(edges: list[int]) -> list[str]:
    return [f"p{start}_{(edges[k + 1] if k + 1 < len(edges) else start * GROWTH if start else FIRST_EDGE) - 1}"
            for k, start in enumerate(edges)]


def position_index(positions: np.ndarray) -> tuple[np.ndarray, list[str]]:
    """Bucket index of each token and the buckets' names."""
    positions = np.asarray(positions, dtype=np.int64)
    if positions.size and positions.min() < 0:
        raise ValueError("positions must be non-negative")
    edges = position_edges(int(positions.max()) if positions.size else 0)
    return np.searchsorted(np.asarray(edges), positions, side="right") - 1, position_names(edges)
