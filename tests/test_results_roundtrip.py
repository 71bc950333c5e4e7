"""LabResult.from_dict reads back what to_dict writes: every registered lab at its quick settings and the
ptq / ladder results built from fabricated runs give the same dict again, the same HTML page and the same
PNG figures; a hand-built result (every field away from its default, non-finite values) comes back field
by field; a dict that is not a lab result is a one-line ValueError naming the problem."""

from __future__ import annotations

import functools
import json
import math
from pathlib import Path
from typing import Any

import pytest

from precisionlab.labs import all_labs, get_lab
from precisionlab.report.html import render_html
from precisionlab.results import Figure, LabResult, Series, Skipped, Table
from tests.saved_results import fabricated_ladder, fabricated_ptq

FAST_LABS = [lab.name for lab in all_labs() if lab.name != "eval"]
"""Every registered lab but eval (53 s at its quick size on SmolLM2 and MiniLM: its test is marked slow; a
MiniLM-only run of the same lab stands in for it in the quick suite)."""


@functools.cache
def lab_result(name: str) -> LabResult:
    lab = get_lab(name)
    return lab.run(**lab.quick)


def through_json(result: LabResult) -> LabResult:
    """to_dict, strict JSON text, from_dict: what a saved file gives back."""
    return LabResult.from_dict(json.loads(json.dumps(result.to_dict(), allow_nan=False)))


def assert_round_trip(result: LabResult, tmp_path: Path) -> None:
    back = through_json(result)
    assert back.to_dict() == result.to_dict()
    assert render_html([back]) == render_html([result])
    from precisionlab.report.plots import draw_figure

    assert [f.key for f in back.figures] == [f.key for f in result.figures]
    for original, read in zip(result.figures, back.figures, strict=True):
        first = draw_figure(original, tmp_path / f"a_{original.key}.png")
        second = draw_figure(read, tmp_path / f"b_{read.key}.png")
        assert (second.size, second.notes) == (first.size, first.notes)
        assert (tmp_path / f"b_{read.key}.png").read_bytes() == (tmp_path / f"a_{original.key}.png").read_bytes()


@pytest.mark.parametrize("name", FAST_LABS)
def test_every_lab_round_trips(name: str, tmp_path: Path) -> None:
    assert_round_trip(lab_result(name), tmp_path)


def test_the_eval_lab_on_minilm_round_trips(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from tests.model_helpers import require_packaged, require_peers

    require_peers()
    require_packaged("minilm-l6")
    monkeypatch.setenv("PRECISIONLAB_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr("precisionlab.models.packaged.installed_packaged", lambda: ["minilm-l6"])
    from precisionlab.labs import eval as eval_lab

    result = eval_lab.lab_run(size=0.1)
    assert result.figures and any(t.formats for t in result.sections)
    assert_round_trip(result, tmp_path)


def test_the_eval_lab_skipped_round_trips(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from precisionlab.labs import eval as eval_lab

    real = eval_lab.optional_import
    monkeypatch.setattr(eval_lab, "optional_import", lambda name: None if name == "torch" else real(name))
    result = eval_lab.lab_run()
    assert result.skipped and result.skipped[0].key == "eval"  # a skip tied to a table round-trips below
    assert_round_trip(result, tmp_path)
    assert through_json(result).skipped == result.skipped


@pytest.mark.slow
def test_the_eval_lab_at_its_quick_size_round_trips(tmp_path: Path) -> None:
    from tests.model_helpers import require_peers

    require_peers("gguf", "accelerate")
    assert_round_trip(lab_result("eval"), tmp_path)


def test_a_fabricated_ladder_round_trips(tmp_path: Path) -> None:
    lab = fabricated_ladder()
    assert lab.section("steps").formats and lab.figures[0].hlines and lab.figures[0].series[0].style == "interval"
    assert_round_trip(lab, tmp_path)


def test_a_ladder_on_a_symmetric_log_scale_with_two_tasks_round_trips(tmp_path: Path) -> None:
    lab = fabricated_ladder(spread=1000.0, tasks=("ppl", "choice"))
    assert lab.figures[0].yscale == "symlog" and [t.key for t in lab.sections] == ["steps", "tasks"]
    assert through_json(lab).figures[0].yscale == "symlog"
    assert_round_trip(lab, tmp_path)


@pytest.mark.parametrize("held_out", [False, True])
def test_a_fabricated_ptq_result_round_trips(held_out: bool, tmp_path: Path) -> None:
    lab = fabricated_ptq(held_out)
    ratios = lab.section("layers").column("ratio")  # 0.5 over an RTN error of 0: inf; a failed layer: None
    assert ratios[1] == math.inf and ratios[2] is None
    assert through_json(lab).section("layers").column("ratio")[1:] == [math.inf, None]
    assert_round_trip(lab, tmp_path)


def hand_built() -> LabResult:
    """Every field away from its default; the values to_dict cannot write as JSON numbers included."""
    table = Table(key="t", title="A table", columns=["name", "value", "flag", "empty"],
                  rows=[["a", 1.5, True, None], ["b", math.inf, False, None], ["c", -math.inf, True, 7],
                        ["d", math.nan, False, "text"]],
                  note="a note", formats={"value": ".3e"})
    figure = Figure(key="f", title="A figure", xlabel="x", ylabel="y",
                    series=[Series("one", [1, 2, 3], [1.0, math.nan, math.inf], kind="scatter", style="--"),
                            Series("two", [1.0], [2.0], kind="bar")],
                    xscale="log", yscale="symlog", hlines=[(0.5, "half"), (-math.inf, "floor")], vlines=[(2, "two")],
                    note="a figure note")
    result = LabResult(name="hand", title="Hand built", sections=[table], figures=[figure],
                       findings={"hand.max": math.inf, "hand.n": 3, "hand.ok": True, "hand.none": None},
                       params={"size": 0.5, "name": "x"}, summary="A summary. Second sentence.")
    result.skip("peer", "the peer part", "peer is not installed", "pip install peer", section="t")
    result.skip("other", "another part", "other is not installed", "pip install other")
    return result


def same(a: Any, b: Any) -> bool:
    """Equal, with nan equal to nan (as a float of the same sign)."""
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a):
        return math.isnan(b)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    return type(a) is type(b) and a == b


def test_a_hand_built_result_comes_back_field_by_field(tmp_path: Path) -> None:
    original, back = hand_built(), through_json(hand_built())
    assert (back.name, back.title, back.summary) == ("hand", "Hand built", "A summary. Second sentence.")
    t, b = original.sections[0], back.sections[0]
    assert (b.key, b.title, b.columns, b.note, b.formats) == (t.key, t.title, t.columns, t.note, {"value": ".3e"})
    assert same(b.rows, t.rows)
    g = back.figures[0]
    assert (g.key, g.title, g.xlabel, g.ylabel, g.xscale, g.yscale, g.note) == (
        "f", "A figure", "x", "y", "log", "symlog", "a figure note")
    assert same(g.hlines, [(0.5, "half"), (-math.inf, "floor")]) and g.vlines == [(2, "two")]
    assert all(isinstance(line, tuple) for line in g.hlines + g.vlines)
    assert [(s.label, s.kind, s.style) for s in g.series] == [("one", "scatter", "--"), ("two", "bar", "")]
    assert same([list(s.x) for s in g.series], [[1, 2, 3], [1.0]])
    assert same([list(s.y) for s in g.series], [[1.0, math.nan, math.inf], [2.0]])
    assert same(back.findings, original.findings) and back.params == {"size": 0.5, "name": "x"}
    assert back.skipped == [Skipped("peer", "the peer part", "peer is not installed", "pip install peer", "t"),
                            Skipped("other", "another part", "other is not installed", "pip install other", None)]
    assert_round_trip(original, tmp_path)


def test_a_file_written_before_formats_kinds_and_scales_reads_with_the_defaults() -> None:
    """Older JSON has no formats, kind, style, xscale, yscale, hlines or vlines: defaults, not an error."""
    data = {"lab": "old", "title": "Old", "summary": "", "params": {}, "findings": {"old.x": "nan"}, "skipped": [],
            "sections": [{"key": "t", "title": "T", "note": "", "columns": ["a"], "rows": [["inf"]]}],
            "figures": [{"key": "f", "title": "F", "xlabel": "x", "ylabel": "y", "note": "",
                         "series": [{"label": "s", "x": [1], "y": ["-inf"]}]}],
            "provenance": {"version": "0"}}
    result = LabResult.from_dict(data)
    assert result.sections[0].formats == {} and result.sections[0].rows == [[math.inf]]
    fig = result.figures[0]
    assert (fig.xscale, fig.yscale, fig.hlines, fig.vlines) == ("linear", "linear", [], [])
    assert (fig.series[0].kind, fig.series[0].style, list(fig.series[0].y)) == ("line", "", [-math.inf])
    assert math.isnan(result.findings["old.x"])  # type: ignore[arg-type]


def _good() -> dict[str, Any]:
    return hand_built().to_dict()


def _edit(path: str, value: Any) -> dict[str, Any]:
    """The good dict with one value replaced (path: keys and list indices separated by '/'), or deleted
    when value is DELETE."""
    data = _good()
    *parents, last = path.split("/")
    node: Any = data
    for part in parents:
        node = node[int(part)] if isinstance(node, list) else node[part]
    key: Any = int(last) if isinstance(node, list) else last
    if value is DELETE:
        del node[key]
    else:
        node[key] = value
    return data


DELETE = object()


@pytest.mark.parametrize("data, message", [
    ([1, 2], "not a lab result: the lab result is a list, expected an object"),
    ("text", "not a lab result: the lab result is a string, expected an object"),
    ({}, "not a lab result: the lab result has no 'lab', 'title'"),
    ({"provenance": {}, "labs": []}, "a report's results.json (several labs), not one lab's result"),
    (_edit("lab", DELETE), "not a lab result: the lab result has no 'lab'"),
    (_edit("lab", 3), "not a lab result: lab is a number, expected a string"),
    (_edit("lab", "../elsewhere"), "not a lab result: lab '../elsewhere' is not a name"),
    (_edit("findings", []), "not a lab result: findings is a list, expected an object"),
    (_edit("params", "x"), "not a lab result: params is a string, expected an object"),
    (_edit("sections", {}), "not a lab result: sections is an object, expected a list"),
    (_edit("sections/0/columns", DELETE), "not a lab result: sections[0] has no 'columns'"),
    (_edit("sections/0/rows/1", [1]), "not a lab result: sections[0].rows[1] has 1 cells for 4 columns"),
    (_edit("sections/0/rows/1", "row"), "not a lab result: sections[0].rows[1] is a string, expected a list"),
    (_edit("sections/0/key", "a/b"), "not a lab result: sections[0].key 'a/b' is not a name"),
    (_edit("sections/0/formats", {"value": 3}),
     "not a lab result: sections[0].formats['value'] is a number, expected a string"),
    (_edit("figures/0/series/0/kind", "pie"), "not a lab result: figures[0].series[0].kind is 'pie'; expected one of"),
    (_edit("figures/0/series/0/x", [1, 2]), "not a lab result: figures[0].series[0] has 2 x values for 3 y values"),
    (_edit("figures/0/series/0/y/0", "high"),
     "not a lab result: figures[0].series[0].y[0] is a string, expected a number"),
    (_edit("figures/0/series/0/y/0", None), "not a lab result: figures[0].series[0].y[0] is null, expected a number"),
    (_edit("figures/0/yscale", "cubic"), "not a lab result: figures[0].yscale is 'cubic'; expected one of"),
    (_edit("figures/0/hlines/0", [1]), "not a lab result: figures[0].hlines[0] is not a [value, label] pair"),
    (_edit("figures/0/vlines/0", ["x", "label"]),
     "not a lab result: figures[0].vlines[0] is not a [value, label] pair"),
    (_edit("skipped/0/reason", DELETE), "not a lab result: skipped[0] has no 'reason'"),
    (_edit("skipped/1/section", 5), "not a lab result: skipped[1].section is a number, expected a string"),
])
def test_what_is_not_a_lab_result_is_one_line_naming_the_problem(data: Any, message: str) -> None:
    with pytest.raises(ValueError) as caught:
        LabResult.from_dict(data)
    text = str(caught.value)
    assert text.startswith(message), text
    assert "\n" not in text


def test_the_good_dict_the_bad_cases_edit_is_a_lab_result() -> None:
    """The cases above fail for their one edit, not for something else in the dict."""
    assert LabResult.from_dict(_good()).name == "hand"
