"""Every ```python example in the README and docs/ runs as written (in a scratch directory), and every
value written in a comment after an expression (`fmt.bits  # 8`, `x = f()  # 26`) is that expression's value.

An example that drifts from the API, or a number in a comment that drifts from what the code returns, fails
here rather than in a user's hands. A comment counts as values when it (or its part before two spaces, " (",
" = ", or one trailing unit word such as "tokens" or "GB") is a Python literal: numbers, True / False, tuples,
and arithmetic on numbers such as 2**-7. A number written with d decimals matches a value that rounds to it
at d decimals (115.4 for 115.3846...); any other number must be equal exactly. Prose comments are left alone.
"""

from __future__ import annotations

import ast
import io
import math
import re
import tokenize
from pathlib import Path
from typing import Any

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
BLOCK = re.compile(r"```python\n(.*?)```", re.S)
EXAMPLES = [(doc, index, match.group(1)) for doc in DOCUMENTS
            for index, match in enumerate(BLOCK.finditer(doc.read_text(encoding="utf-8")))]
ALLOWED = (ast.Expression, ast.Constant, ast.Tuple, ast.UnaryOp, ast.BinOp, ast.USub, ast.UAdd, ast.Pow, ast.Mult,
           ast.Div, ast.Add, ast.Sub, ast.Load)
CUTS = ("  ", " (", " = ")


def comment_values(comment: str) -> ast.Expression | None:
    """The literal a comment states (see the module docstring), as a parsed expression; None for prose."""
    text = comment.strip()
    candidates = [text]
    for cut in CUTS:
        if cut in text:
            candidates.append(text.split(cut, 1)[0])
    candidates += [c.rsplit(" ", 1)[0] for c in list(candidates) if " " in c]  # one trailing unit word
    for candidate in candidates:
        try:
            tree = ast.parse(candidate.strip(), mode="eval")
        except SyntaxError:
            continue
        if all(isinstance(node, ALLOWED) for node in ast.walk(tree)) and not (
                isinstance(tree.body, ast.Constant) and isinstance(tree.body.value, str)):
            return tree
    return None


def matches(actual: Any, node: ast.expr, source: str) -> bool:
    """actual equals the literal `node` (source text `source`), digit by digit as written."""
    if isinstance(node, ast.Tuple):
        if isinstance(actual, np.ndarray):
            actual = actual.tolist()
        return (isinstance(actual, tuple | list) and len(actual) == len(node.elts)
                and all(matches(a, n, source) for a, n in zip(actual, node.elts, strict=True)))
    expected = eval(compile(ast.Expression(node), "<comment>", "eval"), {"__builtins__": {}})
    if isinstance(expected, bool):
        return isinstance(actual, bool | np.bool_) and bool(actual) is expected
    if isinstance(expected, str):
        return isinstance(actual, str) and actual == expected
    if isinstance(actual, bool | np.bool_) or not isinstance(actual, int | float | np.number | np.ndarray):
        return False
    value = float(np.asarray(actual).reshape(()))
    if value == expected:
        return True
    written = ast.get_source_segment(source, node) or ""
    if isinstance(node, ast.Constant) and isinstance(node.value, float) and re.fullmatch(r"-?\d+\.\d+", written):
        decimals = len(written.split(".")[1])
        return math.isfinite(value) and round(value, decimals) == expected
    return False


def _comments(code: str) -> dict[int, str]:
    """Line number -> the text of the comment that ends that line."""
    found = {}
    for token in tokenize.generate_tokens(io.StringIO(code).readline):
        if token.type == tokenize.COMMENT:
            found[token.start[0]] = token.string[1:]
    return found


def run_and_check(code: str, name: str) -> int:
    """Run `code` statement by statement; check each commented value. Returns how many were checked."""
    namespace: dict[str, Any] = {"__name__": "__docs__"}
    comments = _comments(code)
    checked = 0
    for statement in ast.parse(code).body:
        comment = comments.get(statement.end_lineno or statement.lineno)
        tree = comment_values(comment) if comment is not None else None
        if tree is not None and isinstance(statement, ast.Expr):  # evaluated once, for its value
            actual = eval(compile(ast.Expression(statement.value), name, "eval"), namespace)
        else:
            exec(compile(ast.Module(body=[statement], type_ignores=[]), name, "exec"), namespace)
            named = isinstance(statement, ast.Assign) and len(statement.targets) == 1 and isinstance(
                statement.targets[0], ast.Name)
            if tree is None or not named:
                continue
            actual = namespace[statement.targets[0].id]  # type: ignore[union-attr]
        assert comment is not None and tree is not None
        assert matches(actual, tree.body, _segment_source(comment, tree)), (
            f"{name}, line {statement.lineno}: the comment says {comment.strip()!r}, the code gives {actual!r}")
        checked += 1
    return checked


def _segment_source(comment: str, tree: ast.Expression) -> str:
    """The text the parsed comment literal came from (for the digits as written)."""
    text = comment.strip()
    for candidate in [text, *(text.split(cut, 1)[0] for cut in CUTS if cut in text)]:
        for option in (candidate, candidate.rsplit(" ", 1)[0]):
            try:
                if ast.dump(ast.parse(option.strip(), mode="eval")) == ast.dump(tree):
                    return option.strip()
            except SyntaxError:
                continue
    return text


def test_the_documents_have_examples() -> None:
    assert {doc.name for doc, _, _ in EXAMPLES} >= {"README.md", "gemm.md", "quant.md", "limits.md"}


@pytest.mark.parametrize(("doc", "index", "code"), EXAMPLES,
                         ids=[f"{doc.name}#{index}" for doc, index, _ in EXAMPLES])
def test_example_runs_and_its_comments_hold(doc: Path, index: int, code: str, tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    run_and_check(code, f"{doc.name} example {index}")


def test_the_value_comments_are_found() -> None:
    # the README's API example states 4 lines of values; capacity, limits and quant state theirs: if the parser
    # stopped recognising them, every check above would pass vacuously
    expected = {"README.md#0": 4, "capacity.md#0": 5, "quant.md#0": 1, "limits.md#0": 3}
    for key, count in expected.items():
        doc, index = key.split("#")
        code = next(c for d, i, c in EXAMPLES if d.name == doc and i == int(index))
        assert sum(comment_values(c) is not None for c in _comments(code).values()) >= count, key


@pytest.mark.parametrize(("code", "passes"), [
    ("1 + 1  # 2", True),
    ("1 + 1  # 3", False),
    ("x = 0.5  # 0.6", False),
    ("x = 26  # 26 tokens", True),
    ("(2.0**-7, 0.25)  # 2**-7, 0.25", True),
    ("(2.0**-7, 0.25)  # 2**-7, 0.26", False),
    ("115.38461538  # 115.4", True),
    ("115.38461538  # 115.3", False),
    ("(True, 1)  # True, True", False),
    ("float('nan')  # 0.0", False),
    ("'text'  # every addition rounded once (prose)", True),
    ("3  # 3 = the count", True),
])
def test_the_comment_checker_can_fail(code: str, passes: bool) -> None:
    if passes:
        run_and_check(code, "snippet")
    else:
        with pytest.raises(AssertionError, match="the comment says"):
            run_and_check(code, "snippet")
