"""Generation prompts from the evaluation part."""

from __future__ import annotations

from precisionlab.eval.data.prose import word_windows
from precisionlab.eval.data.records import DEFAULT_SIZES, GenerationExample, Split
from precisionlab.eval.data.sampling import round_robin, take

GENERATION_PROMPT_CHARS = 200


def generation_examples(split: Split, n: int = DEFAULT_SIZES.generation_examples,
                        prompt_chars: int = GENERATION_PROMPT_CHARS) -> list[GenerationExample]:
    """Prompts = prefixes of ~``prompt_chars`` characters of evaluation prose, cut at a word.

    ``answer`` is None: generation is scored against the reference model's own greedy output.
    """
    per_topic = [
        [GenerationExample(id=f"{doc.id}#{k}", prompt=head, group=doc.group)
         for k, (head, _) in enumerate(word_windows(doc, prompt_chars, 1))]
        for doc in split.evaluation
    ]
    return take(round_robin(per_topic), n, "generation prompts")
