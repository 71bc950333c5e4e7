"""Fake-quantized forward against the plain transformers forward of the same weights, and quantization time.

    python3 benchmarks/bench_eval.py [--model smollm2-135m] [--batch 4 --tokens 256 --repeat 3] [--threads N]

1. Quantize every selected linear (default selection: the blocks' linears) under each scheme and
   time it (what `precisionlab eval` pays once per candidate).
2. For int4:g128: the quantized model's forward (precisionlab.models.quantized_weights, weights
   replaced in place) against a plain transformers model built from the same config and loaded
   with the same (dequantized) state dict, in the same process on the same batch: outputs are
   checked equal first (the count of differing logits is printed if not), then tokens/s of
   both and their ratio (target >= 0.9: the quantized forward does no per-call work).
3. The same forward with W8A8-style activation quantization (per-token int8 on every linear's
   input): the cost of per-call work, for comparison.
4. Peak resident memory with a candidate applied as the eval runner applies it (the originals spilled to
   a temporary directory, the model held once), over the fp32 model's bytes (the bound: 3x).

Times are printed, never asserted; on a shared machine they are noisy (best of --repeat, the two
forwards interleaved).
"""

from __future__ import annotations

import argparse
import resource
import tempfile
import time
from pathlib import Path

from _timing import timed

SCHEMES = ["int8:row", "int4:g128", "nvfp4", "mxfp4"]


def rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / 1e6  # Linux: KiB; MB of 10^6 bytes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--tokens", type=int, default=256)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--threads", type=int, default=None)
    args = parser.parse_args()

    import torch
    import transformers

    from precisionlab.eval import data
    from precisionlab.models import activation_quantization, load_model, quantize_weights, quantized_weights

    if args.threads:
        torch.set_num_threads(args.threads)
    before_load = rss_mb()
    loaded = load_model(args.model)
    model = loaded.model
    print(f"{loaded.name}: {loaded.parameters / 1e6:.1f}M parameters, {loaded.nbytes / 1e6:.1f} MB fp32, loaded in "
          f"{loaded.load_seconds:.1f} s{' (from the cache)' if loaded.from_cache else ''}; torch threads "
          f"{torch.get_num_threads()}")

    print("\nquantize every selected linear (once per candidate)")
    for scheme in SCHEMES:
        report = quantize_weights(model, scheme)
        print(f"  {scheme:<10} {len(report.quantized):>4} layers {report.seconds:7.2f} s  "
              f"{report.bits_per_weight:6.3f} bits/weight  {report.model_bytes / 1e6:7.1f} MB")
        report.restore()

    text = "\n\n".join(d.text for d in data.ppl_documents(data.builtin_split(), 16))
    ids = loaded.tokenizer(text, add_special_tokens=False)["input_ids"]
    need = args.batch * args.tokens
    ids = (ids * (need // len(ids) + 1))[:need]
    batch = torch.tensor(ids).reshape(args.batch, args.tokens)

    def forward(m: torch.nn.Module) -> torch.Tensor:
        with torch.inference_mode():
            return m(input_ids=batch, use_cache=False).logits

    tokens = batch.numel()
    forward(model)
    with tempfile.TemporaryDirectory() as spill, quantized_weights(model, "int4:g128", spill_dir=Path(spill)):
        forward(model)
        alone = rss_mb() - before_load  # the model (its quantized weights in place; originals on disk), one forward
        plain = transformers.AutoModelForCausalLM.from_config(model.config).eval()
        missing, unexpected = plain.load_state_dict(model.state_dict(), strict=False)
        plain.tie_weights()
        assert not unexpected and set(missing) <= {"lm_head.weight"}, (missing, unexpected)
        forward(plain)  # warm-up
        ours, theirs = forward(model), forward(plain)
        differing = int((ours != theirs).sum())
        print(f"\nforward of {args.batch} x {args.tokens} tokens, int4:g128 weights: outputs "
              + ("equal" if differing == 0 else f"differ in {differing} of {ours.numel()} logits"))
        # interleaved, best of --repeat each: a burst of load on a shared machine hits both alike
        t_ours = t_plain = float("inf")
        for _ in range(args.repeat):
            t_ours = min(t_ours, timed(lambda: forward(model), 1)[0])
            t_plain = min(t_plain, timed(lambda: forward(plain), 1)[0])
        with activation_quantization(model, "int8:row") as layers:
            forward(model)
            t_act = min(timed(lambda: forward(model), 1)[0] for _ in range(args.repeat))
    print(f"  quantized (precisionlab)  {tokens / t_ours:8.1f} tokens/s")
    print(f"  plain transformers        {tokens / t_plain:8.1f} tokens/s")
    print(f"  ratio quantized / plain   {t_plain / t_ours:8.3f}   (target >= 0.9)")
    print(f"  + per-token int8 activations on {len(layers)} linears (W8A8-style, per-call work): "
          f"{tokens / t_act:.1f} tokens/s, {t_act / t_ours:.2f}x the weight-only time")

    start = time.perf_counter()
    with quantized_weights(model, "int4:g128"):
        forward(model)
    print(f"\nquantize + one forward + restore: {time.perf_counter() - start:.2f} s")
    print(f"peak resident memory above the interpreter with one candidate applied: {alone:.0f} MB = "
          f"{alone * 1e6 / loaded.nbytes:.2f}x the fp32 model; with the interpreter {rss_mb():.0f} MB at the end "
          f"(the plain copy for the comparison included); a whole eval run: /usr/bin/time -v precisionlab eval ...")


if __name__ == "__main__":
    main()
