"""Forward passes and per-example scores (torch): perplexity/KL, multiple choice, generation, embeddings.

Perplexity / KL / top-1 (held-out text). Each document is tokenized without special tokens,
prefixed with the model's prefix token (BOS, else EOS, as lm-evaluation-harness's rolling
log-likelihood does) so that every token of the document is predicted, and cut to
`max_tokens`. Per document: the summed NLL of its tokens (nats) and their count. The
reference keeps, per token, its top-`KL_TOP_K` log-probabilities and their token ids and
the log of the probability left over (`rest`); a candidate's per-token divergence is

    KL(ref || cand) = sum_{i in top-K} p_i (log p_i - log q_i) + p_rest (log p_rest - log q_rest)

with q_rest the candidate's probability of every token outside the reference's top K
(computed by masking, not as 1 - sum). That is the exact KL of the two distributions
coarsened to K tokens plus one "other" bucket: a lower bound of the full-vocabulary KL
(chain rule: the full KL adds p_rest times the KL of the two tails), which keeps the cached
reference at K values per token instead of the whole vocabulary. Top-1 agreement: the
candidate's argmax equals the reference's. A document longer than a scoring window is scored in
sliding windows (`ppl_windows`): every token once, with at least window - stride tokens of
context after the first window. Beside the per-document sums, every scored token keeps its
position, target, NLL and KL (`PplScores.token`, for eval.damage).

Multiple choice, scored as lm-evaluation-harness does (`TemplateLM._encode_pair`,
`loglikelihood`): trailing whitespace of the context moves to the continuation, context and
context + continuation are tokenized whole and the continuation is the tail of the whole
after the context's token count; an empty context is the prefix token. The continuation's
log-likelihood is the sum of its tokens' log-probabilities given the context; `acc` takes the
argmax of those sums, `acc_norm` of the sums divided by the choice's length in UTF-8 bytes, the
per-byte normalisation the harness documents (its code divides by `len(choice)`, characters; the
two agree for ASCII, and the built-in data is ASCII except for a few typographic characters).
The continuation is the choice as given when it starts with whitespace (the built-in choices
carry their leading space) or the context ends with whitespace; otherwise the harness's target
delimiter " " is put in front. The context is run once and its KV cache shared by the choices
(the same logits as whole sequences, up to float rounding, at half the tokens).

Generation: greedy (argmax, no sampling, one beam) for `max_new_tokens` tokens or until EOS,
prompts tokenized without special tokens and left-padded in batches; the same batches and
settings for every model.

Embeddings (encoders): tokenized with special tokens, truncated to the model's max length,
pooled as sentence-transformers' 1_Pooling config says (mean of the token states over the
attention mask for all-MiniLM-L6-v2), then L2-normalised when modules.json has Normalize.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from precisionlab import peers

KL_TOP_K = 1024
"""Reference log-probabilities kept per token for the KL (see the module docstring). On SmolLM2 the
coarsened KL at K = 1024 is 97-98 % of the full-vocabulary KL (int8:row, int4:g128; 92-94 % at 256)."""
PPL_TOKEN_BUDGET = 512
"""Tokens per forward batch of the perplexity task: its logits are batch × length × vocabulary floats
(100 MB for SmolLM2), the largest transient of a run."""
EMBED_BATCH = 16
GENERATE_BATCH = 8

Advance = Callable[[int], None]
CacheFactory = Callable[[], Any]


def _noop(_: int) -> None:
    return None


@dataclass
class CausalLM:
    """A causal LM with what scoring needs: tokenizer rules and (optionally) a KV-cache factory."""

    model: Any
    tokenizer: Any
    max_length: int = 2048
    make_cache: CacheFactory | None = None
    """Builds the cache handed to every forward (KV-cache quantization); None: a plain DynamicCache
    where a cache is needed (choice scoring), none otherwise."""

    @property
    def prefix_id(self) -> int:
        tok = self.tokenizer
        token = tok.bos_token_id if tok.bos_token_id is not None else tok.eos_token_id
        if token is None:
            raise ValueError("the tokenizer has neither a BOS nor an EOS token to start a sequence with")
        return int(token)

    @property
    def eos_id(self) -> int | None:
        return self.tokenizer.eos_token_id

    @property
    def pad_id(self) -> int:
        tok = self.tokenizer
        for token in (tok.pad_token_id, tok.eos_token_id, 0):
            if token is not None:
                return int(token)
        return 0

    def encode(self, text: str) -> list[int]:
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def cache(self, force: bool = False) -> Any:
        if self.make_cache is not None:
            return self.make_cache()
        if force:
            return peers.transformers().DynamicCache(config=self.model.config)
        return None

    def forward(self, input_ids: Any, attention_mask: Any = None, cache: Any = None) -> Any:
        from precisionlab.models.hooks import cache_kwargs

        kwargs: dict[str, Any] = {"input_ids": input_ids}
        if attention_mask is not None:
            kwargs["attention_mask"] = attention_mask
        if cache is not None:
            kwargs.update(cache_kwargs(self.model, cache))
        else:
            kwargs["use_cache"] = False
        return self.model(**kwargs).logits


# --------------------------------------------------------------------------- perplexity / KL
TOP_SHOWN = 3
"""The candidate's most likely tokens kept per scored token (for the worst examples of eval.damage)."""
ROW_CHUNK = 512
"""Rows of one window turned into log-probabilities at a time (a long window's transient stays at this many
vocabulary-wide rows; a window of at most this many targets is one chunk, as before windows existed)."""


@dataclass
class PplScores:
    """Per document: summed NLL (nats) and token counts; with a reference, summed KL and top-1 matches."""

    nll: np.ndarray
    tokens: np.ndarray
    kl: np.ndarray | None = None
    agree: np.ndarray | None = None
    reference: dict[str, np.ndarray] = field(default_factory=dict)
    """For a reference pass: top_ids (T, K) int32, top_logp (T, K) float32, rest_logp (T,) float64 and token_nll
    (T,) float64, the NLL of each scored token."""
    token: dict[str, np.ndarray] = field(default_factory=dict)
    """Per scored token, documents in order: position (int32, its index in the window the model saw: the prefix
    token is 0) and target (int64, the token id); for a candidate also nll and kl (float64), top_ids (T, TOP_SHOWN)
    int64 and top_logp (T, TOP_SHOWN) float32 of its most likely tokens."""


@dataclass(frozen=True)
class Piece:
    """One forward of perplexity scoring: sequence[start:stop] of document `doc`, scoring the targets at sequence
    indices first .. stop-1 (each predicted from the logits one row before it)."""

    doc: int
    start: int
    stop: int
    first: int


def ppl_windows(lengths: Sequence[int], window: int | None = None, stride: int | None = None) -> list[Piece]:
    """The forwards that score every target (sequence index 1 .. length-1) of each sequence exactly once.

    A sequence of at most `window` tokens (or any, when window is None) is one piece. A longer one is cut into
    windows starting at 0, stride, 2 stride, ... (each `window` tokens, the last one ending at the sequence's end);
    each window scores the targets after those the previous window scored, so a target scored by window k >= 1 has
    at least window - stride tokens of context, and the first window's targets have all of theirs."""
    if window is not None:
        if window < 2:
            raise ValueError(f"a scoring window needs at least 2 tokens, got {window}")
        stride = window // 2 if stride is None else stride
        if not 1 <= stride <= window - 1:
            raise ValueError(f"the stride must lie in 1 .. window - 1 = {window - 1}, got {stride}")
    pieces = []
    for doc, length in enumerate(lengths):
        if length < 2:
            raise ValueError("a perplexity sequence needs the prefix token and at least one token")
        if window is None or length <= window:
            pieces.append(Piece(doc, 0, length, 1))
            continue
        assert stride is not None
        scored, start = 0, 0
        while scored < length - 1:
            stop = min(start + window, length)
            pieces.append(Piece(doc, start, stop, scored + 1))
            scored = stop - 1
            start += stride
    return pieces


def ppl_sequences(lm: CausalLM, texts: Sequence[str], max_tokens: int, windowed: bool = False) -> list[list[int]]:
    """[prefix] + tokens of each text, at most max_tokens + 1 long (so max_tokens tokens are scored); without
    `windowed` also cut to the model's context (max_length - 1 tokens), with it the windows keep to the context."""
    limit = max_tokens if windowed else min(max_tokens, lm.max_length - 1)
    sequences = []
    for text in texts:
        ids = lm.encode(text)[:limit]
        if not ids:
            raise ValueError("a perplexity document tokenizes to nothing")
        sequences.append([lm.prefix_id, *ids])
    return sequences


def _ppl_batches(lengths: Sequence[int], budget: int) -> list[list[int]]:
    """Indices grouped into batches of similar length with batch × longest <= budget (one at least)."""
    order = sorted(range(len(lengths)), key=lambda i: (lengths[i], i))
    batches: list[list[int]] = []
    current: list[int] = []
    for i in order:
        if current and (len(current) + 1) * max(lengths[j] for j in (*current, i)) > budget:
            batches.append(current)
            current = []
        current.append(i)
    if current:
        batches.append(current)
    return batches


class _Accumulator:
    """Where score_ppl writes: per document sums, per token arrays (see PplScores)."""

    def __init__(self, sequences: Sequence[Sequence[int]], reference: dict[str, np.ndarray] | None, top_k: int,
                 vocab: int) -> None:
        n = len(sequences)
        targets = [len(s) - 1 for s in sequences]
        self.offsets = np.concatenate([[0], np.cumsum(targets)]).astype(np.int64)
        total = int(self.offsets[-1])
        self.tokens = np.asarray(targets, dtype=np.float64)
        self.nll = np.zeros(n)
        self.candidate = reference is not None
        self.kl = np.zeros(n) if self.candidate else None
        self.agree = np.zeros(n) if self.candidate else None
        self.token: dict[str, np.ndarray] = {
            "position": np.zeros(total, dtype=np.int32),
            "target": np.concatenate([np.asarray(s[1:], dtype=np.int64) for s in sequences]) if n else
            np.zeros(0, dtype=np.int64)}
        self.ref: dict[str, np.ndarray] = {}
        if self.candidate:
            self.token.update(nll=np.zeros(total), kl=np.zeros(total),
                              top_ids=np.zeros((total, min(TOP_SHOWN, vocab)), dtype=np.int64),
                              top_logp=np.zeros((total, min(TOP_SHOWN, vocab)), dtype=np.float32))
        else:
            self.ref = {"top_ids": np.zeros((total, top_k), dtype=np.uint16 if vocab <= 1 << 16 else np.int32),
                        "top_logp": np.zeros((total, top_k), dtype=np.float32),
                        "rest_logp": np.zeros(total, dtype=np.float64),
                        "token_nll": np.zeros(total, dtype=np.float64)}

    def scores(self) -> PplScores:
        return PplScores(self.nll, self.tokens, self.kl, self.agree, self.ref, self.token)


def score_ppl(lm: CausalLM, sequences: Sequence[Sequence[int]], reference: dict[str, np.ndarray] | None = None,
              top_k: int = KL_TOP_K, advance: Advance = _noop, window: int | None = None,
              stride: int | None = None) -> PplScores:
    """Score every sequence (in the pieces of `ppl_windows(lengths, window, stride)`); without a reference, also
    return the reference's top-K arrays. advance(n): n more documents have all their pieces scored."""
    torch = peers.torch()
    vocab = vocab_size(lm)
    if reference is None:
        top_k = min(top_k, vocab)
    acc = _Accumulator(sequences, reference, top_k, vocab)
    pieces = ppl_windows([len(s) for s in sequences], window, stride)
    left = np.bincount([p.doc for p in pieces], minlength=len(sequences))
    lengths = [p.stop - p.start for p in pieces]
    with torch.inference_mode():
        for batch in _ppl_batches(lengths, PPL_TOKEN_BUDGET):
            width = max(lengths[i] for i in batch)
            ids = torch.full((len(batch), width), lm.pad_id, dtype=torch.long)
            mask = torch.zeros((len(batch), width), dtype=torch.long)
            for row, i in enumerate(batch):
                piece = pieces[i]
                ids[row, : lengths[i]] = torch.tensor(sequences[piece.doc][piece.start : piece.stop])
                mask[row, : lengths[i]] = 1
            logits = lm.forward(ids, mask, lm.cache())
            finished = 0
            for row, i in enumerate(batch):
                piece = pieces[i]
                skip = piece.first - 1 - piece.start  # rows of context only
                count = piece.stop - piece.first
                for begin in range(0, count, ROW_CHUNK):
                    rows = range(skip + begin, skip + min(begin + ROW_CHUNK, count))
                    _score_rows(torch, acc, reference, top_k, piece, logits[row], ids[row], rows)
                left[piece.doc] -= 1
                finished += int(left[piece.doc] == 0)
            del logits
            advance(finished)
    return acc.scores()


def _score_rows(torch: Any, acc: _Accumulator, reference: dict[str, np.ndarray] | None, top_k: int, piece: Piece,
                logits: Any, ids: Any, rows: range) -> None:
    """Score the targets predicted by `rows` of one piece's logits into the accumulator."""
    logp = torch.log_softmax(logits[rows.start : rows.stop].float(), dim=-1)
    target = ids[rows.start + 1 : rows.stop + 1]
    token_logp = logp.gather(1, target[:, None])[:, 0].double()
    doc = piece.doc
    acc.nll[doc] += -float(token_logp.sum())
    base = int(acc.offsets[doc]) + piece.start - 1  # global token index of sequence index 0 of this piece
    span = slice(base + rows.start + 1, base + rows.stop + 1)
    acc.token["position"][span] = np.arange(rows.start + 1, rows.stop + 1, dtype=np.int32)
    if reference is None:
        acc.ref["token_nll"][span] = -token_logp.numpy()
        top = logp.topk(top_k, dim=-1)
        acc.ref["top_ids"][span] = top.indices.numpy().astype(acc.ref["top_ids"].dtype)
        acc.ref["top_logp"][span] = top.values.numpy()
        acc.ref["rest_logp"][span] = _rest_logp(logp, top.indices)
        return
    assert acc.kl is not None and acc.agree is not None
    top_ids = torch.from_numpy(reference["top_ids"][span].astype(np.int64))
    p_log = torch.from_numpy(reference["top_logp"][span]).double()
    p_rest = torch.from_numpy(reference["rest_logp"][span])
    q_log = logp.gather(1, top_ids).double()
    acc.agree[doc] += float((logp.argmax(dim=-1) == top_ids[:, 0]).sum())
    shown = logp.topk(acc.token["top_ids"].shape[1], dim=-1)
    acc.token["top_ids"][span] = shown.indices.numpy()
    acc.token["top_logp"][span] = shown.values.numpy()
    q_rest = torch.from_numpy(_rest_logp(logp, top_ids))
    per_token = ((p_log.exp() * (p_log - q_log)).sum(dim=1) + _xlogx_ratio(p_rest, q_rest)).clamp_min(0.0)
    acc.kl[doc] += float(per_token.sum())
    acc.token["nll"][span] = -token_logp.numpy()
    acc.token["kl"][span] = per_token.numpy()


def vocab_size(lm: CausalLM) -> int:
    return int(lm.model.get_output_embeddings().weight.shape[0])


def _rest_logp(logp: Any, top_ids: Any) -> np.ndarray:
    """log of the probability outside the given token ids, per row (as float64; -inf when nothing is left).

    Overwrites those entries of `logp` with -inf (in place: no second vocabulary-wide copy), so it is the
    last use of `logp`. float32 suffices: logsumexp is accurate to its rounding."""
    torch = peers.torch()
    masked = logp.scatter_(1, top_ids, -math.inf)
    return torch.logsumexp(masked, dim=1).double().numpy()


def _xlogx_ratio(p_log: Any, q_log: Any) -> Any:
    """p (log p - log q) with 0 log 0 = 0 (p = exp(p_log))."""
    torch = peers.torch()
    p = p_log.exp()
    term = p * (p_log - q_log)
    return torch.where(p > 0, term, torch.zeros_like(term))


# --------------------------------------------------------------------------- multiple choice
@dataclass
class ChoiceScores:
    """Per example: log-likelihood of every choice, the argmax picks, and correctness."""

    loglik: list[list[float]]
    acc: np.ndarray
    """1.0 when argmax(loglik) is the gold choice."""
    acc_norm: np.ndarray
    """1.0 when argmax(loglik / UTF-8 bytes of the choice) is the gold choice."""
    pred: np.ndarray
    pred_norm: np.ndarray


def continuation(context: str, choice: str) -> tuple[str, int]:
    """(continuation text, normalising length in UTF-8 bytes) for one choice (see the module docstring).

    The length excludes the target delimiter, as the harness's `len(choice)` does: a built-in
    choice's leading space is that delimiter, so it is not counted."""
    size = len(choice.encode("utf-8"))
    if not context or context[-1:].isspace() or choice[:1].isspace():
        text = choice
        length = size - 1 if choice.startswith(" ") and context else size
    else:
        text = " " + choice
        length = size
    return text, max(length, 1)


def encode_pair(lm: CausalLM, context: str, text: str) -> tuple[list[int], list[int]]:
    """lm-evaluation-harness's _encode_pair (an empty context is the prefix token)."""
    if not context:
        return [lm.prefix_id], lm.encode(text)
    spaces = len(context) - len(context.rstrip())
    if spaces:
        text = context[-spaces:] + text
        context = context[:-spaces]
    whole = lm.encode(context + text)
    context_ids = lm.encode(context)
    return context_ids, whole[len(context_ids):]


def score_choice(lm: CausalLM, examples: Sequence[Any], advance: Advance = _noop) -> ChoiceScores:
    """Log-likelihood of each choice given its context (the context's KV cache shared by the choices)."""
    torch = peers.torch()
    logliks: list[list[float]] = []
    picks, picks_norm, acc, acc_norm = [], [], [], []
    with torch.inference_mode():
        for example in examples:
            texts = [continuation(example.context, choice) for choice in example.choices]
            pairs = [encode_pair(lm, example.context, text) for text, _ in texts]
            lls = _choice_logliks(lm, pairs)
            normalised = [ll / length for ll, (_, length) in zip(lls, texts, strict=True)]
            pick, pick_norm = int(np.argmax(lls)), int(np.argmax(normalised))
            logliks.append(lls)
            picks.append(pick)
            picks_norm.append(pick_norm)
            acc.append(float(pick == example.gold))
            acc_norm.append(float(pick_norm == example.gold))
            advance(1)
    return ChoiceScores(logliks, np.asarray(acc), np.asarray(acc_norm), np.asarray(picks), np.asarray(picks_norm))


def _choice_logliks(lm: CausalLM, pairs: Sequence[tuple[list[int], list[int]]]) -> list[float]:
    """Summed log-probabilities of each continuation. Every pair shares the context tokens when the
    context is the same string (it is, within one example); the harness's left truncation keeps the
    last max_length tokens of context + continuation."""
    torch = peers.torch()
    context_ids = pairs[0][0]
    longest = max(len(cont) for _, cont in pairs)
    keep = max(1, lm.max_length - longest)
    context_ids = context_ids[-keep:]
    cache = lm.cache(force=True)
    logits = lm.forward(torch.tensor([context_ids]), None, cache)
    first = torch.log_softmax(logits[0, -1].float(), dim=-1)
    results = [float(first[cont[0]]) if cont else 0.0 for _, cont in pairs]
    if longest > 1:
        rows = len(pairs)
        cache.batch_repeat_interleave(rows)
        ids = torch.full((rows, longest - 1), lm.pad_id, dtype=torch.long)
        for row, (_, cont) in enumerate(pairs):
            if len(cont) > 1:
                ids[row, : len(cont) - 1] = torch.tensor(cont[:-1])
        # padding sits after each row's real tokens, so causal attention keeps it out of their logits
        logits = lm.forward(ids, None, cache)
        for row, (_, cont) in enumerate(pairs):
            if len(cont) > 1:
                logp = torch.log_softmax(logits[row, : len(cont) - 1].float(), dim=-1)
                tail = torch.tensor(cont[1:])[:, None]
                results[row] += float(logp.gather(1, tail).double().sum())
    return results


# --------------------------------------------------------------------------- generation
def generate(lm: CausalLM, prompts: Sequence[str], max_new_tokens: int, advance: Advance = _noop) -> list[list[int]]:
    """Greedy continuations (token ids, up to and without the first EOS) of each prompt."""
    torch = peers.torch()
    transformers = peers.transformers()
    encoded = [lm.encode(p) for p in prompts]
    for ids, prompt in zip(encoded, prompts, strict=True):
        if not ids:
            raise ValueError(f"a generation prompt tokenizes to nothing: {prompt[:40]!r}")
    config = transformers.GenerationConfig(max_new_tokens=max_new_tokens, do_sample=False, num_beams=1,
                                           pad_token_id=lm.pad_id, eos_token_id=lm.eos_id)
    outputs: list[list[int]] = [[] for _ in prompts]
    order = sorted(range(len(prompts)), key=lambda i: (len(encoded[i]), i))
    with torch.inference_mode():
        for start in range(0, len(order), GENERATE_BATCH):
            batch = order[start : start + GENERATE_BATCH]
            width = max(len(encoded[i]) for i in batch)
            limit = lm.max_length - max_new_tokens
            if width > limit:
                raise ValueError(f"a generation prompt of {width} tokens leaves no room for {max_new_tokens} new "
                                 f"tokens within the model's {lm.max_length}")
            ids = torch.full((len(batch), width), lm.pad_id, dtype=torch.long)
            mask = torch.zeros((len(batch), width), dtype=torch.long)
            for row, i in enumerate(batch):  # left padding: every prompt ends where generation starts
                ids[row, width - len(encoded[i]):] = torch.tensor(encoded[i])
                mask[row, width - len(encoded[i]):] = 1
            kwargs: dict[str, Any] = {}
            cache = lm.cache()
            if cache is not None:
                from precisionlab.models.hooks import cache_kwargs

                kwargs.update({k: v for k, v in cache_kwargs(lm.model, cache).items() if k != "use_cache"})
            out = lm.model.generate(input_ids=ids, attention_mask=mask, generation_config=config, **kwargs)
            for row, i in enumerate(batch):
                new = [int(t) for t in out[row, width:]]
                if lm.eos_id is not None and lm.eos_id in new:
                    new = new[: new.index(lm.eos_id)]
                outputs[i] = new
            advance(len(batch))
    return outputs


def prefix_agreement(reference: Sequence[int], candidate: Sequence[int]) -> float:
    """Tokens before the first difference / the longer of the two (1.0 for two empty outputs)."""
    longest = max(len(reference), len(candidate))
    if longest == 0:
        return 1.0
    same = 0
    for a, b in zip(reference, candidate, strict=False):
        if a != b:
            break
        same += 1
    return same / longest


# --------------------------------------------------------------------------- embeddings
def embed(loaded: Any, texts: Sequence[str], advance: Advance = _noop) -> np.ndarray:
    """Sentence embeddings (n, hidden) float32 of an encoder LoadedModel (pooling and normalisation as loaded)."""
    torch = peers.torch()
    out = []
    with torch.inference_mode():
        for start in range(0, len(texts), EMBED_BATCH):
            chunk = list(texts[start : start + EMBED_BATCH])
            inputs = loaded.tokenizer(chunk, padding=True, truncation=True, max_length=loaded.max_length,
                                      return_tensors="pt")
            states = loaded.model(**inputs).last_hidden_state.float()
            mask = inputs["attention_mask"].unsqueeze(-1).to(states.dtype)
            pooled = pool(states, mask, loaded.pooling)
            if loaded.normalize:
                pooled = torch.nn.functional.normalize(pooled, p=2, dim=1)
            out.append(pooled.numpy())
            advance(len(chunk))
    return np.concatenate(out, axis=0)


def pool(states: Any, mask: Any, mode: str) -> Any:
    """sentence-transformers' Pooling: mean (sum / clamp(count, 1e-9)), cls, max, mean_sqrt_len."""
    torch = peers.torch()
    if mode == "cls":
        return states[:, 0]
    if mode == "max":
        return states.masked_fill(mask == 0, -1e9).max(dim=1).values
    summed = (states * mask).sum(dim=1)
    count = torch.clamp(mask.sum(dim=1), min=1e-9)
    return summed / count if mode == "mean" else summed / torch.sqrt(count)
