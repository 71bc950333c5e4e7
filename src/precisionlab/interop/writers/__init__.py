"""Writers of other toolkits' formats, through the ecosystem's own libraries (the readers' inverse).

    gguf_tensors  a QuantizedTensor as the bytes of its GGML type (which type holds a scheme, and a float
                  array's values in F32 / F16 / BF16, are quant.ggml_types')
    gguf_file     a GGUF file through `gguf.GGUFWriter`: key-value pairs and tensors, written whole
    compressed    a QuantizedTensor as compressed-tensors' stored tensors, through its compressors, and the
                  `quantization_config` that describes them

Arrays and schemes in, files and byte arrays out: which tensors a model exports, and under which names, is
the export package's business (precisionlab.export). Peers (gguf, torch, compressed-tensors) are imported
lazily, inside the functions that need them.
"""
