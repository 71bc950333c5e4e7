"""Evaluation through the runtime that ships the model: llama.cpp in this process, or a server's completions
endpoint, scoring the same examples with the same paired statistics as `eval`, both sides from the runtime.

    scorer = LlamaCppScorer("q4_0.gguf")                          in-process llama.cpp (llama-cpp-python)
    scorer = ServerScorer("http://127.0.0.1:8080", model="q4_0")  an OpenAI-compatible /v1/completions
    scorer.logprobs([[bos, 17, 42, 9]])                            [array([lp(17), lp(42), lp(9)])] (float64)
    run = evaluate_runtime(reference, [candidate], lm, specs, max_drop=1.0)

    scorers   the Scorer protocol and the in-process llama.cpp scorer
    server    the server scorer (urllib: batching, retries, the prompt log-probabilities check)
    run       the evaluation: reference and candidates scored by their runtimes, compared as `eval` compares
    tokens    the tokenizer that turns the tasks' texts into the token ids every scorer gets
"""
