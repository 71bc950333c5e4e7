"""One module per toolkit layout; each tensor a reader makes carries that reader's dequantizer
(`CheckpointTensor.decoder`). `interop.reading.read_checkpoint` picks the reader.

    gguf_file, gguf_blocks   GGUF (llama.cpp): F32/F16/BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q6_K
    packed_int               GPTQ (v1 / v2), AWQ GEMM, compressed-tensors pack-quantized
    nvfp4                    compressed-tensors nvfp4-pack-quantized
    fp8                      FP8 OCP / FNUZ weights with per-tensor, per-channel or block scales
    bnb                      bitsandbytes NF4 (nested absmax included)
    floats                   plain float tensors
    safetensors_files        safetensors files, shards, index JSON, configs
    layouts                  which layout a safetensors entry belongs to
"""
