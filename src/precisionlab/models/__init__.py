"""Real models: load (Hugging Face directory, GGUF file, packaged name), fake-quantize linear
weights with a quant scheme, and hooks for activation and KV-cache quantization.

torch and transformers are imported lazily, inside the functions that need them.
"""
