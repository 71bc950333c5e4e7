"""precisionlab: exact number formats, honest quantization and measured numerical hazards.

    import precisionlab as pl
    fmt = pl.get_format("e4m3")
    y = pl.round_to(x, fmt)             # same type, dtype and device as x
    codes = pl.encode(x, "e2m1")        # uint8 codes
    pl.decode(codes, "e2m1")
    q = pl.quantize(w, "int4:g128")     # q.dequantize(), q.nbytes (scales included), q.scheme
    ckpt = pl.read_checkpoint(path)     # GGUF / GPTQ / AWQ / compressed-tensors / bnb / fp8, lazily

Importing precisionlab never imports torch, triton, matplotlib or rich.
"""

from precisionlab.formats import Encoding, FloatFormat, IntFormat, Overflow, get_format, list_formats
from precisionlab.quant import QuantizedTensor, Scheme, parse_scheme, quantize
from precisionlab.rounding import NanPolicy, Rounding, decode, encode, neighbours, round_to, ulp

__version__ = "0.1.0"


def __getattr__(name: str) -> object:
    """Lazy exports: `read_checkpoint` imports the interop readers only when first used."""
    if name == "read_checkpoint":
        from precisionlab.interop.reading import read_checkpoint

        return read_checkpoint
    raise AttributeError(f"module 'precisionlab' has no attribute {name!r}")


__all__ = [
    "Encoding",
    "FloatFormat",
    "IntFormat",
    "NanPolicy",
    "Overflow",
    "QuantizedTensor",
    "Rounding",
    "Scheme",
    "decode",
    "encode",
    "get_format",
    "list_formats",
    "neighbours",
    "parse_scheme",
    "quantize",
    "read_checkpoint",
    "round_to",
    "ulp",
]
