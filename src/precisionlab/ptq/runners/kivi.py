"""KIVI over a model: per attention layer the K/V reconstruction error of KIVI (keys per channel, values per
token) against per-token keys and values at the same bits, on the calibration text's cache; with evaluation
texts, the KL of decoding over a KIVI cache against the float model, its interval (resampling texts) and a
verdict against the declared max_kl (`eval.stats.verdict`, the perplexity rule: lower is better)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from precisionlab import peers
from precisionlab.ptq import kivi as kivi_mod
from precisionlab.ptq.calibration import cache_keyword
from precisionlab.ptq.measure import MemoryMeter
from precisionlab.ptq.records import LayerRecord, PTQResult
from precisionlab.ptq.runners.common import Progress


def run_kivi(model: Any, method: str, scheme: str, names: Sequence[str], calibration: Sequence[Any],
             evaluation: Sequence[Any] | None, opts: dict[str, Any], meter: MemoryMeter,
             progress: Progress | None) -> PTQResult:
    """Per attention layer: K/V reconstruction error of KIVI against per-token keys and values at the same
    bits, on the calibration text's cache; with `evaluation` (long texts), the KL of decoding over a KIVI
    cache (see `kl_summary`)."""
    torch = peers.torch("KIVI")
    from transformers.cache_utils import DynamicCache

    config = kivi_mod.kivi_config(scheme, int(opts["group"]), int(opts["residual"]))
    wanted = sorted({n.rsplit(".", 1)[0] for n in names if n.rsplit(".", 1)[-1] in ("k_proj", "v_proj")})
    result = PTQResult(method, scheme, [])
    sums: dict[int, list[float]] = {}
    tokens = 0
    with meter.section() as sec:
        for batch in calibration:
            ids = batch["input_ids"] if isinstance(batch, dict) else batch
            cache = DynamicCache()
            with torch.no_grad():
                model(input_ids=ids, use_cache=True, **{cache_keyword(model): cache})
            tokens += int(ids.numel())
            for li, layer in enumerate(cache.layers):
                k, v = getattr(layer, "keys", None), getattr(layer, "values", None)
                if k is None or v is None:
                    continue
                k, v = k.float(), v.float()
                k_hat, v_hat = kivi_mod.kivi_quantize(k, v, config)
                k_tok = per_token_keys(k, config)
                acc = sums.setdefault(li, [0.0] * 5)
                acc[0] += float(((k_hat - k) ** 2).sum())
                acc[1] += float(((v_hat - v) ** 2).sum())
                acc[2] += float(((k_tok - k) ** 2).sum())
                acc[3] += float((k**2).sum())
                acc[4] += float((v**2).sum())
    result.calibration_tokens = tokens
    attention = attention_names(model, len(sums))
    for li, (dk, dv, dk_tok, kk, vv) in sorted(sums.items()):
        name = attention[li]
        if wanted and name not in wanted:
            continue
        record = LayerRecord(name, (), seconds=sec.seconds / max(len(sums), 1), peak_mb=sec.peak_mb, tokens=tokens)
        record.output_error = math.sqrt((dk + dv) / (kk + vv))
        record.rtn_output_error = math.sqrt((dk_tok + dv) / (kk + vv))
        record.details = {"key_error": math.sqrt(dk / kk), "value_error": math.sqrt(dv / vv),
                          "per_token_key_error": math.sqrt(dk_tok / kk)}
        result.layers.append(record)
    if evaluation:
        result.summary = kl_summary(model, evaluation, int(opts["prefill"]), config, opts["max_kl"])
        result.evaluation_tokens = int(result.summary.pop("tokens"))
    return result


def kl_summary(model: Any, evaluation: Sequence[Any], prefill: int, config: kivi_mod.KIVIConfig,
               max_kl: float | None) -> dict[str, Any]:
    """KL(reference || KIVI) per decoded token over the evaluation texts (each: prefill, then decode), its
    interval resampling texts (eval.stats.bootstrap_ratio), and a verdict against max_kl when given."""
    from precisionlab.eval.stats import bootstrap_ratio, verdict

    sums, counts, agree, tokens = [], [], [], 0
    total = None
    for batch in evaluation:
        ids = batch["input_ids"] if isinstance(batch, dict) else batch
        if ids.shape[1] < prefill + 2:
            raise ValueError(f"KIVI's KL needs evaluation texts longer than prefill + 1 = {prefill + 1} tokens; one "
                             f"has {ids.shape[1]} (lower the prefill option or give longer texts)")
        kl = kivi_mod.kivi_kl(model, ids[:1], prefill, config)
        sums.append(float(kl.kl.sum()))
        counts.append(kl.positions)
        agree.append(kl.top1_agreement * kl.positions)
        tokens += int(ids.shape[1])
        total = kl.bytes
    if total is None:
        raise ValueError("KIVI's KL needs at least one evaluation text")
    out: dict[str, Any] = {"kl_mean": sum(sums) / sum(counts), "top1_agreement": sum(agree) / sum(counts),
                           "decoded_positions": int(sum(counts)), "texts": len(sums),
                           "cache_bytes": total.total, "fp16_cache_bytes": total.fp16, "tokens": tokens}
    if len(sums) >= 2:
        interval = bootstrap_ratio(np.array(sums), np.array(counts, dtype=np.float64))
        out["kl_ci_low"], out["kl_ci_high"] = interval.low, interval.high
        if max_kl is not None:
            out["max_kl"] = float(max_kl)
            out["kl_verdict"] = verdict(interval, float(max_kl), higher_is_better=False)
    elif max_kl is not None:
        out["max_kl"] = float(max_kl)
        out["kl_verdict"] = "inconclusive"  # one text: no interval, so no verdict
    return out


def per_token_keys(keys: Any, config: kivi_mod.KIVIConfig) -> Any:
    """Keys quantized like values (per token, groups along head_dim), the same tokens as KIVI's keys:
    the baseline KIVI's per-channel keys improve on."""
    nk = config.key_tokens(keys.shape[2])
    out = keys.half().float()
    if nk:
        out[:, :, :nk] = kivi_mod.quantize_groups(keys[:, :, :nk], config.bits, config.group, axis=3)
    return out


def attention_names(model: Any, count: int) -> list[str]:
    """Names of the attention modules of the first `count` blocks (the cache's layer order)."""
    names = [n for n, m in model.named_modules() if n.endswith(("self_attn", "attention")) and hasattr(m, "forward")]
    return names[:count] if len(names) >= count else [f"layer.{i}" for i in range(count)]
