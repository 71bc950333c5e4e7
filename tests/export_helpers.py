"""Small random Hugging Face models with a byte-level BPE tokenizer, saved to a directory (no downloads):
what the export tests round-trip. Llama (SmolLM2's architecture) and Qwen2, each 2 blocks of width 64."""

from __future__ import annotations

from pathlib import Path

TEXTS = ["The quick brown fox jumps over the lazy dog. " * 3, "Numbers 1 2 3 and words, words, words.",
         "A small model reads a small text, and every weight is checked."] * 20
VOCAB = 300


def tiny_model_dir(folder: Path, model_type: str = "llama", tie: bool = True, seed: int = 0,
                   hidden: int = 64, intermediate: int = 128, layers: int = 2) -> Path:
    """A random model of `model_type` (llama, qwen2, gpt2) and its tokenizer, saved in `folder`."""
    import torch
    import transformers
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=VOCAB - 2, special_tokens=["<|endoftext|>", "<|im_start|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(TEXTS, trainer)
    fast = transformers.PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<|endoftext|>",
                                                eos_token="<|endoftext|>")
    torch.manual_seed(seed)
    common = dict(vocab_size=VOCAB, tie_word_embeddings=tie, bos_token_id=0, eos_token_id=0)
    if model_type == "gpt2":
        config = transformers.GPT2Config(n_embd=hidden, n_layer=layers, n_head=4, n_positions=128, **common)
        model = transformers.GPT2LMHeadModel(config)
    else:
        kind = {"llama": (transformers.LlamaConfig, transformers.LlamaForCausalLM),
                "qwen2": (transformers.Qwen2Config, transformers.Qwen2ForCausalLM)}[model_type]
        config = kind[0](hidden_size=hidden, intermediate_size=intermediate, num_hidden_layers=layers,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128, **common)
        model = kind[1](config)
    with torch.no_grad():  # norms away from 1 and biases away from 0, so a mix-up would show
        for name, p in model.named_parameters():
            if p.dim() == 1:
                p.copy_(torch.rand_like(p) + 0.5 if "norm" in name else torch.randn_like(p) * 0.1)
    model.save_pretrained(folder)
    fast.save_pretrained(folder)
    return folder
