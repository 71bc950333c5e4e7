"""Multiple-choice examples from the evaluation part: which continuation follows the context?"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence

from precisionlab.eval.data.prose import prose_runs, span, word_windows
from precisionlab.eval.data.records import DEFAULT_SIZES, ChoiceExample, Split
from precisionlab.eval.data.sampling import round_robin, take

CHOICE_CONTEXT_CHARS = 160
CHOICE_CONTINUATION_CHARS = 64


def choice_examples(split: Split, n: int = DEFAULT_SIZES.choice_examples, seed: int = 0,
                    n_choices: int = 4) -> list[ChoiceExample]:
    """Multiple choice from the evaluation part: which continuation follows the context?

    Each example is a window of running prose (consecutive prose paragraphs): the context (~``CHOICE_CONTEXT_CHARS``
    characters, ending at a word) and its true continuation (the next words, ~
    ``CHOICE_CONTINUATION_CHARS`` characters). The ``n_choices - 1`` distractors come from prose of
    distinct other topics, never text the example's own topic contains, and are made to look like
    continuations: a length within -10 %..+15 % of the true one, cut at word boundaries, starting mid-sentence
    (lower case) when the true continuation does, at a sentence start otherwise. Gold positions
    are balanced (each position ``n / n_choices`` times) and shuffled; ``seed`` changes the
    distractors and the positions, never the contexts.
    """
    if isinstance(n_choices, bool) or not isinstance(n_choices, int) or n_choices < 2:
        raise ValueError(f"n_choices must be an integer >= 2, got {n_choices!r}")
    per_topic = [
        [(f"{doc.id}#{k}", doc.group, head, tail)
         for k, (head, tail) in enumerate(word_windows(doc, CHOICE_CONTEXT_CHARS, CHOICE_CONTINUATION_CHARS))]
        for doc in split.evaluation
    ]
    windows = take(round_robin(per_topic), n, "choice examples")
    pools = {doc.group: prose_runs(doc) for doc in split.evaluation}
    own_text = {doc.group: " ".join(doc.text.split()) for doc in split.evaluation}
    topics = sorted(pools)
    if len(topics) < n_choices:
        raise ValueError(f"need {n_choices} topics for {n_choices} choices, the evaluation part has {len(topics)}")
    rng = random.Random(f"precisionlab-choice:{seed}")
    positions = [i % n_choices for i in range(n)]
    rng.shuffle(positions)
    examples = []
    for (example_id, group, head, tail), gold in zip(windows, positions, strict=True):
        others = [topic for topic in topics if topic != group]
        rng.shuffle(others)
        distractors: list[str] = []
        for topic in others:
            found = _distractor(pools[topic], tail, rng, avoid={tail, *distractors})
            # a run that the example's own topic also contains could be a true continuation
            if found is not None and found not in own_text[group]:
                distractors.append(found)
                if len(distractors) == n_choices - 1:
                    break
        if len(distractors) < n_choices - 1:
            raise ValueError(f"no plausible distractors found for {example_id}")
        choices = [" " + text for text in distractors]
        choices.insert(gold, " " + tail)
        examples.append(ChoiceExample(id=example_id, context=head, choices=tuple(choices), gold=gold, group=group))
    return examples


def _distractor(pool: Sequence[Sequence[str]], true: str, rng: random.Random, avoid: set[str],
                tries: int = 60) -> str | None:
    """A run of words from ``pool`` shaped like the continuation ``true`` (see choice_examples)."""
    lower = true[:1].islower()
    low, high = 0.9 * len(true), 1.15 * len(true)
    candidates = [words for words in pool if len(" ".join(words)) >= low]
    if not candidates:
        return None
    for _ in range(tries):
        words = rng.choice(candidates)
        start = rng.randrange(len(words))
        first = words[start]
        if first[:1].islower() != lower:
            continue
        if not lower and start > 0 and not words[start - 1].endswith((".", ":", "?", "!")):
            continue
        end = span(words, start, math.ceil(low) + 1)     # span counts a space before each word
        if end < 0:
            continue
        text = " ".join(words[start:end])
        if len(text) <= high and text not in avoid:
            return text
    return None
