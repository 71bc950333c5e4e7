"""Scheme grammar: parsing, canonical strings, round trips, and clear errors."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from precisionlab.quant import Granularity, MXRule, parse_scheme
from precisionlab.quant.scheme import ELEMENTS, PRESETS

EXAMPLES = {
    "int8": (Granularity.TENSOR, 0, 1, True, "fp16"),
    "int8:row": (Granularity.ROW, 0, 1, True, "fp16"),
    "int8:col": (Granularity.COL, 0, 1, True, "fp16"),
    "int4:g128": (Granularity.GROUP, 128, 1, True, "fp16"),
    "e4m3:block128x128": (Granularity.BLOCK, 128, 128, True, "fp32"),
    "e4m3:tile1x128": (Granularity.TILE, 128, 1, True, "fp32"),
    "int8:row:asym": (Granularity.ROW, 0, 1, False, "fp16"),
    "int8:row:scale=fp32": (Granularity.ROW, 0, 1, True, "fp32"),
}


@pytest.mark.parametrize("text", sorted(EXAMPLES))
def test_examples_parse(text: str) -> None:
    s = parse_scheme(text)
    assert (s.granularity, s.group, s.block_rows, s.symmetric, s.scale) == EXAMPLES[text]
    assert str(s) == text


def test_presets() -> None:
    assert parse_scheme("mxfp8").element == "e4m3"
    assert parse_scheme("mxfp8_e5m2").element == "e5m2"
    assert parse_scheme("mxfp4:rceil").mx is MXRule.RCEIL
    assert str(parse_scheme("mxfp4:rceil")) == "mxfp4:rceil"
    assert str(parse_scheme("mxfp4:floor")) == "mxfp4"
    nv = parse_scheme("nvfp4")
    assert (nv.element, nv.group, nv.scale, nv.tensor_scale) == ("e2m1", 16, "e4m3", True)
    assert parse_scheme("dsv3_weight") == parse_scheme("dsv3_weight:nonfinite=error")
    w = parse_scheme("dsv3_weight")
    assert (w.granularity, w.block_rows, w.group, w.scale) == (Granularity.BLOCK, 128, 128, "fp32")
    outlier = parse_scheme("int8:row:outliers=1")
    assert outlier.outliers == 1 and str(outlier) == "int8:row:outliers=1"


def test_defaults_are_dropped_and_order_is_canonical() -> None:
    assert str(parse_scheme("int8:tensor:sym:scale=fp16")) == "int8"
    assert str(parse_scheme("INT4:g32:axis=0:asym")) == "int4:g32:asym:axis=0"
    assert str(parse_scheme("uint8:row")) == "uint8:row"


def _schemes() -> st.SearchStrategy[str]:
    gran = st.sampled_from(["", ":row", ":col", ":g16", ":g128", ":block4x8", ":tile1x32"])
    scale = st.sampled_from(["", ":scale=fp32", ":scale=bf16", ":scale=e4m3", ":scale=ue8m0", ":scale=ue8m0:rceil"])
    extras = st.sampled_from(["", ":outliers=2", ":axis=0", ":nonfinite=nan"])
    ints = st.builds(lambda e, g, a, s, x: f"{e}{g}{a}{s}{x}", st.sampled_from(["int8", "int4", "int2"]), gran,
                     st.sampled_from(["", ":asym"]), scale, extras)
    floats = st.builds(lambda e, g, s: f"{e}{g}{s}", st.sampled_from(["e4m3", "e5m2", "e2m1", "nf4", "e3m2"]),
                       gran, scale)
    presets = st.builds(lambda p, o: f"{p}{o}", st.sampled_from(sorted(PRESETS)),
                        st.sampled_from(["", ":axis=0", ":nonfinite=error"]))
    return st.one_of(ints, floats, presets)


@given(_schemes())
def test_round_trip(text: str) -> None:
    try:
        s = parse_scheme(text)
    except ValueError:  # e.g. outliers with 2-D blocks: a documented refusal
        return
    assert parse_scheme(str(s)) == s
    assert str(parse_scheme(str(s))) == str(s)


@pytest.mark.parametrize(("text", "fragment"), [
    ("int9", "did you mean int8"),
    ("mxfp5", "did you mean"),
    ("int8:g0", "positive integer"),
    ("int8:row:scale=fp64", "choose one of"),
    ("int8:row:asymm", "did you mean asym"),
    ("int8:rowz", "did you mean row"),
    ("int8:zzz", "granularity"),
    ("e4m3:asym", "integer elements"),
    ("mxfp4:g64", "fixes its element"),
    ("int8:row:g32", "must come right after"),
    ("mxfp4:scale=fp32", "fixes its element"),
    ("int8:rceil", "power-of-two scale rule"),
    ("int8:g32:asym:scale=ue8m0", "no zero point"),
    ("uint8:sym", "unsigned"),
    ("e4m3:tile2x128", "tiles are 1x"),
    ("int8::row", "empty field"),
    ("int8:block128x128:outliers=1", "2-D blocks"),
])
def test_errors_are_clear(text: str, fragment: str) -> None:
    with pytest.raises(ValueError, match=fragment):
        parse_scheme(text)


def test_every_element_parses() -> None:
    for element in ELEMENTS:
        assert parse_scheme(element).element == element


ISSUE_EXAMPLES = ["int8", "int8:row", "int8:col", "int4:g128", "e4m3:block128x128", "e4m3:tile1x128", "int8:row:asym",
                  "int8:row:scale=fp32", "int8:row:outliers=1", "mxfp8", "mxfp4:rceil", "nvfp4", "mxfp8_e5m2", "mxfp6",
                  "mxfp6_e3m2", "mxint8", "dsv3_weight", "dsv3_act"]


@pytest.mark.parametrize("text", ISSUE_EXAMPLES)
def test_issue_examples_round_trip(text: str) -> None:
    s = parse_scheme(text)
    assert str(s) == text and parse_scheme(str(s)) == s
