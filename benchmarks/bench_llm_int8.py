"""LLM.int8() on SmolLM2-135M: precisionlab against bitsandbytes' own, on the same real activations.

    python3 benchmarks/bench_llm_int8.py [--blocks 0,15,29 --tokens 1024 --thresholds 6,3,1 --repeat 5]

For every linear of the chosen blocks (7 each), on the inputs it sees for `tokens` tokens of the built-in
calibration text (all of them kept), against the fp16 layer output fp16(X) fp16(W)^T:
  ours      precisionlab's llm_int8_matmul, default (the paper's split: each token's absmax over the
            non-outlier columns; int8 weights dequantized to fp16 for the outlier columns)
  ours-bnb  the same with token_absmax="entries" (bitsandbytes' per-token scale)
  bnb       bitsandbytes' Linear8bitLt (has_fp16_weights=False, eval: its inference path) on CPU; it casts
            X and W to fp16 before quantizing and returns fp16
  int8      plain int8 (no fp16 columns: threshold infinity), the baseline
  w8 floor  the int8 row-wise weights with the activations left unquantized, X dequant(W8)^T: what the
            weights LLM.int8() stores cost alone, and what its output tends to as the threshold falls
            (every column fp16, every weight still int8); no threshold goes below it but by chance
Printed per layer and threshold: outlier columns (ours, and bnb's where the sets differ), the relative
Frobenius error of each, and how many layers are within 1e-2. First ours-bnb is compared with bnb
(outlier sets, differing weight and activation codes, the relative difference of the outputs), then,
at the first threshold, seconds per call of ours and of bnb (interleaved medians of `repeat`) and their
ratio. Times are printed, never asserted.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import warnings
from typing import Any

import numpy as np

from _timing import interleaved
from precisionlab.ptq import token_batches
from precisionlab.ptq.calibration import capture
from precisionlab.ptq.llm_int8 import fp16_output, int8_codes, llm_int8_matmul, quantize_weight
from precisionlab.ptq.structure import linear_names
from precisionlab.quant import quantize

BAR = 1e-2


def relative_error(reference: np.ndarray, approx: np.ndarray) -> float:
    return float(np.linalg.norm(approx - reference) / np.linalg.norm(reference))


def calibration_inputs(blocks: list[int], tokens: int) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """Each selected linear's inputs (tokens, in) float32 and weight (out, in) float32."""
    from precisionlab.eval.data import builtin_split, calibration_documents
    from precisionlab.models import load_model

    loaded = load_model("smollm2-135m")
    batches = token_batches(loaded.tokenizer, calibration_documents(builtin_split()), tokens, 512)
    names = linear_names(loaded.model, blocks)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # too few tokens for the widest layers' Hessians: not used here
        cap = capture(loaded.model, names, batches, keep=tokens)
    modules = dict(loaded.model.named_modules())
    inputs = {n: np.ascontiguousarray(cap.stats[n].samples, dtype=np.float32) for n in names}
    weights = {n: modules[n].weight.detach().float().numpy().copy() for n in names}
    if any(modules[n].bias is not None for n in names):
        raise SystemExit("error: this benchmark assumes bias-free linears (SmolLM2's are)")
    return inputs, weights


class BnbLayer:
    """bitsandbytes' LLM.int8() linear on CPU for one weight and threshold."""

    def __init__(self, weight: np.ndarray, threshold: float) -> None:
        import bitsandbytes as bnb
        import torch

        self.torch = torch
        layer = bnb.nn.Linear8bitLt(weight.shape[1], weight.shape[0], bias=False, has_fp16_weights=False,
                                    threshold=threshold)
        layer.weight = bnb.nn.Int8Params(torch.from_numpy(weight.copy()), requires_grad=False,
                                         has_fp16_weights=False)
        self.layer = layer.to("cpu").eval()  # the move quantizes the weight; eval: the inference path

    def __call__(self, x16: Any) -> Any:
        with self.torch.no_grad():
            return self.layer(x16)


def bnb_quant(a: np.ndarray, threshold: float = 0.0) -> tuple[np.ndarray, np.ndarray]:
    """bitsandbytes' int8 codes and outlier columns of fp16(a)."""
    import bitsandbytes.functional as bf
    import torch

    codes, _, cols = bf.int8_vectorwise_quant(torch.from_numpy(a).half(), threshold=threshold)
    return codes.numpy().astype(np.int64), (np.empty(0, np.int64) if cols is None else cols.numpy())


def away_from_ties(values: np.ndarray, ours: np.ndarray, theirs: np.ndarray) -> int:
    """How many differing codes are not at a rounding tie: the exact quotient values * 127 / row absmax (float64
    here, far finer than the window) more than 127 * 3 * 2^-24 (the two roundings' float32 error) from a
    half-integer."""
    rows, cols = np.nonzero(ours != theirs)
    q = values[rows, cols].astype(np.float64) * 127 / np.abs(values[rows]).max(axis=1).astype(np.float64)
    return int(np.count_nonzero(np.abs(np.abs(q - np.floor(q)) - 0.5) > 127 * 3 * 2.0**-24))


def fp16_values(a: np.ndarray) -> np.ndarray:
    return a.astype(np.float16).astype(np.float32)


def entries_codes(x: np.ndarray, threshold: float, cols: np.ndarray) -> np.ndarray:
    regular = x.copy()
    regular[np.abs(x) >= threshold] = 0.0
    codes = int8_codes(quantize(regular, "int8:row:scale=fp32")).copy()
    codes[:, cols] = 0
    return codes


def bench(blocks: list[int], tokens: int, thresholds: list[float], repeat: int) -> None:
    import torch

    inputs, weights = calibration_inputs(blocks, tokens)
    names = list(inputs)
    print(f"== LLM.int8() on SmolLM2-135M blocks {blocks}: {len(names)} linears, {tokens} calibration tokens each")
    print(f"   bitsandbytes {__import__('bitsandbytes').__version__}, torch {torch.__version__}, "
          f"{torch.get_num_threads()} threads, load average {' '.join(f'{v:.2f}' for v in os.getloadavg())}")

    rows: dict[float, list[dict[str, Any]]] = {t: [] for t in thresholds}
    plain: dict[str, float] = {}
    floor: dict[str, float] = {}
    check: list[str] = []
    for n in names:
        x, w = inputs[n], weights[n]
        wq = quantize_weight(w)
        reference = fp16_output(x, w)
        plain[n] = relative_error(reference, llm_int8_matmul(x, w, math.inf, wq).output)
        floor[n] = relative_error(reference, x.astype(np.float64) @ wq.dequantize().astype(np.float64).T)
        w_codes, _ = bnb_quant(w)
        w_differ = int(np.count_nonzero(int8_codes(wq) != w_codes))
        x16 = torch.from_numpy(x).half()
        for t in thresholds:
            ours = llm_int8_matmul(x, w, t, wq)
            ours_bnb = llm_int8_matmul(x, w, t, wq, token_absmax="entries")
            y_bnb = BnbLayer(w, t)(x16).double().numpy()
            a_codes, cols = bnb_quant(x, t)
            same_cols = np.array_equal(np.sort(cols), np.sort(ours.outlier_columns))
            a_differ = int(np.count_nonzero(entries_codes(x, t, ours.outlier_columns) != a_codes)) if same_cols else -1
            rows[t].append({"name": n, "cols": ours.outlier_columns.size, "bnb_cols": cols.size,
                            "ours": relative_error(reference, ours.output),
                            "ours_bnb": relative_error(reference, ours_bnb.output),
                            "bnb": relative_error(reference, y_bnb),
                            "vs": relative_error(y_bnb, ours_bnb.output)})
            if t == thresholds[0]:
                x_h, w_h = fp16_values(x), fp16_values(w)
                wq_h = quantize_weight(w_h)
                on16 = llm_int8_matmul(x_h, w_h, t, wq_h, token_absmax="entries")
                w_differ16 = int(np.count_nonzero(int8_codes(wq_h) != w_codes))
                same16 = np.array_equal(np.sort(cols), np.sort(on16.outlier_columns))
                a_codes16 = entries_codes(x_h, t, on16.outlier_columns)
                a_differ16 = int(np.count_nonzero(a_codes16 != a_codes))
                regular = np.where(np.abs(x_h) >= t, np.float32(0), x_h)
                off_tie = away_from_ties(w_h, int8_codes(wq_h), w_codes) + away_from_ties(regular, a_codes16, a_codes)
                check.append(f"  {n:34s} outlier sets {'equal' if same_cols else 'DIFFER'}; differing codes: "
                             f"weights {w_differ} / {w.size}, activations {a_differ if a_differ >= 0 else '-'} / "
                             f"{x.size}; |ours-bnb - bnb| / |bnb| {rows[t][-1]['vs']:.1e}\n"
                             f"  {'':34s} on fp16 inputs: outlier sets {'equal' if same16 else 'DIFFER'}; "
                             f"weights {w_differ16}, "
                             f"activations {a_differ16} "
                             f"({off_tie} not at a tie); "
                             f"|ours-bnb - bnb| / |bnb| {relative_error(y_bnb, on16.output):.1e}")

    print(f"\n-- ours-bnb against bitsandbytes at threshold {thresholds[0]} (outputs compared before anything is "
          "timed); 'on fp16 inputs': ours-bnb given fp16(X) and fp16(W), which is what bitsandbytes quantizes")
    print("\n".join(check))
    print("   (bitsandbytes rounds x * fp32(127 / absmax) of fp16(x), precisionlab the exact quotient x / fp32(absmax /"
          " 127) of the float32 input: on float32 inputs codes differ where fp16 rounding moves x across a rounding"
          " boundary, on fp16 inputs only at ties; bitsandbytes' output is fp16, 2^-12 relative)")

    for t in thresholds:
        print(f"\n-- threshold {t}: relative error against the fp16 layer output")
        print(f"  {'layer':34s} {'outliers':>8s} {'ours':>8s} {'ours-bnb':>8s} {'bnb':>8s} {'int8':>8s} "
              f"{'w8 floor':>8s}")
        for r in rows[t]:
            cols = f"{r['cols']}" if r["cols"] == r["bnb_cols"] else f"{r['cols']}/{r['bnb_cols']}"
            print(f"  {r['name']:34s} {cols:>8s} {r['ours']:8.4f} {r['ours_bnb']:8.4f} {r['bnb']:8.4f} "
                  f"{plain[r['name']]:8.4f} {floor[r['name']]:8.4f}")
        with_out = [r for r in rows[t] if r["cols"]]
        within = {k: sum(r[k] <= BAR for r in rows[t]) for k in ("ours", "ours_bnb", "bnb")}
        within_out = {k: sum(r[k] <= BAR for r in with_out) for k in ("ours", "ours_bnb", "bnb")}
        print(f"  within {BAR:g}: ours {within['ours']}, ours-bnb {within['ours_bnb']}, bnb {within['bnb']}, "
              f"int8 {sum(v <= BAR for v in plain.values())} of {len(rows[t])} layers; of the {len(with_out)} "
              f"with outlier columns: ours {within_out['ours']}, ours-bnb {within_out['ours_bnb']}, "
              f"bnb {within_out['bnb']}")
        if with_out:
            lo = min(r["bnb"] for r in with_out)
            hi = max(r["bnb"] for r in with_out)
            print(f"  bnb on the layers with outliers: {lo:.4f}-{hi:.4f}; ours {min(r['ours'] for r in with_out):.4f}-"
                  f"{max(r['ours'] for r in with_out):.4f}")
            above = [r["name"] for r in with_out if floor[r["name"]] > BAR]
            print(f"  of those, {len(above)} have a w8 floor above {BAR:g} (no threshold can bring them within it): "
                  f"{', '.join(above) or 'none'}")
        under = [1 - r[k] / floor[r["name"]] for r in rows[t] for k in ("ours", "ours_bnb", "bnb")
                 if r[k] < floor[r["name"]]]
        print(f"  results below their layer's w8 floor: {len(under)} of {3 * len(rows[t])}"
              + (f", by at most {max(under):.1e} of it (relative)" if under else ""))

    t = thresholds[0]
    print(f"\n-- seconds per call at threshold {t} (interleaved medians of {repeat}; measured under load, load "
          f"average {' '.join(f'{v:.2f}' for v in os.getloadavg())})")
    print(f"  {'layer':34s} {'ours':>9s} {'bnb':>9s} {'ours/bnb':>9s}")
    total = {"ours": 0.0, "bnb": 0.0}
    for n in names:
        x, w = inputs[n], weights[n]
        wq = quantize_weight(w)
        layer = BnbLayer(w, t)
        x16 = torch.from_numpy(x).half()
        times = interleaved({"ours": lambda x=x, w=w, wq=wq: llm_int8_matmul(x, w, t, wq),
                             "bnb": lambda layer=layer, x16=x16: layer(x16)}, repeat)
        total["ours"] += times["ours"]
        total["bnb"] += times["bnb"]
        print(f"  {n:34s} {times['ours']:9.4f} {times['bnb']:9.4f} {times['ours'] / times['bnb']:9.2f}")
    print(f"  {'all layers':34s} {total['ours']:9.4f} {total['bnb']:9.4f} {total['ours'] / total['bnb']:9.2f}")
    print("  (ours: numpy, exact int8 sums in float64 BLAS, activations quantized per call; bnb: torch._int_mm "
          "where the CPU has AVX-512, else a float32 matmul, the fp16 input quantized per call; weights quantized "
          "once, outside the timing, in both)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--blocks", default="0,15,29")
    parser.add_argument("--tokens", type=int, default=1024)
    parser.add_argument("--thresholds", default="6,3,1")
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    try:
        import bitsandbytes  # noqa: F401
    except ImportError:
        print("error: this benchmark compares with bitsandbytes: pip install bitsandbytes", file=sys.stderr)
        sys.exit(2)
    try:
        blocks = [int(b) for b in args.blocks.split(",")]
        thresholds = [float(t) for t in args.thresholds.split(",")]
        if not all(t > 0 for t in thresholds) or args.tokens < 1 or args.repeat < 1:
            raise ValueError("thresholds, --tokens and --repeat must be positive")
        bench(blocks, args.tokens, thresholds, args.repeat)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    main()
