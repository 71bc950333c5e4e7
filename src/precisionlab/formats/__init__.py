"""Number-format data model: descriptors, derived limits, and the registry."""

from precisionlab.formats.codebook import NF4, CodebookFormat
from precisionlab.formats.float_format import Encoding, FloatFormat, Overflow
from precisionlab.formats.int_format import IntFormat
from precisionlab.formats.p3109 import p3109_format, p3109_formats
from precisionlab.formats.registry import (
    FLOAT_FORMATS,
    INT_FORMATS,
    Format,
    format_names,
    get_float_format,
    get_format,
    list_formats,
)

__all__ = [
    "FLOAT_FORMATS",
    "INT_FORMATS",
    "NF4",
    "CodebookFormat",
    "Encoding",
    "FloatFormat",
    "Format",
    "IntFormat",
    "Overflow",
    "format_names",
    "get_float_format",
    "get_format",
    "list_formats",
    "p3109_format",
    "p3109_formats",
]
