"""llama.cpp itself (llama-cpp-python) against precisionlab's emulations of the same GGUF export.

    python3 benchmarks/bench_llamacpp.py --model smollm2-135m --scheme gguf_q4_0 --gguf q4_0.gguf \\
        [--docs 10] [--max-tokens 256] [--threads 2] [--kv f32] [--variants] [--float-gguf f32.gguf] [--matmuls]

The GGUF file is `precisionlab export --model M --scheme S --to gguf` of the same model and scheme. The same
token ids (the built-in perplexity documents, the prefix token then the text's tokens) are scored by
llama.cpp (logits_all) and by the transformers model with the export's weights installed: the weights
alone, and with llama.cpp's activation quantization (`+act=llamacpp`). Prints a markdown table: perplexity,
its relative difference from llama.cpp's, and the per-token log-probability differences against llama.cpp's.

--variants adds llama.cpp against itself: token by token, KV cache F16, flash attention on (a float-rounding
change inside llama.cpp; how far that moves its log-probabilities is the floor for any emulation).
--float-gguf F adds the float model against llama.cpp on an all-F32 export F (written first when missing):
no quantization on either side, so only the float ops are compared.
--matmuls adds the teacher-forced check of every quantized matmul on the first document (llama.cpp's own
input to each Linear, emulated, against llama.cpp's output; export.llamacpp_trace).
"""

from __future__ import annotations

import argparse
import datetime
import os
import shlex
import sys
from pathlib import Path


def _table(rows: list[list[object]]) -> None:
    print("| scores | perplexity | rel. diff. from llama.cpp | max abs d log p | mean abs d log p | RMS d log p "
          "| tokens |")
    print("|---|---|---|---|---|---|---|")
    for label, ppl, rel, mx, mean, rms, n in rows:
        print(f"| {label} | {ppl:.6f} | {rel:+.2e} | {mx:.2e} | {mean:.2e} | {rms:.2e} | {n} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--scheme", default="gguf_q4_0")
    parser.add_argument("--gguf", required=True)
    parser.add_argument("--docs", type=int, default=10)
    parser.add_argument("--max-tokens", type=int, default=256)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--kv", choices=["f32", "f16"], default="f32")
    parser.add_argument("--variants", action="store_true", help="llama.cpp against itself (module docstring)")
    parser.add_argument("--float-gguf", default=None, help="an all-F32 export, written when missing")
    parser.add_argument("--matmuls", action="store_true", help="teacher-forced check of each quantized matmul")
    args = parser.parse_args()
    import importlib.util

    if importlib.util.find_spec("llama_cpp") is None:
        print("llama-cpp-python: not installed; skipped (docs/export.md says how it builds)")
        return
    import numpy as np
    import torch

    from precisionlab.eval import data, scoring
    from precisionlab.export import Recipe
    from precisionlab.export.llamacpp import (
        compare,
        comparison_rows,
        llamacpp_logprobs,
        llamacpp_variants,
        model_logprobs,
    )
    from precisionlab.models import load_model

    torch.set_num_threads(args.threads)
    loaded = load_model(args.model)
    lm = scoring.CausalLM(loaded.model, loaded.tokenizer, loaded.max_length)
    texts = [d.text for d in data.ppl_documents(data.builtin_split(), args.docs)]
    sequences = scoring.ppl_sequences(lm, texts, args.max_tokens)
    runs = compare(loaded, Recipe("scheme", args.scheme, scheme=args.scheme), args.gguf, sequences, args.threads,
                   args.kv)
    if args.variants:
        runs = runs[:-1] + llamacpp_variants(args.gguf, sequences, args.threads) + runs[-1:]
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"{datetime.date.today().isoformat()}, load average {load:.1f}, {args.threads} threads: "
          f"`python3 benchmarks/bench_llamacpp.py {shlex.join(sys.argv[1:])}`")
    print()
    _table(comparison_rows(runs))
    if args.float_gguf:
        from precisionlab.export.llamacpp_trace import write_float_gguf

        if not Path(args.float_gguf).exists():
            write_float_gguf(loaded, args.float_gguf)
        float_runs = [model_logprobs(loaded.model, sequences, "float model (precisionlab)"),
                      llamacpp_logprobs(args.float_gguf, sequences, args.threads, "f32", label="llama.cpp, F32 export")]
        print()
        _table(comparison_rows(float_runs))
    if args.matmuls:
        from precisionlab.export.llamacpp_trace import capture_tensors, matmul_check

        layers = int(loaded.model.config.num_hidden_layers)
        rows = matmul_check(args.gguf, capture_tensors(args.gguf, sequences[0], args.threads), layers)
        print()
        print("| weight type | matmuls | tokens | max rel. diff. | median rel. diff. |")
        print("|---|---|---|---|---|")
        for kind in sorted({r[2] for r in rows}):
            rel = np.array([r[3] for r in rows if r[2] == kind])
            print(f"| {kind} | {rel.size} | {len(sequences[0])} | {rel.max():.2e} | {np.median(rel):.2e} |")


if __name__ == "__main__":
    main()
