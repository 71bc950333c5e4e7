"""The runtime evaluation without a runtime: the server scorer against small fake completions servers
(http.server, in a thread), and the paired statistics on scorers whose log-probabilities are set by hand.

The fake servers tokenize the prompt text with the same tokenizer as the client and answer with log-probabilities
from a rule written here (value_of), so every expected number is derived independently of the code under test."""

from __future__ import annotations

import json
import math
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from precisionlab.eval.runtime.server import ServerError, ServerScorer, base_url


class Tokens:
    """A stand-in tokenizer: one token per character, id = code point (the BOS is id 1, spelled <s>)."""

    bos = 1

    def encode(self, text: str) -> list[int]:
        ids = []
        if text.startswith("<s>"):
            ids.append(self.bos)
            text = text[3:]
        return ids + [ord(c) for c in text]

    def decode(self, ids: list[int]) -> str:
        return "".join("<s>" if i == self.bos else chr(i) for i in ids)


TOK = Tokens()


def value_of(context: list[int], token: int) -> float:
    """The fake model's log p(token | context)."""
    return -0.01 * (token % 17) - 0.001 * len(context)


def reply_for(text: str, style: str, adds_bos: bool) -> dict[str, Any]:
    ids = TOK.encode(text)
    if adds_bos:
        ids = [TOK.bos, *ids]
    values: list[float | None] = [None if i == 0 else value_of(ids[:i], t) for i, t in enumerate(ids)]
    values.append(-0.5)  # the generated token
    if style == "llama-cpp-python":  # the BOS dropped, the first token after it nulled
        values = values[1:]
        values[0] = None
    return {"text": text, "index": 0, "logprobs": {"token_logprobs": values, "tokens": ["x"] * len(values)}}


class Fake:
    """Behaviour of a fake server (set per test)."""

    def __init__(self, style: str = "llama-cpp-python", adds_bos: bool = True, lists: bool = False,
                 fail_first: int = 0, logprobs: bool = True, tokenize: bool = True) -> None:
        self.style, self.adds_bos, self.lists, self.fail_first = style, adds_bos, lists, fail_first
        self.logprobs, self.tokenize = logprobs, tokenize
        self.completions = 0
        self.bodies: list[dict[str, Any]] = []


@pytest.fixture
def server() -> Iterator[Callable[..., tuple[str, Fake]]]:
    servers: list[ThreadingHTTPServer] = []

    def start(**kwargs: Any) -> tuple[str, Fake]:
        fake = Fake(**kwargs)

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                return None

            def answer(self, code: int, data: Any) -> None:
                payload = json.dumps(data).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                if self.path == "/extras/tokenize":
                    if not fake.tokenize:
                        return self.answer(404, {"detail": "Not Found"})
                    ids = TOK.encode(body["input"])
                    return self.answer(200, {"tokens": [TOK.bos, *ids] if fake.adds_bos else ids})
                if self.path != "/v1/completions":
                    return self.answer(404, {"detail": "Not Found"})
                fake.completions += 1
                fake.bodies.append(body)
                if fake.completions <= fake.fail_first:
                    return self.answer(503, {"error": {"message": "loading the model"}})
                prompts = body["prompt"] if isinstance(body["prompt"], list) else [body["prompt"]]
                if len(prompts) > 1 and not fake.lists:
                    return self.answer(500, {"error": {"message": "AssertionError"}})
                choices = []
                for index, text in enumerate(prompts):
                    choice = reply_for(text, fake.style, fake.adds_bos)
                    choice["index"] = index
                    if not fake.logprobs:
                        choice["logprobs"] = None
                    choices.append(choice)
                return self.answer(200, {"object": "text_completion", "choices": choices[::-1]})  # any order

        httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        servers.append(httpd)
        threading.Thread(target=httpd.serve_forever, daemon=True).start()
        return f"http://127.0.0.1:{httpd.server_address[1]}", fake

    yield start
    for httpd in servers:
        httpd.shutdown()
        httpd.server_close()


SEQUENCES = [[TOK.bos, *TOK.encode("hello world")], [TOK.bos, *TOK.encode("abc")], [TOK.bos, *TOK.encode("xy z!")]]


def expected(sequence: list[int], first_known: bool) -> np.ndarray:
    values = [value_of(sequence[:i], t) for i, t in enumerate(sequence) if i > 0]
    if not first_known:
        values[0] = math.nan
    return np.asarray(values)


def scorer(url: str, **kwargs: Any) -> ServerScorer:
    return ServerScorer(url, TOK.decode, TOK.bos, "<s>", backoff=0.01, **kwargs)


def same(a: np.ndarray, b: np.ndarray) -> bool:
    return bool(np.array_equal(np.isnan(a), np.isnan(b)) and np.allclose(a[~np.isnan(a)], b[~np.isnan(b)],
                                                                           rtol=0, atol=1e-12))


@pytest.mark.parametrize("adds_bos", [True, False])
def test_llama_cpp_python_replies_give_every_token_after_the_first(server, adds_bos: bool) -> None:  # type: ignore[no-untyped-def]
    url, fake = server(adds_bos=adds_bos)
    got = scorer(url).logprobs(SEQUENCES)
    for values, sequence in zip(got, SEQUENCES, strict=True):
        assert same(values, expected(sequence, first_known=False))
    # a server that does not put the BOS first gets it as text, so it scores the same context
    prompts = [t for b in fake.bodies for t in (b["prompt"] if isinstance(b["prompt"], list) else [b["prompt"]])]
    assert prompts and all(t.startswith("<s>") != adds_bos for t in prompts)


def test_vllm_replies_batch_and_keep_the_first_token(server) -> None:  # type: ignore[no-untyped-def]
    url, fake = server(style="vllm", lists=True)
    s = scorer(url, batch=8)
    got = s.logprobs(SEQUENCES)
    assert fake.completions == 1 and len(fake.bodies[0]["prompt"]) == 3
    for values, sequence in zip(got, SEQUENCES, strict=True):
        assert same(values, expected(sequence, first_known=True))


def test_a_server_that_takes_one_prompt_is_asked_one_at_a_time(server) -> None:  # type: ignore[no-untyped-def]
    url, fake = server(lists=False)
    s = scorer(url, batch=2)
    got = s.logprobs(SEQUENCES)
    assert s.batch == 1 and fake.completions == 1 + 3  # the refused pair, then each prompt
    assert all(same(v, expected(q, False)) for v, q in zip(got, SEQUENCES, strict=True))
    assert any("one prompt per request" in n for n in s.notes)


def test_a_server_that_fails_once_is_retried(server) -> None:  # type: ignore[no-untyped-def]
    url, fake = server(fail_first=1)
    s = scorer(url, batch=1)
    got = s.logprobs(SEQUENCES[:1])
    assert fake.completions == 2
    assert same(got[0], expected(SEQUENCES[0], False))
    assert s.notes == [f"{s.label}: HTTP 503, retry 1 of 3 after 0.01 s"]


def test_retries_are_spent_then_one_line(server) -> None:  # type: ignore[no-untyped-def]
    url, fake = server(fail_first=10)
    with pytest.raises(ServerError, match=r"answered HTTP 503: loading the model$"):
        scorer(url, batch=1, retries=2).logprobs(SEQUENCES[:1])
    assert fake.completions == 3


def test_no_prompt_logprobs_is_a_clear_error(server) -> None:  # type: ignore[no-untyped-def]
    url, _ = server(logprobs=False)
    with pytest.raises(ServerError, match="returned no prompt log-probabilities"):
        scorer(url).logprobs(SEQUENCES[:1])


def test_a_server_that_tokenizes_otherwise_is_refused(server) -> None:  # type: ignore[no-untyped-def]
    url, _ = server()
    other = ServerScorer(url, lambda ids: TOK.decode(ids) + "??", TOK.bos, "<s>")  # two tokens more on the wire
    with pytest.raises(ServerError, match="tokenizes the text differently"):
        other.logprobs(SEQUENCES[:1])


def test_a_document_is_sent_whole_and_its_first_tokens_kept(server) -> None:  # type: ignore[no-untyped-def]
    """A perplexity document cut to n tokens goes as its whole text (decoding the cut ids need not tokenize back to
    them); a causal model's first n values do not depend on what follows, so those are kept."""
    url, fake = server()
    text = "hello world, and more after the cut"
    sequence = [TOK.bos, *TOK.encode(text)[:5]]
    got = scorer(url, encode=TOK.encode).logprobs([sequence], texts=[text])
    assert fake.bodies[-1]["prompt"] == text
    assert same(got[0], expected(sequence, first_known=False))
    with pytest.raises(ValueError, match="need the tokenizer"):
        scorer(url).logprobs([sequence], texts=[text])


def test_an_unreachable_server_is_one_line() -> None:
    with pytest.raises(ServerError, match=r"cannot reach http://127\.0\.0\.1:9/v1/completions after 2 tries"):
        scorer("http://127.0.0.1:9", retries=1).logprobs(SEQUENCES[:1])


@pytest.mark.parametrize(("url", "base"), [("http://h:8080", "http://h:8080"), ("http://h:8080/v1/", "http://h:8080"),
                                           ("https://h/x/v1/completions", "https://h/x")])
def test_base_url(url: str, base: str) -> None:
    assert base_url(url) == base


def test_base_url_refuses_what_is_no_url() -> None:
    with pytest.raises(ValueError, match="give an http"):
        base_url("localhost:8080")


# --------------------------------------------------------------------------- the evaluation's statistics
class Shifted:
    """A scorer whose log-probabilities are a base rule shifted by `delta` per token."""

    def __init__(self, label: str, delta: float = 0.0) -> None:
        self.label, self.source, self.delta = label, f"fake {label}", delta

    def logprobs(self, sequences: Any, advance: Any = lambda n: None, texts: Any = None) -> list[np.ndarray]:
        out = [np.asarray([value_of(list(s[:i]), t) - self.delta for i, t in enumerate(s) if i > 0]) for s in sequences]
        advance(len(sequences))
        return out

    def close(self) -> None:
        return None


def test_a_shift_of_every_log_probability_is_its_perplexity_increase() -> None:
    """A candidate whose every log-probability is delta lower has perplexity exp(delta) times the reference's."""
    from tests.model_helpers import require_peers

    require_peers()
    from precisionlab.eval.runtime.run import evaluate_runtime
    from precisionlab.eval.scoring import CausalLM
    from precisionlab.eval.tasks import resolve_tasks

    class Tokenizer:
        bos_token_id, eos_token_id, pad_token_id = TOK.bos, TOK.bos, TOK.bos

        def __call__(self, text: str, add_special_tokens: bool = False) -> dict[str, list[int]]:
            return {"input_ids": [ord(c) % 250 + 2 for c in text]}

    lm = CausalLM(None, Tokenizer(), 4096)
    specs = resolve_tasks(["ppl", "choice"], "causal-lm", size=0.1)
    delta = 0.02
    run = evaluate_runtime(Shifted("ref"), [Shifted("same"), Shifted("worse", delta)], lm, specs, max_drop=1.0,
                           n_resamples=200)
    ppl = run.task("ppl")
    assert ppl.outcome("same").comparisons["ppl"].interval.estimate == pytest.approx(0.0, abs=1e-12)
    assert ppl.outcome("same").comparisons["ppl"].verdict == "pass"
    worse = ppl.outcome("worse")
    assert worse.comparisons["ppl"].interval.estimate == pytest.approx(100 * (math.exp(delta) - 1), rel=1e-9)
    assert worse.comparisons["ppl"].verdict == "fail"  # 2.02 % against --max-drop 1
    assert worse.metrics["dlogp_mean"] == pytest.approx(delta, rel=1e-9)
    # every document scored from its second token: n - 1 tokens of a document of n
    docs = [len(lm.encode(d.text)[:512]) for d in ppl.spec.items]
    assert ppl.reference["tokens"] == sum(docs) - len(docs)
    choice = run.task("choice")  # the same log-probabilities: the same picks, no discordant pair
    assert choice.outcome("same").metrics == {"acc": choice.reference["acc"], "acc_norm": choice.reference["acc_norm"]}
    assert choice.outcome("same").comparisons["acc"].mcnemar.b == 0


def test_the_cli_says_one_line_when_the_server_gives_no_logprobs(run_cli, server, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    from tests.export_helpers import tiny_model_dir
    from tests.model_helpers import require_peers

    require_peers("tokenizers")
    url, _ = server(logprobs=False)
    model = tiny_model_dir(tmp_path / "m")
    result = run_cli("eval", "--server", url, "--reference", "f32", "--candidates", "q4_0", "--tokenizer",
                     str(model), "--tasks", "ppl", "--size", "0.1")
    assert result.exit_code == 2
    lines = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(lines) == 1 and "returned no prompt log-probabilities" in lines[0], result.stderr


@pytest.mark.parametrize(("args", "message"), [
    (("--runtime", "llamacpp", "--candidates", "a.gguf"), "needs --reference"),
    (("--server", "http://127.0.0.1:9", "--reference", "r"), "needs --candidates"),
    (("--server", "http://127.0.0.1:9", "--reference", "r", "--candidates", "c", "--schemes", "int8:row"),
     "--schemes belongs to the emulated evaluation"),
    (("--reference", "r.gguf",), "--reference belongs to a runtime evaluation"),
    (("--server", "ftp://x", "--reference", "r", "--candidates", "c"), "give an http"),
])
def test_runtime_usage_errors(run_cli, args: tuple[str, ...], message: str) -> None:  # type: ignore[no-untyped-def]
    result = run_cli("eval", *args)
    assert result.exit_code == 2
    assert message in result.stderr, result.stderr


def test_runtime_llamacpp_without_llama_cpp_python_is_one_line(run_cli, tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    import sys

    monkeypatch.setitem(sys.modules, "llama_cpp", None)  # `import llama_cpp` raises ImportError
    ref, cand = tmp_path / "f32.gguf", tmp_path / "q4_0.gguf"
    ref.write_bytes(b"GGUF")
    cand.write_bytes(b"GGUF")
    result = run_cli("eval", "--runtime", "llamacpp", "--reference", str(ref), "--candidates", str(cand))
    assert result.exit_code == 2
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert lines == ["error: --runtime llamacpp needs llama-cpp-python: CMAKE_ARGS=... pip install "
                     "'llama-cpp-python[server]==0.3.36' (docs/export.md says which build options work)"], lines
