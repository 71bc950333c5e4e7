"""Post-training quantization methods (RTN, GPTQ, AWQ, SmoothQuant, LLM.int8(), KIVI), measured
layer by layer against round-to-nearest, and the escalation ladder.

torch is imported lazily, inside the functions that need them.
"""
