"""json_object: an object passes through; anything else is one line saying what and where."""

from __future__ import annotations

import pytest

from precisionlab.json_input import json_object


def test_an_object_is_returned_as_parsed() -> None:
    assert json_object('{"a": [1, 2.5], "b": null}') == {"a": [1, 2.5], "b": None}


def test_bad_json_names_the_line_and_column() -> None:
    with pytest.raises(ValueError, match=r"^invalid JSON \(Expecting value at line 1 column 7\)$"):
        json_object('{"a": }')  # the seventh character, '}', is where a value was expected
    with pytest.raises(ValueError, match=r"at line 2 column 1\)$"):
        json_object('{"a": 1,\n}')


@pytest.mark.parametrize(("text", "kind"), [("[1, 2]", "list"), ('"x"', "str"), ("3", "int"), ("null", "NoneType")])
def test_a_value_that_is_not_an_object_is_refused(text: str, kind: str) -> None:
    with pytest.raises(ValueError, match=rf"^expected a JSON object, got {kind}$"):
        json_object(text)
