"""The result model and its renderers: strict JSON, validation, CSV, HTML escaping."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from precisionlab.report.outputs import dumps, render_html, table_csv
from precisionlab.results import Figure, LabResult, Series, Table, jsonable


def test_json_is_strict_with_non_finite_as_strings() -> None:
    result = LabResult("demo", "Demo", sections=[Table("t", "T", ["a", "b"], [[math.inf, np.float32(1.5)],
                                                                            [-math.inf, math.nan]])],
                       findings={"x.fp16": math.nan, "n": np.int64(3), "ok": True})
    text = dumps(result.to_dict())
    data = json.loads(text)
    assert data["sections"][0]["rows"] == [["inf", 1.5], ["-inf", "nan"]]
    assert data["findings"] == {"x.fp16": "nan", "n": 3, "ok": True}
    with pytest.raises(ValueError):
        json.dumps({"x": math.nan}, allow_nan=False)  # what dumps() would refuse without jsonable


def test_jsonable_handles_numpy_arrays() -> None:
    assert jsonable({"a": np.array([1.0, np.inf])}) == {"a": [1.0, "inf"]}


def test_table_rejects_ragged_rows() -> None:
    with pytest.raises(ValueError, match="2 cells for 3 columns"):
        Table("t", "T", ["a", "b", "c"], [[1, 2]])


def test_csv_and_html() -> None:
    table = Table("t", "T <x>", ["name", "v"], [["a&b", math.nan], ["c", None]])
    assert table_csv(table) == "name,v\na&b,nan\nc,\n"
    page = render_html([LabResult("lab", "Lab", sections=[table],
                                  figures=[Figure("f", "F", "x", "y", [Series("s", [1], [2])])])])
    assert "T &lt;x&gt;" in page and "a&amp;b" in page and "lab_f.png" in page


def test_terminal_prints_brackets_literally() -> None:
    import io

    from rich.console import Console

    from precisionlab.report.terminal import render

    buffer = io.StringIO()
    result = LabResult("lab", "Lab [x]", sections=[Table("t", "T", ["name", "v"], [["[bold]a[/bold]", 1.0]],
                                                         note="see [1]")], findings={"k[0]": "[v]"})
    render(result, Console(file=buffer, width=200))
    text = buffer.getvalue()
    assert "[bold]a[/bold]" in text and "see [1]" in text and "k[0]" in text and "Lab [x]" in text


def test_written_files_get_the_usual_permissions(tmp_path) -> None:  # type: ignore[no-untyped-def]
    import os
    import stat

    from precisionlab._atomic import atomic_write_text

    path = atomic_write_text(tmp_path / "r.json", "{}")
    umask = os.umask(0)
    os.umask(umask)
    assert stat.S_IMODE(path.stat().st_mode) == 0o666 & ~umask


def test_every_series_of_a_crowded_figure_has_its_own_colour_and_marker() -> None:
    from precisionlab.report.plots import COLOURS, MARKERS, series_style

    styles = [series_style(i) for i in range(COLOURS * len(MARKERS))]
    assert len(set(styles)) == len(styles)


def _boxes(anchors, sizes, offsets):  # type: ignore[no-untyped-def]
    return [(ax + dx, ay + dy, ax + dx + w, ay + dy + h)
            for (ax, ay), (w, h), (dx, dy) in zip(anchors, sizes, offsets, strict=True)]


def test_point_labels_do_not_overlap_and_stay_inside_the_axes() -> None:
    from precisionlab.report.plots import place_labels

    # Six labels on two coincident points and a close third, as on a roofline.
    anchors = [(100.0, 100.0)] * 3 + [(102.0, 101.0)] * 2 + [(400.0, 100.0)]
    sizes = [(120.0, 8.4)] * 6
    bounds = (0.0, 0.0, 500.0, 300.0)
    boxes = _boxes(anchors, sizes, place_labels(anchors, sizes, bounds))
    for i, a in enumerate(boxes):
        assert bounds[0] <= a[0] and a[2] <= bounds[2] and bounds[1] <= a[1] and a[3] <= bounds[3]
        for b in boxes[i + 1:]:
            assert not (a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3]), (a, b)
    # The point near the right edge gets its label on its left.
    assert boxes[-1][2] <= 400.0


def test_a_crowded_figure_is_drawn(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from precisionlab.report.plots import save_figure

    series = [Series(f"point {i}", [1.0 + i % 3], [2.0], kind="scatter") for i in range(14)]
    series.append(Series("line", [1.0, 2.0, 3.0], [1.0, float("nan"), 3.0]))
    path = save_figure(Figure("crowded", "t", "x", "y", series, yscale="log"), tmp_path / "crowded.png")
    assert path.stat().st_size > 0 and path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_lab_result_add_assembles_parts_in_order_and_refuses_a_claimed_key() -> None:
    from precisionlab.results import Part

    first = Table("a", "A", ["x"], [[1]])
    second = Table("b", "B", ["x"], [[2]])
    result = LabResult(name="lab", title="Lab")
    result.add(Part([first], findings={"a.one": 1, "a.two": 2}))
    result.add(Part([second], findings={"b.one": 3}))
    assert [t.key for t in result.sections] == ["a", "b"]
    assert list(result.findings) == ["a.one", "a.two", "b.one"]
    with pytest.raises(ValueError, match=r"a\.two"):
        result.add(Part(findings={"a.two": 5}))
    assert result.findings["a.two"] == 2
