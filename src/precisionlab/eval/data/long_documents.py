"""Long documents for the long-context task (`longppl`), from the evaluation part only.

Rule: the evaluation part's topics, in the order of their split hash (``builtin_split``), are joined
with a blank line into one text; ``chunk_text`` packs its paragraphs into consecutive documents of
``LONG_MIN_CHARS`` to ``LONG_MAX_CHARS`` characters (a final shorter run is dropped). A document
spans several topics, so each is its own resampling unit (its group is its id). The evaluation
part makes 7 documents (5.5k-6.3k tokens each on SmolLM2's tokenizer).
"""

from __future__ import annotations

from precisionlab.eval.data.records import Document, Split
from precisionlab.eval.data.sampling import take
from precisionlab.eval.data.text import chunk_text

LONG_MAX_CHARS = 24_000
LONG_MIN_CHARS = 20_000
LONG_DOCUMENTS = 4
"""Documents of the task at --size 1 (the evaluation part holds 7)."""


def long_documents(split: Split, n_docs: int = LONG_DOCUMENTS) -> list[Document]:
    """The first ``n_docs`` long documents (see the module)."""
    joined = "\n\n".join(doc.text for doc in split.evaluation)
    chunks = chunk_text(joined, LONG_MAX_CHARS, LONG_MIN_CHARS)
    documents = (Document(id=f"long#{k}", text=text, group=f"long#{k}", source="pydoc_data.topics:evaluation")
                 for k, text in enumerate(chunks))
    return take(iter(documents), n_docs, "long documents")
