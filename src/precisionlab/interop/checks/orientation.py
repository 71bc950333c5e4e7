"""transposed: a weight stored (in, out) where (out, in) is expected, or codes transposed against their scales.

Two kinds of evidence:

  - the shapes the model's config implies (HF config.json: hidden_size, intermediate_size,
    num_attention_heads, num_key_value_heads, head_dim, vocab_size; GGUF: <arch>.embedding_length,
    feed_forward_length, attention.head_count, attention.head_count_kv, attention.key_length,
    vocab_size). A tensor whose name says what it is (q_proj / attn_q, down_proj / ffn_down, ...)
    and whose shape is the implied (out, in) reversed is flagged. This is the only evidence for a
    plain float weight, and it cannot see a square one (q_proj, o_proj of most models).
  - per-group scale statistics, which a transpose scrambles: a round-to-nearest quantizer puts every
    group's extreme on the top code (`codes.group_reach`: nearly all groups at the top), and codes
    transposed against their scales lose that, while reading them transposed back restores it.
    For a square quantized weight, a share of groups at the top of at least TRANSPOSED_TOP read
    transposed, and at least MARGIN more than as stored, is flagged. Where every group reaches the top
    either way (2-bit codes, 128 x 128 fp8 blocks) a transpose cannot be seen in the codes. A weight transposed together
    with its scales and zero points (quantized as the transposed matrix) is consistent and only the
    config can tell.
"""

from __future__ import annotations

import re
from typing import Any

from precisionlab.interop.checkpoint import CheckpointTensor
from precisionlab.interop.checks.result import CheckResult

TRANSPOSED_TOP = 0.98
"""Share of groups at the top needed, read transposed, to call the codes transposed (correct files: 1.0 as stored)."""
MARGIN = 0.05
"""...and by at least this much more than as stored (measured: transposed codes 0.80 to 0.84 as stored, 1.0 read
transposed; correct files 1.0 as stored, 0.41 to 0.84 read transposed, 1.0 for 2-bit codes and 128 x 128 blocks,
whose every group reaches the top either way)."""

HF_ROLES = {"q_proj": "q", "k_proj": "kv", "v_proj": "kv", "o_proj": "o", "gate_proj": "up", "up_proj": "up",
            "down_proj": "down", "embed_tokens": "embed", "lm_head": "embed"}
GGUF_ROLES = {"attn_q": "q", "attn_k": "kv", "attn_v": "kv", "attn_output": "o", "ffn_gate": "up", "ffn_up": "up",
              "ffn_down": "down", "token_embd": "embed", "output": "embed"}
_NAME = re.compile(r"(?:^|\.)([a-z_]+)\.weight$")


def model_dims(metadata: dict[str, Any]) -> dict[str, int]:
    """hidden, intermediate, heads, kv_heads, head_dim, vocab from an HF config or GGUF metadata (those found)."""
    cfg = metadata.get("model_config")
    out: dict[str, int] = {}
    if isinstance(cfg, dict):
        keys = {"hidden": "hidden_size", "intermediate": "intermediate_size", "heads": "num_attention_heads",
                "kv_heads": "num_key_value_heads", "head_dim": "head_dim", "vocab": "vocab_size"}
        out = {k: int(cfg[v]) for k, v in keys.items() if isinstance(cfg.get(v), int) and cfg[v] > 0}
    else:
        arch = metadata.get("general.architecture")
        if isinstance(arch, str):
            keys = {"hidden": "embedding_length", "intermediate": "feed_forward_length",
                    "heads": "attention.head_count", "kv_heads": "attention.head_count_kv",
                    "head_dim": "attention.key_length", "vocab": "vocab_size"}
            out = {k: int(metadata[f"{arch}.{v}"]) for k, v in keys.items()
                   if isinstance(metadata.get(f"{arch}.{v}"), int) and metadata[f"{arch}.{v}"] > 0}
    if "kv_heads" not in out and "heads" in out:
        out["kv_heads"] = out["heads"]
    if "head_dim" not in out and "heads" in out and "hidden" in out and out["hidden"] % out["heads"] == 0:
        out["head_dim"] = out["hidden"] // out["heads"]
    return out


def expected_shape(name: str, dims: dict[str, int]) -> tuple[int, int] | None:
    """The (out, in) shape the config implies for a weight named like a projection, or None."""
    match = _NAME.search(name)
    if match is None:
        return None
    role = HF_ROLES.get(match.group(1)) or GGUF_ROLES.get(match.group(1))
    need = {"q": ("heads", "head_dim", "hidden"), "kv": ("kv_heads", "head_dim", "hidden"),
            "o": ("heads", "head_dim", "hidden"), "up": ("intermediate", "hidden"), "down": ("intermediate", "hidden"),
            "embed": ("vocab", "hidden")}.get(role or "")
    if need is None or not all(k in dims for k in need):
        return None
    hidden, inter, vocab = dims.get("hidden", 0), dims.get("intermediate", 0), dims.get("vocab", 0)
    q = dims.get("heads", 0) * dims.get("head_dim", 0)
    kv = dims.get("kv_heads", 0) * dims.get("head_dim", 0)
    return {"q": (q, hidden), "kv": (kv, hidden), "o": (hidden, q), "up": (inter, hidden), "down": (hidden, inter),
            "embed": (vocab, hidden)}[str(role)]


def transposed(t: CheckpointTensor, checkpoint: Any = None) -> CheckResult | None:
    from precisionlab.interop.checks.codes import group_reach

    if len(t.shape) != 2 or t.layout == "unknown":
        return None
    rows, cols = t.shape
    metadata = getattr(checkpoint, "metadata", None) or {}
    expected = expected_shape(t.name, model_dims(metadata))
    evidence: dict[str, float | str] = {"shape": f"{rows}x{cols}"}
    if expected is not None:
        evidence["shape_from_config"] = f"{expected[0]}x{expected[1]}"
        if (rows, cols) == expected[::-1] and expected[0] != expected[1]:
            return CheckResult("transposed", True, evidence,
                               f"stored {rows} x {cols}, the config implies (out, in) = {expected[0]} x {expected[1]}: "
                               "the weight is stored transposed, (in, out)")
    if t.details.get("scale_fits_transpose"):
        return CheckResult("transposed", True, {**evidence, "scale_shape": f"{cols}x1"},
                           f"the scale holds one value per column, shaped ({cols}, 1) like the per-row scales of a "
                           f"{cols} x {rows} weight: the weight was stored transposed")
    stored = group_reach(t) if rows == cols else None
    flipped = group_reach(t, transpose=True) if stored is not None else None
    if stored is not None and flipped is not None:
        as_stored, as_flipped = stored.top_fraction, flipped.top_fraction
        evidence.update(groups_at_top=round(as_stored, 4), groups_at_top_read_transposed=round(as_flipped, 4))
        if as_flipped >= TRANSPOSED_TOP and as_flipped - as_stored >= MARGIN:
            return CheckResult("transposed", True, evidence,
                               f"{as_stored:.0%} of the scale groups have their extreme on the top code as stored, "
                               f"{as_flipped:.0%} with the codes read transposed: the codes were stored transposed "
                               "against their scales")
        what = f"{as_stored:.0%} of the scale groups reach the top code as stored, {as_flipped:.0%} read transposed"
    elif expected is None:
        return None
    else:
        what = "no square code matrix to read transposed"
    if expected is not None:
        fits = (rows, cols) == expected
        what = (f"the shape matches the config's {expected[0]} x {expected[1]}; " if fits else
                f"the config implies {expected[0]} x {expected[1]} (neither this shape nor its transpose); ") + what
    return CheckResult("transposed", False, evidence, what)
