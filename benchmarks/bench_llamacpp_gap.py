"""Why `+act=llamacpp` and llama.cpp differ by ~0.06 nats per token on SmolLM2 (docs/export.md, issue 35).

    python3 benchmarks/bench_llamacpp_gap.py --gguf q8_0.gguf --scheme gguf_q8_0 [--docs 10] [--tokens 64]

Two measurements:

1. The emulation against itself: the transformers RMS norm recomputed as ggml's C computes it (a float64 sum of
   float32 squares, a correctly rounded float32 1.0f/sqrtf; torch's float32 sqrt is one ulp off on some
   rows), a one-ulp change, for the float model, the weights-only emulation and `+act=llamacpp`: mean / max
   |d log p| between the two norms, over the built-in ppl documents.
2. The code-flip census on the first `--tokens` tokens of document 0: per layer, how many of the Q8_0-rounded
   activations at each Linear's input (Q/K/V, wo, gate/up, down, the head) differ by more than half a block
   step between the emulation (ggml-rounded norm) and llama.cpp's own tensors (export.llamacpp_trace).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import os
import shlex
import sys
from collections.abc import Iterator
from typing import Any


@contextlib.contextmanager
def ggml_rms_norm() -> Iterator[None]:
    """LlamaRMSNorm computed as ggml_compute_forward_rms_norm_f32 does, while open."""
    import torch
    from transformers.models.llama import modeling_llama

    original = modeling_llama.LlamaRMSNorm.forward

    def forward(self: Any, hidden: Any) -> Any:
        x = hidden.float()
        mean = ((x * x).double().sum(-1, keepdim=True) / x.shape[-1]).float()
        root = torch.sqrt((mean + torch.tensor(self.variance_epsilon, dtype=torch.float32)).double()).float()
        return (x * (1.0 / root.double()).float()) * self.weight

    modeling_llama.LlamaRMSNorm.forward = forward
    try:
        yield
    finally:
        modeling_llama.LlamaRMSNorm.forward = original


def _three(loaded: Any, sequences: list[list[int]], scheme: str) -> dict[str, Any]:
    from precisionlab.export import Recipe
    from precisionlab.export.llamacpp import model_logprobs
    from precisionlab.export.plan import prepare
    from precisionlab.models.llamacpp import block_mins, linear_types, llamacpp_activations

    out = {"float model": model_logprobs(loaded.model, sequences, "f")}
    prepared = prepare(loaded, Recipe("scheme", scheme, scheme=scheme))
    try:
        out["weights emulated"] = model_logprobs(loaded.model, sequences, "w")
        types = linear_types(loaded, prepared.report, scheme)
        with llamacpp_activations(loaded.model, types, block_mins(prepared.report, loaded.model, scheme, types)):
            out["+act=llamacpp"] = model_logprobs(loaded.model, sequences, "a")
    finally:
        prepared.restore()
    return out


def census(loaded: Any, gguf_path: str, scheme: str, tokens: list[int]) -> list[tuple[str, list[str]]]:
    """Per layer: 'flipped / total' at each quantized input (module docstring, 2)."""
    import numpy as np
    import torch

    from precisionlab.export import Recipe
    from precisionlab.export.llamacpp_trace import capture_tensors
    from precisionlab.export.plan import prepare
    from precisionlab.models.llamacpp import linear_types, llamacpp_activations
    from precisionlab.quant import ggml_act

    theirs = capture_tensors(gguf_path, tokens)
    mine: dict[str, np.ndarray] = {}
    handles = []

    def keep(name: str) -> Any:
        def hook(_module: Any, args: tuple[Any, ...]) -> None:
            mine[name] = args[0].detach().float().numpy().reshape(-1, args[0].shape[-1]).copy()
        return hook

    inputs = (("attn_norm", "self_attn.q_proj"), ("kqv_out", "self_attn.o_proj"), ("ffn_norm", "mlp.gate_proj"),
              ("ffn_swiglu", "mlp.down_proj"))
    modules = dict(loaded.model.named_modules())
    layers = int(loaded.model.config.num_hidden_layers)
    for i in range(layers):
        for node, module in inputs:
            handles.append(modules[f"model.layers.{i}.{module}"].register_forward_pre_hook(keep(f"{node}-{i}"),
                                                                                         prepend=True))
    handles.append(loaded.model.lm_head.register_forward_pre_hook(keep("result_norm"), prepend=True))
    prepared = prepare(loaded, Recipe("scheme", scheme, scheme=scheme))
    try:
        types = linear_types(loaded, prepared.report, scheme)
        with ggml_rms_norm(), llamacpp_activations(loaded.model, types), torch.inference_mode():
            loaded.model(input_ids=torch.tensor([tokens]), use_cache=False)
    finally:
        prepared.restore()
        for h in handles:
            h.remove()
    rows = []
    groups = [(str(i), [f"{n}-{i}" for n, _ in inputs]) for i in range(layers)] + [("head", ["result_norm"])]
    for label, names in groups:
        cells = []
        for name in names:
            a = ggml_act.q8_0(mine[name])
            b = ggml_act.q8_0(theirs[name][-1].reshape(mine[name].shape)).reshape(a.shape[0], -1, 32)
            step = np.abs(b).max(-1, keepdims=True) / 127
            cells.append(f"{int((np.abs(a.reshape(b.shape) - b) > 0.5 * step).sum())} / {a.size}")
        rows.append((label, cells))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--scheme", default="gguf_q8_0")
    parser.add_argument("--gguf", required=True, help="the export of --model at --scheme (Q8_0 or Q4_0 weights)")
    parser.add_argument("--docs", type=int, default=10)
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    import importlib.util

    if importlib.util.find_spec("llama_cpp") is None:
        print("llama-cpp-python: not installed; skipped (docs/export.md says how it builds)")
        return
    import numpy as np
    import torch

    from precisionlab.eval import data, scoring
    from precisionlab.models import load_model

    torch.set_num_threads(args.threads)
    loaded = load_model(args.model)
    lm = scoring.CausalLM(loaded.model, loaded.tokenizer, loaded.max_length)
    texts = [d.text for d in data.ppl_documents(data.builtin_split(), args.docs)]
    sequences = scoring.ppl_sequences(lm, texts, 256)
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"{datetime.date.today().isoformat()}, load average {load:.1f}, {args.threads} threads: "
          f"`python3 benchmarks/bench_llamacpp_gap.py {shlex.join(sys.argv[1:])}`")
    print()
    plain = _three(loaded, sequences, args.scheme)
    with ggml_rms_norm():
        exact = _three(loaded, sequences, args.scheme)
    print("| scores | ggml-rounded RMS norm against torch's: mean abs d log p | max abs d log p | tokens |")
    print("|---|---|---|---|")
    for label, run in plain.items():
        d = np.concatenate(exact[label].logprobs) - np.concatenate(run.logprobs)
        print(f"| {label} | {np.abs(d).mean():.2e} | {np.abs(d).max():.2e} | {d.size} |")
    print()
    print(f"Q8_0 activations more than half a step apart, first {args.tokens} tokens of document 0:")
    print()
    print("| layer | Q/K/V input | wo input | gate/up input | down input |")
    print("|---|---|---|---|---|")
    for label, cells in census(loaded, args.gguf, args.scheme, sequences[0][: args.tokens]):
        print(f"| {label} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
