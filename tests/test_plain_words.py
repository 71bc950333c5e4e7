"""The product speaks in domain words: no course words (lab or exercise numbers, "the seed") in the
source, the docs or the README. The source material is cited by its title where a number comes from it."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FILES = sorted([*(ROOT / "src").rglob("*.py"), *(ROOT / "docs").glob("*.md"), ROOT / "README.md"])
COURSE_WORDS = re.compile(r"\bLab \d|\bExercise \d|\bthe seed\b|\bseed's\b|\bseeds/\d|\bseed (module|chapter)\b",
                          re.IGNORECASE)


@pytest.mark.parametrize("path", FILES, ids=[str(p.relative_to(ROOT)) for p in FILES])
def test_no_course_words(path: Path) -> None:
    hits = [f"{path.name}:{number}: {line.strip()}" for number, line in
            enumerate(path.read_text(encoding="utf-8").splitlines(), 1) if COURSE_WORDS.search(line)]
    assert hits == []


def test_the_lab_titles_say_what_they_are() -> None:
    from precisionlab.labs import get_lab

    for name in ("quant_demo", "quant_drill"):
        lab = get_lab(name)
        result = lab.run(**lab.quick)
        for text in (result.title, *(t.title for t in result.sections), *(t.note for t in result.sections)):
            assert not COURSE_WORDS.search(text), text
