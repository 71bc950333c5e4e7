"""Every ```python example in the README and docs/ runs as written (in a scratch directory).

An example that drifts from the API fails here rather than in a user's hands.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
BLOCK = re.compile(r"```python\n(.*?)```", re.S)
EXAMPLES = [(doc, index, match.group(1)) for doc in DOCUMENTS
            for index, match in enumerate(BLOCK.finditer(doc.read_text(encoding="utf-8")))]


def test_the_documents_have_examples() -> None:
    assert {doc.name for doc, _, _ in EXAMPLES} >= {"README.md", "gemm.md", "quant.md", "limits.md"}


@pytest.mark.parametrize(("doc", "index", "code"), EXAMPLES,
                         ids=[f"{doc.name}#{index}" for doc, index, _ in EXAMPLES])
def test_example_runs(doc: Path, index: int, code: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    exec(compile(code, f"{doc.name} example {index}", "exec"), {"__name__": "__docs__"})
