"""The units of a user text file are resampled in blocks of consecutive units, not one by one.

Consecutive chunks of one text share its subject and style, so their perplexity effects are correlated; a
bootstrap that draws them one by one treats them as independent and is too narrow. The rule (non-overlapping
blocks of about n^(1/3) consecutive units, data.text_blocks) is checked by hand for its sizes and, by simulation,
for what it is for: with effects that follow a slowly varying level along the text, resampling units covers the
true mean far less often than 95 %, resampling the file's blocks much closer to it.
"""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import pytest

from precisionlab.eval import data, stats


@pytest.mark.parametrize(("n", "length"), [(1, 1), (2, 1), (3, 1), (7, 2), (8, 2), (9, 3), (27, 3), (28, 4),
                                           (64, 4), (65, 5), (400, 8)])
def test_block_length_is_the_smallest_cube_root_at_most_half(n: int, length: int) -> None:
    assert data.block_length(n) == length


def test_blocks_are_consecutive_and_cover_every_unit() -> None:
    for n in (1, 2, 5, 10, 40, 41, 101):
        blocks = data.text_blocks(n)
        assert len(blocks) == n
        assert blocks[0][0] == 0 and blocks[-1][1] == n - 1
        for k, (first, last) in enumerate(blocks):
            assert first <= k <= last                           # each unit lies in its own block
        distinct = sorted(set(blocks))
        assert all(b[0] == a[1] + 1 for a, b in itertools.pairwise(distinct))  # consecutive, no gap
        assert n < 2 or len(distinct) >= 2                      # always something to resample
    assert sorted(set(data.text_blocks(40))) == [(4 * j, 4 * j + 3) for j in range(10)]


def test_a_text_file_of_forty_units_gives_ten_groups_of_four(tmp_path: Path) -> None:
    file = tmp_path / "book.txt"
    file.write_text("\n\n".join(f"Paragraph {k}: " + "word " * 250 for k in range(40)), encoding="utf-8")
    units = data.load_text_file(file)
    assert len(units) == 40
    groups = data.unit_groups(units)
    assert groups[:5] == [("book#0-3", "")] * 4 + [("book#4-7", "")]
    assert len(set(groups)) == 10
    jsonl = tmp_path / "lines.jsonl"
    jsonl.write_text("\n".join(f'{{"text": "line {k}"}}' for k in range(4)) + "\n", encoding="utf-8")
    assert len(set(data.unit_groups(data.load_task_file(jsonl)[1]))) == 4   # JSONL lines stay independent


def test_blocks_restore_coverage_of_correlated_consecutive_units() -> None:
    """Effects of 40 consecutive units: a stationary AR(1) level along the text (correlation 0.6 between
    neighbours, mean 0) plus independent noise of the same variance, so the true mean is 0 by construction. Each
    method's 95 % interval is judged by how often it contains 0 over 400 texts (binomial sd about 1.5 %)."""
    rng = np.random.default_rng(5)
    n, texts, phi = 40, 400, 0.6
    groups = [f"b{first}" for first, _ in data.text_blocks(n)]
    hits = {"units": 0, "blocks": 0}
    for i in range(texts):
        level = np.empty(n)
        level[0] = rng.normal(0, 1)
        for k in range(1, n):
            level[k] = phi * level[k - 1] + rng.normal(0, np.sqrt(1 - phi**2))  # stationary: variance 1
        effects = level + rng.normal(0, 1, n)
        for name, labels in (("units", None), ("blocks", groups)):
            hits[name] += stats.paired_bootstrap_mean(np.zeros(n), effects, 500, seed=i, groups=labels).contains(0.0)
    units, blocks = hits["units"] / texts, hits["blocks"] / texts
    # measured: units 77 %, blocks 88 % (blocks of 4 still miss part of a correlation that reaches further)
    assert units < 0.82, units                 # units drawn one by one: far too narrow
    assert blocks > units + 0.07, (units, blocks)
    assert blocks > 0.85, blocks
