"""The training losses of quantization-aware training, on calibration text only.

    kl = distillation_kl(student_logits, teacher_logits)     # nats per token, KL(teacher || student)
    nll = next_token_loss(logits, tokens)                    # nats per token, cross-entropy of the next token

Why distillation is the default. The goal of the trained model is to compute what the float model computes,
not to fit the calibration text: the float model's whole next-token distribution at every position is the
target (every vocabulary entry carries signal, not one label per token), and a loss of 0 means the quantized
model reproduces the float one there. The next-token loss (`--loss nll`) fine-tunes toward the calibration
text itself: it can lower perplexity on text like it while moving the model away from the float one, which is
what the paired evaluation against the float model then measures.

Both are means over the predicted positions (all positions for the KL, all but the last for the next-token
loss), computed in float32 from log-softmax.
"""

from __future__ import annotations

from typing import Any

LOSSES = ("kl", "nll")


def check_loss(name: str) -> str:
    key = str(name).strip().lower()
    if key not in LOSSES:
        raise ValueError(f"--loss must be one of {', '.join(LOSSES)} (kl: distillation from the float model; nll: "
                         f"next-token loss on the calibration text), got {name!r}")
    return key


def distillation_kl(student_logits: Any, teacher_logits: Any) -> Any:
    """Mean over positions of KL(p_teacher || p_student) = sum_v p_t (log p_t - log p_s), in nats per token."""
    import torch

    log_s = torch.log_softmax(student_logits.float(), dim=-1)
    log_t = torch.log_softmax(teacher_logits.float(), dim=-1)
    per_token = (log_t.exp() * (log_t - log_s)).sum(dim=-1)
    return per_token.mean()


def next_token_loss(logits: Any, tokens: Any) -> Any:
    """Mean cross-entropy of token t+1 given the logits at t, in nats per token."""
    import torch

    if tokens.shape[-1] < 2:
        raise ValueError("the next-token loss needs sequences of at least 2 tokens")
    flat = logits[:, :-1, :].float().reshape(-1, logits.shape[-1])
    return torch.nn.functional.cross_entropy(flat, tokens[:, 1:].reshape(-1))
