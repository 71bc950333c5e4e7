"""Task scoring on real models (SmolLM2 cut to its first blocks, MiniLM): each score against an independent
computation — whole-sequence forwards with torch's cross entropy / log-softmax, a hand-written greedy loop,
the full-vocabulary KL, hand mean pooling — and lm-evaluation-harness's tokenization rules."""

from __future__ import annotations

import numpy as np
import pytest

from tests.model_helpers import minilm, smollm2_slice

torch = pytest.importorskip("torch")

from precisionlab.eval import data, scoring  # noqa: E402
from precisionlab.models import quantized_weights  # noqa: E402


def lm() -> scoring.CausalLM:
    loaded = smollm2_slice()
    return scoring.CausalLM(loaded.model, loaded.tokenizer, loaded.max_length)


# --------------------------------------------------------------------------- harness rules
def test_continuation_and_delimiter_rules() -> None:
    assert scoring.continuation("The cat", " sat down") == (" sat down", 8)   # built-in: the choice has its space
    assert scoring.continuation("Answer:", "Paris") == (" Paris", 5)           # harness target delimiter " "
    assert scoring.continuation("Answer: ", "Paris") == ("Paris", 5)           # the context already ends in one
    assert scoring.continuation("", "Paris") == ("Paris", 5)


def test_acc_norm_divides_by_utf8_bytes() -> None:
    # The issue asks for the per-byte normalisation; lm-evaluation-harness's code divides by len(choice), which is
    # characters (the same for ASCII). The lengths exclude the target delimiter, as the harness's do.
    assert scoring.continuation("Le plat:", "crème brûlée") == (" crème brûlée", 15)      # 12 characters
    assert scoring.continuation("The letters", " αβγ") == (" αβγ", 6)                      # 3 characters
    assert scoring.continuation("", "ωμέγα") == ("ωμέγα", 10)
    model = lm()
    choices = (" λόγος", " zqxj")        # 5 characters in 10 bytes, and 4 ASCII letters
    example = data.ChoiceExample("greek", "The Greek word for word is", choices, 0)
    scores = scoring.score_choice(model, [example])
    lls = np.asarray(scores.loglik[0])
    per_byte = lls / [len(c.encode("utf-8")) - 1 for c in choices]
    per_character = lls / [len(c) - 1 for c in choices]
    assert int(np.argmax(per_byte)) != int(np.argmax(per_character))   # the example tells the two rules apart
    assert scores.pred_norm[0] == int(np.argmax(per_byte)) and scores.acc_norm[0] == float(np.argmax(per_byte) == 0)


def test_encode_pair_moves_trailing_space_and_takes_the_tail() -> None:
    model = lm()
    context, text = "The value of pi is ", "about 3.14"
    ctx, cont = scoring.encode_pair(model, context, text)
    # lm-evaluation-harness: the context's trailing space joins the continuation, the whole string is tokenized
    # once and the continuation is what follows the context's tokens
    assert ctx == model.encode("The value of pi is")
    whole = model.encode("The value of pi is about 3.14")
    assert cont == whole[len(ctx):]
    assert scoring.encode_pair(model, "", "Paris") == ([model.prefix_id], model.encode("Paris"))


# --------------------------------------------------------------------------- scores against whole forwards
def whole_loglik(model: scoring.CausalLM, ctx: list[int], cont: list[int]) -> float:
    ids = torch.tensor([ctx + cont])
    with torch.inference_mode():
        logp = torch.log_softmax(model.model(input_ids=ids, use_cache=False).logits[0].double(), dim=-1)
    return float(sum(logp[len(ctx) - 1 + j, token] for j, token in enumerate(cont)))


def test_choice_logliks_equal_whole_sequence_forwards() -> None:
    model = lm()
    examples = data.choice_examples(data.builtin_split(), 2)
    scores = scoring.score_choice(model, examples)
    for example, lls, acc, acc_norm in zip(examples, scores.loglik, scores.acc, scores.acc_norm, strict=True):
        expected = []
        for choice in example.choices:
            ctx, cont = scoring.encode_pair(model, example.context, scoring.continuation(example.context, choice)[0])
            expected.append(whole_loglik(model, ctx, cont))
        np.testing.assert_allclose(lls, expected, rtol=0, atol=2e-3)
        assert acc == float(np.argmax(expected) == example.gold)
        lengths = [len(c.encode("utf-8")) - 1 for c in example.choices]  # bytes; the leading space is the delimiter
        assert acc_norm == float(np.argmax(np.asarray(expected) / lengths) == example.gold)


def test_perplexity_nll_equals_cross_entropy_and_self_kl_is_zero() -> None:
    model = lm()
    docs = data.ppl_documents(data.builtin_split(), 2)
    sequences = scoring.ppl_sequences(model, [d.text for d in docs], 64)
    reference = scoring.score_ppl(model, sequences, top_k=64)
    for i, seq in enumerate(sequences):
        assert seq[0] == model.prefix_id and len(seq) == 65 and reference.tokens[i] == 64
        ids = torch.tensor([seq])
        with torch.inference_mode():
            logits = model.model(input_ids=ids, use_cache=False).logits[0, :-1]
        expected = torch.nn.functional.cross_entropy(logits.double(), ids[0, 1:], reduction="sum")
        assert reference.nll[i] == pytest.approx(float(expected), rel=1e-5)
    again = scoring.score_ppl(model, sequences, reference=reference.reference)
    assert again.kl is not None and again.agree is not None
    np.testing.assert_allclose(again.kl, 0.0, atol=1e-6)
    np.testing.assert_array_equal(again.agree, reference.tokens)


def test_coarsened_kl_is_a_tight_lower_bound_of_the_full_kl() -> None:
    model = lm()
    docs = data.ppl_documents(data.builtin_split(), 1)
    sequences = scoring.ppl_sequences(model, [d.text for d in docs], 64)
    ids = torch.tensor([sequences[0]])
    with torch.inference_mode():
        p = torch.log_softmax(model.model(input_ids=ids, use_cache=False).logits[0, :-1].double(), dim=-1)
    reference = scoring.score_ppl(model, sequences, top_k=1024)
    with quantized_weights(model.model, "int4:g128"):
        candidate = scoring.score_ppl(model, sequences, reference=reference.reference)
        with torch.inference_mode():
            q = torch.log_softmax(model.model(input_ids=ids, use_cache=False).logits[0, :-1].double(), dim=-1)
    full = float((p.exp() * (p - q)).sum())
    assert candidate.kl is not None and candidate.agree is not None
    assert 0.9 * full <= candidate.kl[0] <= full * (1 + 1e-9)
    assert candidate.agree[0] == float((q.argmax(-1) == p.argmax(-1)).sum())


def test_greedy_generation_equals_a_hand_written_argmax_loop() -> None:
    model = lm()
    prompts = ["The for statement is used to", "A module can contain executable statements as well as"]
    outputs = scoring.generate(model, prompts, max_new_tokens=6)
    for prompt, out in zip(prompts, outputs, strict=True):
        ids = model.encode(prompt)
        expected: list[int] = []
        for _ in range(6):
            with torch.inference_mode():
                logits = model.model(input_ids=torch.tensor([ids + expected]), use_cache=False).logits[0, -1]
            token = int(logits.argmax())
            if token == model.eos_id:
                break
            expected.append(token)
        assert out == expected


def test_prefix_agreement() -> None:
    assert scoring.prefix_agreement([1, 2, 3, 4], [1, 2, 9, 4]) == 0.5
    assert scoring.prefix_agreement([1, 2], [1, 2, 3, 4]) == 0.5
    assert scoring.prefix_agreement([], []) == 1.0
    assert scoring.prefix_agreement([5], []) == 0.0


def test_minilm_embeddings_are_mean_pooled_and_normalised() -> None:
    loaded = minilm()
    texts = ["The import statement.", "Exceptions are raised with raise; a longer sentence pads the other one."]
    embeddings = scoring.embed(loaded, texts)
    inputs = loaded.tokenizer(texts, padding=True, truncation=True, max_length=256, return_tensors="pt")
    with torch.inference_mode():
        states = loaded.model(**inputs).last_hidden_state.numpy().astype(np.float64)
    mask = inputs["attention_mask"].numpy()[..., None]
    mean = (states * mask).sum(axis=1) / mask.sum(axis=1)
    expected = mean / np.linalg.norm(mean, axis=1, keepdims=True)
    np.testing.assert_allclose(embeddings, expected, rtol=0, atol=1e-6)
    assert embeddings.shape == (2, 384)
