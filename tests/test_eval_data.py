"""Evaluation data: the built-in calibration/evaluation split, the task sets and user files.

The split is checked against pydoc_data itself (recomputing the documented hash rule with
hashlib, and searching the calibration text for every evaluation passage with plain substring
and word n-gram checks written here), the task sets against the evaluation text they come
from, and user files through their one-line errors.
"""

from __future__ import annotations

import collections
import hashlib
import json
import re
from pathlib import Path

import pytest

from precisionlab.eval import data
from precisionlab.eval.data import ChoiceExample, Document, GenerationExample

# sha256 of the sorted topic names as JSON, the same on Python 3.10.13, 3.11.7, 3.12.1 and 3.13.0
# (79 names). A Python that adds or renames a topic changes it: then re-check the split's notes.
TOPIC_NAMES_SHA256 = "07c187abdd8c"


@pytest.fixture(scope="module")
def split() -> data.Split:
    return data.builtin_split()


@pytest.fixture(scope="module")
def topics() -> dict[str, str]:
    from pydoc_data.topics import topics

    return dict(topics)


def collapse(text: str) -> str:
    return " ".join(text.split())


def word_ngrams(text: str, width: int) -> set[tuple[str, ...]]:
    words = re.findall(r"\w+", text.lower())
    return {tuple(words[i:i + width]) for i in range(len(words) - width + 1)}


# --------------------------------------------------------------------------- the split


def test_topic_names_are_the_ones_the_split_was_checked_on(topics: dict[str, str]) -> None:
    names = json.dumps(sorted(topics)).encode()
    assert hashlib.sha256(names).hexdigest()[:12] == TOPIC_NAMES_SHA256


def test_split_by_the_documented_hash_of_the_topic_name(split: data.Split, topics: dict[str, str]) -> None:
    def calibration(name: str) -> bool:
        digest = hashlib.sha256(("precisionlab-split:" + name).encode()).digest()
        return int.from_bytes(digest[:8], "big") < 2**63

    assert {doc.id for doc in split.calibration} == {name for name in topics if calibration(name)}
    assert {doc.id for doc in split.evaluation} <= {name for name in topics if not calibration(name)}
    assert len(split.calibration) == 38 and "specialnames" in {doc.id for doc in split.calibration}
    for doc in split.calibration:
        assert doc.text == topics[doc.id] and doc.group == doc.id


def test_calibration_and_evaluation_never_share_a_topic(split: data.Split) -> None:
    calibration = {doc.group for doc in split.calibration} | {doc.source for doc in split.calibration}
    evaluation = {doc.group for doc in split.evaluation} | {doc.source for doc in split.evaluation}
    assert not calibration & evaluation


def test_calibration_and_evaluation_share_no_passage(split: data.Split) -> None:
    calibration_text = collapse(" ".join(doc.text for doc in split.calibration))
    calibration_grams = word_ngrams(" ".join(doc.text for doc in split.calibration), 13)
    for doc in split.evaluation:
        for block in re.split(r"\n\s*\n", doc.text):
            if len(collapse(block)) >= 40:
                assert collapse(block) not in calibration_text, (doc.id, block[:60])
        assert not word_ngrams(doc.text, 13) & calibration_grams, doc.id
    data.check_no_overlap(split.calibration, split.evaluation)


def test_evaluation_topics_share_no_passage_with_each_other(split: data.Split) -> None:
    owner: dict[tuple[str, ...], str] = {}
    for doc in split.evaluation:
        for gram in word_ngrams(doc.text, 13):
            assert owner.setdefault(gram, doc.id) == doc.id, (doc.id, owner[gram], gram)


def test_evaluation_keeps_its_own_paragraphs_in_order(split: data.Split, topics: dict[str, str]) -> None:
    for doc in split.evaluation:
        source = topics[doc.id]
        position = 0
        for block in doc.text.split("\n\n"):
            found = source.find(block, position)
            assert found >= 0, (doc.id, block[:60])
            position = found + len(block)
    # the overlap removal is real: "compound" repeats "for", "while", "try", ... in the calibration part
    assert split.removed_paragraphs > 100
    assert sum(len(doc.text) for doc in split.evaluation) > 150_000


def test_the_split_is_deterministic(split: data.Split) -> None:
    data.builtin_split.cache_clear()
    again = data.builtin_split()
    assert again == split and again.fingerprint() == split.fingerprint()


# --------------------------------------------------------------------------- task sets


def evaluation_text(split: data.Split, group: str) -> str:
    return next(doc.text for doc in split.evaluation if doc.group == group)


def test_ppl_documents(split: data.Split) -> None:
    documents = data.ppl_documents(split)
    assert len(documents) == data.DEFAULT_SIZES.ppl_documents == 40
    assert len({doc.id for doc in documents}) == 40
    assert len({doc.group for doc in documents}) >= 25                 # spread over topics
    evaluation_groups = {doc.group for doc in split.evaluation}
    for doc in documents:
        assert doc.group in evaluation_groups
        assert 500 <= len(doc.text) <= 1000
        for block in doc.text.split("\n\n"):
            assert block in evaluation_text(split, doc.group)
    assert data.ppl_documents(split, 20) == documents[:20]             # a larger set extends a smaller one
    data.check_no_overlap(data.calibration_documents(split), documents)


def test_calibration_documents_come_from_the_calibration_part_only(split: data.Split) -> None:
    every = data.calibration_documents(split)
    calibration_groups = {doc.group for doc in split.calibration}
    assert {doc.group for doc in every} <= calibration_groups
    assert data.calibration_documents(split, 8) == every[:8]
    by_chars = data.calibration_documents(split, n_chars=20_000)
    assert sum(len(doc.text) for doc in by_chars) >= 20_000 > sum(len(doc.text) for doc in by_chars[:-1])
    with pytest.raises(ValueError, match="only"):
        data.calibration_documents(split, n_chars=10**8)


def test_choice_examples(split: data.Split) -> None:
    examples = data.choice_examples(split)
    assert len(examples) == 100
    assert collections.Counter(example.gold for example in examples) == {0: 25, 1: 25, 2: 25, 3: 25}
    other_topics = {doc.group: collapse(doc.text) for doc in split.evaluation}
    for example in examples:
        assert len(example.choices) == 4 and len(set(example.choices)) == 4
        assert all(choice.startswith(" ") and not choice.startswith("  ") for choice in example.choices)
        true = example.choices[example.gold]
        own = other_topics[example.group]
        assert example.context + true in own                          # the real continuation
        assert 150 <= len(example.context) <= 260
        for position, choice in enumerate(example.choices):
            if position == example.gold:
                continue
            assert 0.9 * len(true) - 1 <= len(choice) <= 1.15 * len(true)
            assert choice[1:2].islower() == true[1:2].islower()
            sources = [group for group, text in other_topics.items() if choice[1:] in text]
            assert sources and example.group not in sources           # from another topic
            # whole words: the distractor is bounded by spaces (or the text's ends) in its source
            text = other_topics[sources[0]]
            at = text.find(choice[1:])
            assert at == 0 or text[at - 1] == " "
            end = at + len(choice) - 1
            assert end == len(text) or text[end] == " "


def test_choice_examples_are_deterministic_and_seeded(split: data.Split) -> None:
    first = data.choice_examples(split, 40)
    assert data.choice_examples(split, 40) == first
    other = data.choice_examples(split, 40, seed=1)
    assert [e.context for e in other] == [e.context for e in first]
    assert [e.choices for e in other] != [e.choices for e in first]
    assert data.choice_examples(split, 20, n_choices=2)[0].choices[0] != data.choice_examples(split, 20)[0].context


def test_generation_examples(split: data.Split) -> None:
    examples = data.generation_examples(split)
    assert len(examples) == 32 and all(example.answer is None for example in examples)
    for example in examples:
        assert 190 <= len(example.prompt) <= 300
        assert example.prompt in collapse(evaluation_text(split, example.group))


def test_retrieval_pairs(split: data.Split) -> None:
    pairs = data.retrieval_pairs(split)
    assert len(pairs) == 64 and len({pair.passage for pair in pairs}) == 64
    for pair in pairs:
        own = evaluation_text(split, pair.group)
        assert pair.query and pair.passage and max(len(pair.query), len(pair.passage)) <= 533
        assert own.find(pair.query) >= 0 and own.find(pair.passage) > own.find(pair.query)


def test_sizes_scale_and_limits_are_clear(split: data.Split) -> None:
    assert data.task_sizes() == data.DEFAULT_SIZES
    assert data.task_sizes(2).choice_examples == 200 and data.task_sizes(0.01).ppl_documents == 2
    assert len(data.choice_examples(split, data.task_sizes(2).choice_examples)) == 200
    for bad in (0, -1, float("nan"), "2"):
        with pytest.raises(ValueError, match="size"):
            data.task_sizes(bad)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="only"):
        data.ppl_documents(split, 100_000)
    with pytest.raises(ValueError, match="positive"):
        data.ppl_documents(split, 0)


def test_fingerprint_and_groups() -> None:
    a = [Document("a", "x"), Document("b", "y", group="t")]
    assert data.fingerprint(a) == data.fingerprint(list(a))
    assert data.fingerprint(a) != data.fingerprint([Document("a", "x "), a[1]])
    assert data.unit_groups(a) == [("", "a"), ("t", "")]


# --------------------------------------------------------------------------- chunking rule


def test_chunk_text_merges_paragraphs_and_cuts_long_ones() -> None:
    text = "\n\n".join(["a" * 30, "b" * 30, "c" * 30, "d" * 5])
    assert data.chunk_text(text, 70) == ["a" * 30 + "\n\n" + "b" * 30, "c" * 30 + "\n\n" + "d" * 5]
    assert data.chunk_text("x" * 20, 70) == []                            # shorter than min_chars: dropped
    long_line = " ".join(f"w{i:03d}" for i in range(60))                  # 299 characters, one line
    pieces = data.chunk_text(long_line, 100)
    assert all(50 <= len(piece) <= 100 for piece in pieces)
    joined = " ".join(pieces)
    assert long_line.startswith(joined) and len(long_line) - len(joined) < 50 + 1
    lines = "\n".join([f"line {i:02d} " + "y" * 40 for i in range(12)])   # one paragraph of 12 lines
    for chunk in data.chunk_text(lines, 200):
        assert chunk in lines and len(chunk) <= 200                     # cut at line ends, text kept exact


# --------------------------------------------------------------------------- user files


def test_load_text_file_units(tmp_path: Path) -> None:
    file = tmp_path / "notes.txt"
    paragraphs = ["p" * 600, "q" * 300, "r" * 800, "s" * 1200, "t" * 100]
    file.write_text("\r\n\r\n".join(paragraphs) + "\n", encoding="utf-8")
    units = data.load_text_file(file)
    assert [unit.text for unit in units] == [
        "p" * 600 + "\n\n" + "q" * 300 + "\n\n" + "r" * 800,
        "s" * 1200 + "\n\n" + "t" * 100,
    ]
    assert [unit.id for unit in units] == ["notes#0", "notes#1"]
    assert all(unit.source == str(file.resolve()) for unit in units)
    assert [unit.group for unit in units] == ["notes#0-0", "notes#1-1"]   # two units: a block each
    assert data.load_task_file(file) == ("ppl", units)


def write_lines(path: Path, lines: list[object]) -> Path:
    path.write_text("\n".join(line if isinstance(line, str) else json.dumps(line) for line in lines) + "\n",
                    encoding="utf-8")
    return path


def test_load_choice_and_generation_tasks(tmp_path: Path) -> None:
    choice = write_lines(tmp_path / "quiz.jsonl", [
        {"context": "2 + 2 =", "choices": [" 4", " 5"], "gold": 0},
        "",
        {"id": "q2", "context": "The sky is", "choices": [" green", " blue", " red"], "gold": 1, "group": "g"},
    ])
    kind, examples = data.load_task_file(choice)
    assert kind == "choice"
    assert examples == [ChoiceExample("quiz:1", "2 + 2 =", (" 4", " 5"), 0),
                        ChoiceExample("q2", "The sky is", (" green", " blue", " red"), 1, group="g")]
    generate = write_lines(tmp_path / "gen.jsonl", [{"prompt": "Say hi", "answer": "hi"}, {"prompt": "Count"}])
    assert data.load_task_file(generate) == ("generate", [GenerationExample("gen:1", "Say hi", "hi"),
                                                          GenerationExample("gen:2", "Count", None)])
    texts = write_lines(tmp_path / "texts.jsonl", [{"text": "one unit"}, {"text": "another"}])
    kind, documents = data.load_task_file(texts)
    assert kind == "ppl" and [doc.text for doc in documents] == ["one unit", "another"]


@pytest.mark.parametrize(("lines", "message"), [
    ([{"context": "a", "choices": [" b", " c"]}], r"line 1: no 'gold' field"),
    ([{"context": "a", "choices": [" b", " c"], "gold": 0}, {"context": "a", "choices": [" b", " c"]}],
     r"line 2: no 'gold'"),
    ([{"context": "a", "choices": [" b", " c"], "gold": 2}], r"line 1: 'gold' 2 is out of range for 2 choices"),
    ([{"context": "a", "choices": [" b", " c"], "gold": -1}], r"out of range"),
    ([{"context": "a", "choices": [" b", " c"], "gold": True}], r"'gold' must be an integer"),
    ([{"context": "a", "choices": [" b", " c"], "gold": "0"}], r"'gold' must be an integer"),
    ([{"context": "a", "choices": " b", "gold": 0}], r"'choices' must be a list of strings"),
    ([{"context": "a", "choices": [" b", 3], "gold": 0}], r"'choices' must be a list of strings"),
    ([{"context": "a", "choices": [" b"], "gold": 0}], r"at least 2"),
    ([{"context": 5, "choices": [" b", " c"], "gold": 0}], r"'context' must be a string"),
    ([{"choices": [" b", " c"], "gold": 0}], r"no 'context'"),
    (['{"context": "a", "choices": [" b", " c"], "gold": 0'], r"line 1: invalid JSON"),
    (["[1, 2]"], r"line 1: expected a JSON object, got list"),
    ([{"question": "a"}], r"line 1: not a task line"),
    ([{"prompt": "a"}, {"context": "a", "choices": [" b", " c"], "gold": 0}], r"line 2: a choice line in a generate"),
    ([{"prompt": ""}], r"'prompt' is empty"),
    ([{"prompt": "a", "answer": 3}], r"'answer' must be a string or null"),
    ([{"text": "  "}], r"'text' is empty"),
    (["", "  "], r"the file is empty"),
])
def test_task_file_errors_name_the_file_and_line(tmp_path: Path, lines: list[object], message: str) -> None:
    path = write_lines(tmp_path / "task.jsonl", lines)
    with pytest.raises(ValueError, match=message) as error:
        data.load_task_file(path)
    text = str(error.value)
    assert str(path) in text and "\n" not in text


def test_text_file_errors(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="no such file"):
        data.load_text_file(tmp_path / "missing.txt")
    empty = tmp_path / "empty.txt"
    empty.write_text(" \n\n ", encoding="utf-8")
    with pytest.raises(ValueError, match="empty"):
        data.load_task_file(empty)
    binary = tmp_path / "latin1.txt"
    binary.write_bytes("caf\xe9".encode("latin-1"))
    with pytest.raises(ValueError, match="not UTF-8"):
        data.load_text_file(binary)


# --------------------------------------------------------------------------- overlap check


SENTENCE = "the quick brown fox jumps over the lazy dog while the cat sleeps in the warm sun"


def test_overlap_same_source_is_refused(tmp_path: Path) -> None:
    file = tmp_path / "corpus.txt"
    file.write_text("alpha beta\n\ngamma delta\n", encoding="utf-8")
    units = data.load_text_file(file, min_chars=5)
    with pytest.raises(ValueError, match="same source"):
        data.check_no_overlap(units[:1], units[1:])


def test_overlap_shared_paragraph_or_long_run_is_refused() -> None:
    calibration = [Document("cal", f"Intro text here.\n\n{SENTENCE.upper()}!")]
    with pytest.raises(ValueError, match="share a passage"):
        data.check_no_overlap(calibration, [Document("ev", f"Other words.\n\n{SENTENCE}")])
    # 13 shared words spanning a paragraph break, with different punctuation and case (neither
    # paragraph is itself found in the calibration text)
    words = SENTENCE.split()
    evaluation = [Document("ev", "Unrelated start " + " ".join(words[:6]) + ".\n\n"
                           + " ".join(words[6:13]).title() + " zebra")]
    with pytest.raises(ValueError, match="13 words"):
        data.check_no_overlap([Document("cal", SENTENCE)], evaluation)


def test_overlap_threshold_boundary() -> None:
    words = SENTENCE.split()
    twelve = [Document("ev", "x " + " ".join(words[:12]) + " y")]
    data.check_no_overlap([Document("cal", SENTENCE)], twelve)            # 12 words: allowed
    fourteen = [Document("ev", "x " + " ".join(words[:14]) + " y")]       # two shared 13-word runs
    with pytest.raises(ValueError):
        data.check_no_overlap([Document("cal", SENTENCE)], fourteen)
    data.check_no_overlap([Document("cal", SENTENCE)], fourteen, max_shared_shingles=2)
