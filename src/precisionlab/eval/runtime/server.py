"""A runtime behind an OpenAI-compatible completions endpoint (llama.cpp's server, llama-cpp-python's, vLLM):
the prompt's own log-probabilities, asked for with `echo` and `logprobs`.

    scorer = ServerScorer("http://127.0.0.1:8080", decode, prefix_id, model="q4_0", batch=8, retries=3)
    scorer.logprobs([[bos, t1, ..., tn]])    [array([nan, lp(t2), ..., lp(tn)])]: see below

Each request is POST {url}/v1/completions with

    {"prompt": [text, ...], "max_tokens": 1, "echo": true, "logprobs": 1, "temperature": 0, "model": ...}

where a sequence's text is its tokens after the first, decoded (`decode`), or the text they came from when
the caller gives it (a perplexity document: decoding does not always give back a text that tokenizes to the same
ids, and a causal model's log-probabilities of the first n tokens do not depend on the tokens after them, so
the whole document is sent and the first n values kept); the server tokenizes it again and puts the model's
BOS first, so the reply's `choices[i].logprobs.token_logprobs` holds one value per prompt token
and one for the generated token (max_tokens 0 means "until the context is full" to llama-cpp-python). Replies
come in two conventions, told apart by their length: vLLM echoes the BOS (n + 2 entries, the first null);
llama-cpp-python drops it and, keeping the OpenAI rule that the first prompt token has no log-probability,
nulls t1's (n + 1 entries). So t1 is NaN from llama-cpp-python's server, and the runtime evaluation scores
every sequence from t2 on in every mode (eval.runtime.run). Any other length means the server tokenized the text
into other tokens than ours: a one-line error, never a silent misalignment.

Whether the server puts the BOS first itself is asked once, from its tokenize endpoint (llama-cpp-python's
/extras/tokenize, llama.cpp's and vLLM's /tokenize): when it does not, the prefix token's own text leads every
prompt (servers parse special tokens in prompts). No tokenize endpoint: the server is taken to add it.

Batching: `batch` prompts per request (vLLM takes a list); a server that refuses a list (llama-cpp-python's
accepts one prompt per request) is asked one prompt at a time from then on. Retries: a connection error, a
timeout, HTTP 429 or 5xx on a one-prompt request are retried `retries` times, waiting backoff, 2 backoff, ...
seconds; any other HTTP error, or a reply without prompt log-probabilities, is a ValueError of one line that
names the server.
"""

from __future__ import annotations

import json
import math
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from typing import Any
from urllib.parse import urlparse

import numpy as np

from precisionlab.eval.runtime.scorers import Advance, check_sequences

RETRY_STATUS = frozenset({429, 500, 502, 503, 504})
NO_LOGPROBS = ("returned no prompt log-probabilities: it needs `echo` and `logprobs` on /v1/completions "
               "(llama-cpp-python's server: --logits_all true; vLLM and llama.cpp's server give them)")


def _noop(_: int) -> None:
    return None


class ServerError(ValueError):
    """A server that cannot give what the evaluation needs (a ValueError: one line, exit 2 in the CLI)."""


def base_url(url: str) -> str:
    """The server's root (scheme://host:port[/prefix]) from what a user writes: the root, .../v1 or
    .../v1/completions. ValueError for anything that is not an http(s) URL."""
    text = url.strip().rstrip("/")
    parsed = urlparse(text)
    if parsed.scheme not in ("http", "https") or not parsed.netloc:
        raise ValueError(f"--server {url!r}: give an http(s) URL such as http://127.0.0.1:8080")
    for tail in ("/v1/completions", "/v1"):
        if text.endswith(tail):
            return text[: -len(tail)]
    return text


class ServerScorer:
    """Per-token log-probabilities from a completions endpoint (module docstring)."""

    def __init__(self, url: str, decode: Callable[[list[int]], str], prefix_id: int, prefix_text: str = "",
                 model: str | None = None, label: str | None = None, batch: int = 8, retries: int = 3,
                 backoff: float = 0.5, timeout: float = 600.0,
                 encode: Callable[[str], list[int]] | None = None) -> None:
        if batch < 1 or retries < 0 or backoff < 0 or timeout <= 0:
            raise ValueError("batch >= 1, retries >= 0, backoff >= 0 and timeout > 0")
        self.base = base_url(url)
        self.model = model
        self.decode = decode
        self.encode = encode
        self.prefix_id = int(prefix_id)
        self.prefix_text = prefix_text
        self.label = label or model or urlparse(self.base).netloc.replace(".", "-").replace(":", "-")
        self.source = f"{self.base} (model {model})" if model else self.base
        self.batch = batch
        self.retries = retries
        self.backoff = backoff
        self.timeout = timeout
        self.requests = 0
        """Requests sent (retries included)."""
        self.notes: list[str] = []
        self._adds_bos: bool | None = None

    # ------------------------------------------------------------------ HTTP
    def _send(self, path: str, body: dict[str, Any] | None) -> Any:
        """One request: the decoded JSON reply; urllib's errors propagate."""
        data = None if body is None else json.dumps(body).encode("utf-8")
        request = urllib.request.Request(self.base + path, data=data, method="GET" if body is None else "POST",
                                         headers={"Content-Type": "application/json"})
        self.requests += 1
        with urllib.request.urlopen(request, timeout=self.timeout) as reply:
            return json.loads(reply.read().decode("utf-8"))

    def _post(self, path: str, body: dict[str, Any], retry: bool = True) -> Any:
        """POST with retries (module docstring); ServerError once they are spent."""
        attempt = 0
        while True:
            try:
                return self._send(path, body)
            except urllib.error.HTTPError as exc:
                detail = _detail(exc)
                if not retry or exc.code not in RETRY_STATUS or attempt >= self.retries:
                    raise ServerError(f"{self.base}{path} answered HTTP {exc.code}{detail}") from None
                reason = f"HTTP {exc.code}"
            except (urllib.error.URLError, OSError, TimeoutError) as exc:
                if not retry or attempt >= self.retries:
                    why = getattr(exc, "reason", exc)
                    raise ServerError(f"cannot reach {self.base}{path} after {attempt + 1} tries: {why}") from None
                reason = type(exc).__name__
            except ValueError:  # the reply is not JSON
                raise ServerError(f"{self.base}{path} answered with something that is not JSON") from None
            delay = self.backoff * 2**attempt
            attempt += 1
            self.notes.append(f"{self.label}: {reason}, retry {attempt} of {self.retries} after {delay:g} s")
            time.sleep(delay)

    # ------------------------------------------------------------------ BOS
    def adds_bos(self) -> bool:
        """Whether the server puts the BOS first in a text prompt (asked once; module docstring)."""
        if self._adds_bos is None:
            self._adds_bos = self._probe_bos()
        return self._adds_bos

    def _probe_bos(self) -> bool:
        model = {"model": self.model} if self.model else {}
        for path, body in (("/extras/tokenize", {"input": "a", **model}), ("/tokenize", {"prompt": "a", **model}),
                           ("/tokenize", {"content": "a", "add_special": True})):
            try:
                reply = self._send(path, body)
            except (urllib.error.URLError, OSError, ValueError):
                continue
            tokens = reply.get("tokens") if isinstance(reply, dict) else None
            if isinstance(tokens, list) and tokens and all(isinstance(t, int) for t in tokens):
                return tokens[0] == self.prefix_id
        self.notes.append(f"{self.label}: no tokenize endpoint; taken to put the BOS first itself")
        return True

    # ------------------------------------------------------------------ scoring
    def logprobs(self, sequences: Sequence[Sequence[int]], advance: Advance = _noop,
                 texts: Sequence[str] | None = None) -> list[np.ndarray]:
        """`texts[i]`, when given, is sent instead of sequence i's decoded tokens: a text whose tokens begin with
        them (a whole document, of which the sequence is the first tokens); it needs `encode`."""
        check_sequences(sequences)
        for sequence in sequences:
            if int(sequence[0]) != self.prefix_id:
                raise ValueError(f"a server scores sequences that start with the prefix token {self.prefix_id}, "
                                 f"not {int(sequence[0])}")
        if texts is not None and (self.encode is None or len(texts) != len(sequences)):
            raise ValueError("texts need the tokenizer's encode, one text per sequence")
        lead = "" if self.adds_bos() else self.prefix_text
        if texts is None:
            prompts = [lead + self.decode([int(t) for t in s[1:]]) for s in sequences]
            totals = [len(s) - 1 for s in sequences]
        else:
            assert self.encode is not None
            prompts = [lead + t for t in texts]
            totals = [len(self.encode(t)) for t in texts]
            for sequence, total in zip(sequences, totals, strict=True):
                if total < len(sequence) - 1:
                    raise ValueError(f"a text of {total} tokens cannot hold a sequence of {len(sequence) - 1}")
        out: list[np.ndarray] = []
        start = 0
        while start < len(sequences):
            size = min(self.batch, len(sequences) - start)
            chunk = range(start, start + size)
            values = self._complete([prompts[i] for i in chunk], [totals[i] for i in chunk],
                                    [len(sequences[i]) - 1 for i in chunk])
            if values is None:  # the server refused a list of prompts: one at a time from now on
                self.notes.append(f"{self.label}: the server takes one prompt per request; batch 1 from now on")
                self.batch = 1
                continue
            out.extend(values)
            advance(size)
            start += size
        return out

    def _complete(self, texts: list[str], totals: list[int], counts: list[int]) -> list[np.ndarray] | None:
        body: dict[str, Any] = {"prompt": texts[0] if len(texts) == 1 else texts, "max_tokens": 1, "echo": True,
                                "logprobs": 1, "temperature": 0.0}
        if self.model:
            body["model"] = self.model
        if len(texts) > 1:
            try:
                reply = self._post("/v1/completions", body, retry=False)
            except ServerError:
                return None
        else:
            reply = self._post("/v1/completions", body)
        choices = reply.get("choices") if isinstance(reply, dict) else None
        if not isinstance(choices, list) or len(choices) != len(texts):
            if len(texts) > 1:
                return None
            raise ServerError(f"{self.base}/v1/completions answered without one choice for the prompt")
        ordered = sorted(choices, key=lambda c: c.get("index", 0) if isinstance(c, dict) else 0)
        return [self._values(choice, total)[:n] for choice, total, n in zip(ordered, totals, counts, strict=True)]

    def _values(self, choice: Any, n: int) -> np.ndarray:
        """The n prompt log-probabilities of t1 .. tn from one choice (module docstring)."""
        logprobs = choice.get("logprobs") if isinstance(choice, dict) else None
        values = logprobs.get("token_logprobs") if isinstance(logprobs, dict) else None
        if not isinstance(values, list) or not any(v is not None for v in values):
            raise ServerError(f"{self.base} {NO_LOGPROBS}")
        if len(values) == n + 2:  # vLLM: the BOS echoed, with no value
            picked = values[1 : n + 1]
        elif len(values) == n + 1:  # llama-cpp-python: the BOS dropped, t1 without a value
            picked = values[:n]
        else:
            raise ServerError(f"{self.base} scored a prompt of {n} tokens as {len(values) - 1} (with the BOS: "
                              f"{len(values) - 2}): it tokenizes the text differently from the tokenizer given")
        return np.asarray([math.nan if v is None else float(v) for v in picked], dtype=np.float64)

    def close(self) -> None:
        return None


def _detail(exc: urllib.error.HTTPError) -> str:
    """': <the first line of the server's message>' or ''."""
    try:
        text = exc.read().decode("utf-8", "replace").strip()
    except OSError:
        return ""
    if not text:
        return ""
    try:
        data = json.loads(text)
        if isinstance(data, dict):
            inner = data.get("error", data.get("detail", data))
            if isinstance(inner, dict):
                inner = inner.get("message", inner)
            text = str(inner)
    except ValueError:
        pass
    line = text.splitlines()[0] if text.splitlines() else text
    return f": {line[:200]}"
