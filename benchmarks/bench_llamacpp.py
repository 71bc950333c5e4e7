"""llama.cpp itself (llama-cpp-python) against precisionlab's emulations of the same GGUF export.

    python3 benchmarks/bench_llamacpp.py --model smollm2-135m --scheme gguf_q4_0 --gguf q4_0.gguf \\
        [--docs 10] [--max-tokens 256] [--threads 2] [--kv f32]

The GGUF file is `precisionlab export --model M --scheme S --to gguf` of the same model and scheme. The same
token ids (the built-in perplexity documents, the prefix token then the text's tokens) are scored by
llama.cpp (logits_all) and by the transformers model with the export's weights installed: the weights
alone, and with llama.cpp's activation quantization (`+act=llamacpp`). Prints a markdown table: perplexity,
its relative difference from llama.cpp's, and the per-token log-probability differences against llama.cpp's.
"""

from __future__ import annotations

import argparse
import datetime
import os
import shlex
import sys


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--scheme", default="gguf_q4_0")
    parser.add_argument("--gguf", required=True)
    parser.add_argument("--docs", type=int, default=10)
    parser.add_argument("--max-tokens", type=int, default=256)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--kv", choices=["f32", "f16"], default="f32")
    args = parser.parse_args()
    import importlib.util

    if importlib.util.find_spec("llama_cpp") is None:
        print("llama-cpp-python: not installed; skipped (docs/export.md says how it builds)")
        return
    import torch

    from precisionlab.eval import data, scoring
    from precisionlab.export import Recipe
    from precisionlab.export.llamacpp import compare, comparison_rows
    from precisionlab.models import load_model

    torch.set_num_threads(args.threads)
    loaded = load_model(args.model)
    lm = scoring.CausalLM(loaded.model, loaded.tokenizer, loaded.max_length)
    texts = [d.text for d in data.ppl_documents(data.builtin_split(), args.docs)]
    sequences = scoring.ppl_sequences(lm, texts, args.max_tokens)
    runs = compare(loaded, Recipe("scheme", args.scheme, scheme=args.scheme), args.gguf, sequences, args.threads,
                   args.kv)
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"{datetime.date.today().isoformat()}, load average {load:.1f}: "
          f"`python3 benchmarks/bench_llamacpp.py {shlex.join(sys.argv[1:])}`")
    print()
    print("| scores | perplexity | rel. diff. from llama.cpp | max abs d log p | mean abs d log p | RMS d log p "
          "| tokens |")
    print("|---|---|---|---|---|---|---|")
    for label, ppl, rel, mx, mean, rms, n in comparison_rows(runs):
        print(f"| {label} | {ppl:.6f} | {rel:+.2e} | {mx:.2e} | {mean:.2e} | {rms:.2e} | {n} |")


if __name__ == "__main__":
    main()
