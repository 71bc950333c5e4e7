"""Quantization-aware training's loss curve on SmolLM2, measured on fixed windows instead of each step's own one.

    python3 benchmarks/bench_qat_curve.py --lr 3e-4,1e-4,3e-5 --steps 40 --every 10 [--blocks 1] [--scheme int4:g64]

Per learning rate: `qat.train` from round-to-nearest of the selected blocks' linears (the `precisionlab qat` run:
distillation KL, 128-token windows of the built-in calibration part), and every `--every` steps the mean KL to
the float model, computed here with the whole vocabulary (`sum p_float (log p_float - log p_model)`), on

- `train`: the first `--probe` calibration windows (fixed: the same windows at every point of the curve), and
- `dev`: `--dev` windows of built-in evaluation documents the evaluation does not read (documents 40 onward of the
  perplexity list: held-out, and not the 40 documents of the paired evaluation),

beside the logged loss (each step's own window, as `qat.loss_first` / `qat.loss_last` report it). The teacher
distributions are computed once from the float model. Prints one table row per point; nothing is asserted.
"""

from __future__ import annotations

import argparse
import os
import time
from typing import Any

import numpy as np


def _windows(tokenizer: Any, documents: list[Any], n_tokens: int, seq_len: int) -> list[Any]:
    from precisionlab.ptq import token_batches

    return [w for w in token_batches(tokenizer, documents, n_tokens, seq_len) if w.shape[-1] == seq_len]


def _kl(model: Any, windows: list[Any], teachers: list[Any]) -> float:
    import torch

    with torch.no_grad():
        values = []
        for tokens, log_t in zip(windows, teachers, strict=True):
            log_s = torch.log_softmax(model(tokens).logits.float(), dim=-1)
            values.append(float((log_t.exp() * (log_t - log_s)).sum(-1).mean()))
    return float(np.mean(values))


def _rtn(model: Any, blocks: list[int], scheme: str, probe: list[Any], teach_probe: list[Any], dev: list[Any],
         teach_dev: list[Any]) -> tuple[float, float, str]:
    """KL of round-to-nearest (the step-0 model), with its weights written in and put back; the median scale."""
    import torch

    from precisionlab.ptq.structure import linear_names
    from precisionlab.quant import quantize

    modules = dict(model.named_modules())
    saved, scales = {}, []
    with torch.no_grad():
        for name in linear_names(model, blocks):
            w = modules[name].weight
            saved[name] = w.detach().clone()
            q = quantize(w.detach().numpy(), scheme)
            scales.append(f"{name.split('.')[-1]} {float(np.median(q.scale_values)):.2e}")
            w.copy_(torch.from_numpy(q.dequantize()))
    try:
        return _kl(model, probe, teach_probe), _kl(model, dev, teach_dev), ", ".join(scales)
    finally:
        with torch.no_grad():
            for name, w in saved.items():
                modules[name].weight.copy_(w)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--lr", default="3e-4,1e-4,3e-5")
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--every", type=int, default=10)
    parser.add_argument("--blocks", default="1")
    parser.add_argument("--scheme", default="int4:g64")
    parser.add_argument("--calib-size", type=int, default=4096)
    parser.add_argument("--seq-len", type=int, default=128)
    parser.add_argument("--probe", type=int, default=6)
    parser.add_argument("--dev", type=int, default=6)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--model", default="smollm2-135m")
    args = parser.parse_args()

    import torch

    from precisionlab.eval.data import builtin_split, calibration_documents, ppl_documents
    from precisionlab.models import load_model
    from precisionlab.qat.run import run_qat
    from precisionlab.qat.train import TrainConfig

    torch.set_num_threads(args.threads)
    loaded = load_model(args.model)
    model, tok = loaded.model, loaded.tokenizer
    split = builtin_split()
    calibration = _windows(tok, calibration_documents(split), args.calib_size, args.seq_len)
    dev_docs = ppl_documents(split, 40 + 4 * args.dev)[40:]
    dev = _windows(tok, dev_docs, args.dev * args.seq_len, args.seq_len)[: args.dev]
    probe = calibration[: args.probe]
    with torch.no_grad():
        teach_probe = [torch.log_softmax(model(w).logits.float(), -1) for w in probe]
        teach_dev = [torch.log_softmax(model(w).logits.float(), -1) for w in dev]
    blocks = [int(b) for b in args.blocks.split(",")]
    rtn_train, rtn_dev, steps = _rtn(model, blocks, args.scheme, probe, teach_probe, dev, teach_dev)
    print(f"# {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, load {os.getloadavg()[0]:.1f}, "
          f"{args.threads} thread(s); {args.model} blocks {blocks} {args.scheme}; {len(calibration)} calibration "
          f"windows of {args.seq_len}; probe {len(probe)} train windows, dev {len(dev)} held-out windows")
    print(f"# grid step (the scale) per layer, median over groups: {steps}")
    print(f"# RTN (step 0): train KL {rtn_train:.4f}, dev KL {rtn_dev:.4f}")
    print("| lr | step | logged loss (its window) | train KL (fixed windows) | dev KL (held out) | s/step |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    for lr in [float(v) for v in args.lr.split(",")]:
        began = time.perf_counter()

        def tick(done: int, total: int, loss: float, lr: float = lr, began: float = began) -> None:
            if done % args.every == 0 or done == total:
                rate = (time.perf_counter() - began) / done
                print(f"| {lr:g} | {done} | {loss:.4f} | {_kl(model, probe, teach_probe):.4f} | "
                      f"{_kl(model, dev, teach_dev):.4f} | {rate:.1f} |", flush=True)

        result = run_qat(model, args.scheme, calibration, TrainConfig(steps=args.steps, lr=lr), blocks=blocks,
                         progress=tick)
        print(f"| {lr:g} | end | first {result.losses[0]:.4f}, last {result.losses[-1]:.4f} | codes changed "
              f"{result.findings()['qat.codes_changed'] * 100:.2f} % | | |", flush=True)


if __name__ == "__main__":
    main()
