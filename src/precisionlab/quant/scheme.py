"""Quantization scheme strings and the `Scheme` object; ``parse(str(s)) == s`` for every scheme.

Grammar (colon-separated)::

    ELEMENT[:GRANULARITY][:OPTION ...]      or      PRESET[:OPTION ...]

    ELEMENT      int8 int4 int2 uint8 uint4 e4m3 e5m2 e4m3fnuz e5m2fnuz e3m2 e2m3 e2m1 nf4, or a
                 signed IEEE P3109 format of 8 bits or fewer: binary<K>p<P>[s][e|f] (binary8p3se,
                 p3109_k8p4; binary8p4sf is e4m3fnuz and binary8p3sf e5m2fnuz)
    GRANULARITY  tensor (default) | row | col | g<N> (groups of N along the last axis)
                 | block<R>x<C> (2-D blocks over the last two axes) | tile1x<C>
                 (more integer ELEMENTs: int6 int5 uint6 uint5 uint2, GGUF's Q5 / Q6_K codes and KIVI's)
    OPTION       sym (default for signed elements) | asym (zero point)
                 scale=fp32|fp16|bf16|ue8m0|e4m3      (default: fp16 for integer elements,
                                                        fp32 for float and codebook elements)
                 outliers=K      keep the K rows with the largest amax in fp16
                 axis=N          the axis groups and tiles run along (default -1)
                 floor | rceil   power-of-two (ue8m0) scale rule: MX presets and scale=ue8m0
                                 (default floor, the OCP MX rule)
                 minscale=subnormal|normal   NVFP4 block-scale floor (default subnormal)
                 nonfinite=error|nan         a block holding NaN/inf: raise, or store a NaN scale
                 range=narrow|full|full_neg  symmetric signed integers (see INT_RANGES):
                                 narrow  codes ±(2^(b-1) - 1), s = amax / (2^(b-1) - 1)   (default;
                                         int4 ±7, amax/7: AWQ, ModelOpt)
                                 full    codes -2^(b-1) .. 2^(b-1) - 1, s = amax / (2^(b-1) - 1/2)
                                         (int4 -8..7, amax/7.5: torchao, GPTQ sym with zero point 8,
                                         compressed-tensors)
                                 full_neg  codes -2^(b-1) .. 2^(b-1) - 1, s = amax / 2^(b-1)
                                         (int4 amax/8: GGML Q4_0; a positive maximum clips to 7/8 amax)
                 scaleround=nearest|up       round each scale to nearest (default) or up into its
                                             format (fp32/fp16/bf16/e4m3): up never clips a block's max
                 bnb             nf4 codes chosen with bitsandbytes' quantize_4bit arithmetic (float32
                                 x * fp32(1 / absmax) against float32 midpoints), code for code; plain nf4
                                 takes the exact ratio against the exact midpoints
                 min=fp16|bf16|fp32          a FLOAT block offset (unsigned elements only), stored in that
                                             format beside the scale, instead of an integer zero point:
                                                 x_hat = fp32(fp32(q * s) + m),  q = 0 .. 2^b - 1
                                                 m = fmt(x_min),  s = (x_max - x_min) / (2^b - 1)
                                             (GGUF Q4_1 / Q5_1, KIVI); the integer zero point of asym is
                                                 x_hat = (q - z) * s   with z an integer code.
                                             Bytes: the min costs its format's width per block.

    PRESET       mxfp8 (= mxfp8_e4m3), mxfp8_e5m2, mxfp6 (= mxfp6_e2m3), mxfp6_e3m2, mxfp4,
                 mxint8, nvfp4, dsv3_weight (e4m3:block128x128:scale=fp32),
                 dsv3_act (e4m3:tile1x128:scale=fp32),
                 gguf_q8_0 gguf_q4_0 gguf_q4_1 gguf_q5_0 gguf_q5_1 gguf_q4_k gguf_q6_k (llama.cpp's GGML
                 block types: their layouts, bytes and reference quantizers; see GGUF_PRESETS)

`str(scheme)` writes the canonical spelling: defaults are left out, options come in a
fixed order, and a preset keeps its name.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, replace
from enum import Enum

from precisionlab.formats import get_format
from precisionlab.formats.p3109 import parse_p3109

INT_ELEMENTS = ("int8", "int4", "int2", "uint8", "uint4", "int6", "int5", "uint6", "uint5", "uint2")
FLOAT_ELEMENTS = ("e4m3", "e5m2", "e4m3fnuz", "e5m2fnuz", "e3m2", "e2m3", "e2m1")
CODEBOOK_ELEMENTS = ("nf4",)
ELEMENTS = INT_ELEMENTS + FLOAT_ELEMENTS + CODEBOOK_ELEMENTS
SCALE_FORMATS = ("fp32", "fp16", "bf16", "ue8m0", "e4m3")
MIN_FORMATS = ("fp32", "fp16", "bf16")
"""Formats a float block offset (min=) is stored in."""
ELEMENT_ALIASES = {
    "fp8": "e4m3", "fp8_e4m3": "e4m3", "float8_e4m3fn": "e4m3", "e4m3fn": "e4m3", "fp8_e5m2": "e5m2",
    "float8_e5m2": "e5m2", "fp6_e3m2": "e3m2", "fp6_e2m3": "e2m3", "fp4": "e2m1", "fp4_e2m1": "e2m1",
}


class Granularity(Enum):
    """How many elements share one scale (lowered to a block shape by `quant.blocks`)."""

    TENSOR = "tensor"
    ROW = "row"
    COL = "col"
    GROUP = "group"
    BLOCK = "block"
    TILE = "tile"


class MXRule(Enum):
    """How an MX block's power-of-two scale is chosen from the block amax.

    FLOOR (OCP MX v1.0): X = 2^(floor(log2 amax) - emax_elem); the block max can exceed
    the element max and is then clipped (957 -> 896 in MXFP8-E4M3).
    RCEIL (round the ideal scale up): X = 2^ceil(log2(amax / max_elem)); nothing clips,
    at up to one binade of lost resolution.
    """

    FLOOR = "floor"
    RCEIL = "rceil"


@dataclass(frozen=True)
class Scheme:
    """A fully resolved quantization scheme. Build one with `parse_scheme`."""

    element: str
    granularity: Granularity = Granularity.TENSOR
    group: int = 0
    """Group size (GROUP), or the block's column count (BLOCK, TILE)."""
    block_rows: int = 1
    """Rows of a BLOCK (1 for TILE)."""
    symmetric: bool = True
    scale: str = "fp16"
    outliers: int = 0
    axis: int = -1
    mx: MXRule | None = None
    tensor_scale: bool = False
    """NVFP4's second level: one fp32 scale per tensor above the e4m3 block scales."""
    minscale: str = "subnormal"
    nonfinite: str = "error"
    preset: str | None = None
    int_range: str = "narrow"
    """Symmetric signed-integer code range and scale rule (`INT_RANGES`)."""
    scale_round: str = "nearest"
    """How a scale is rounded into its format: "nearest" (even) or "up" (never below the ideal scale)."""
    min_format: str | None = None
    """Float block offset (min=): x_hat = q * s + m with m stored in this format; None for none."""
    ggml: str | None = None
    """The GGML type (gguf_* presets) whose llama.cpp reference quantizer chooses codes and scales."""
    super_block: int = 0
    """Two-level scales (K-quants): elements per super-block; its blocks' scales (and mins) are integer
    codes (`sub_scale`, `sub_min`) times one super-block scale (and min scale) in `scale` (`min_format`)."""
    sub_scale: str | None = None
    """Integer format of a two-level scheme's block-scale codes (Q4_K uint6, Q6_K int8)."""
    sub_min: str | None = None
    """Integer format of a two-level scheme's block-min codes (Q4_K uint6)."""
    codebook_rule: str = "exact"
    """How codebook (nf4) codes are chosen: "exact" (the exact ratio against exact midpoints) or "bnb"
    (bitsandbytes' float32 arithmetic, `formats.codebook.CodebookFormat.encode_scaled_fp32`)."""

    def __post_init__(self) -> None:
        problem = _problem(self)
        if problem:
            raise ValueError(f"invalid quantization scheme: {problem}")

    # ----------------------------------------------------------------- derived
    @property
    def is_mx(self) -> bool:
        return self.mx is not None

    @property
    def is_int(self) -> bool:
        return self.element in INT_ELEMENTS

    @property
    def is_codebook(self) -> bool:
        return self.element in CODEBOOK_ELEMENTS

    @property
    def is_float(self) -> bool:
        return self.element in FLOAT_ELEMENTS or p3109_element(self.element) is not None

    @property
    def has_zero_point(self) -> bool:
        """An integer zero point (asym without min=): x_hat = (q - z) * s."""
        return not self.symmetric and self.min_format is None

    @property
    def has_min(self) -> bool:
        """A float block offset (min=): x_hat = q * s + m."""
        return self.min_format is not None

    @property
    def is_two_level(self) -> bool:
        return self.super_block > 0

    def __str__(self) -> str:
        return format_scheme(self)


# --------------------------------------------------------------------------- validation
def p3109_element(name: str) -> str | None:
    """The element a P3109 format name stands for (the registry's name where it has one: binary8p4sf
    is e4m3fnuz), or None for a name outside that grammar. ValueError for a P3109 format that cannot
    be an element: unsigned (no negatives to quantize) or wider than 8 bits."""
    if parse_p3109(name) is None:
        return None
    fmt = get_format(name)
    if not fmt.signed:
        raise ValueError(f"{name} is unsigned (it holds no negatives); a quantization element is signed: "
                         "binary<K>p<P>se or binary<K>p<P>sf")
    if fmt.bits > 8:
        raise ValueError(f"element {name} is {fmt.bits} bits wide; quantization elements are 8 bits or fewer")
    return fmt.name


def _problem(s: Scheme) -> str:
    if s.element not in ELEMENTS and p3109_element(s.element) is None:
        return f"unknown element {s.element!r}"
    if s.scale not in SCALE_FORMATS:
        return f"unknown scale format {s.scale!r}"
    if s.granularity in (Granularity.GROUP, Granularity.BLOCK, Granularity.TILE) and s.group <= 0:
        return "a group, block or tile needs a positive size"
    if s.block_rows <= 0:
        return "block rows must be positive"
    if s.outliers < 0:
        return "outliers must be >= 0"
    if s.minscale not in ("subnormal", "normal"):
        return f"minscale must be 'subnormal' or 'normal', got {s.minscale!r}"
    if s.nonfinite not in ("error", "nan"):
        return f"nonfinite must be 'error' or 'nan', got {s.nonfinite!r}"
    if s.scale_round not in ("nearest", "up"):
        return f"scaleround must be 'nearest' or 'up', got {s.scale_round!r}"
    if s.scale_round == "up" and s.scale == "ue8m0":
        return "scaleround=up applies to fp32 / fp16 / bf16 / e4m3 scales; ue8m0 scales follow the MX rule (rceil " \
            "rounds them up)"
    if is_unsigned(s.element) and s.symmetric:
        return f"{s.element} is unsigned: it is always asymmetric (a zero point); use int{s.element[4:]} for sym"
    if not s.symmetric and s.element not in INT_ELEMENTS:
        return f"asym (a zero point) applies to integer elements, not {s.element}"
    if s.outliers and s.granularity in (Granularity.BLOCK,):
        return "outliers= keeps whole rows in fp16; it does not combine with 2-D blocks"
    if s.outliers and s.is_mx:
        return "outliers= does not combine with MX presets"
    if s.tensor_scale and s.scale != "e4m3":
        return "a tensor scale (nvfp4) needs e4m3 block scales"
    if s.minscale != "subnormal" and not s.tensor_scale:
        return "minscale= applies to nvfp4's e4m3 block scales"
    if (s.scale == "ue8m0") != (s.mx is not None):
        return "ue8m0 scales and the floor / rceil rule go together"
    if s.is_mx and s.symmetric is False:
        return "power-of-two (ue8m0) scales are symmetric: no zero point"
    if s.int_range not in INT_RANGES:
        return f"range must be one of {', '.join(INT_RANGES)}, got {s.int_range!r}"
    if s.int_range != "narrow" and (s.element not in SIGNED_INT_ELEMENTS or not s.symmetric or s.is_mx):
        return f"range={s.int_range} applies to symmetric signed integer elements ({', '.join(SIGNED_INT_ELEMENTS)})" \
            f", not {s}"
    if s.codebook_rule not in CODEBOOK_RULES:
        return f"codebook rule must be one of {', '.join(CODEBOOK_RULES)}, got {s.codebook_rule!r}"
    if s.codebook_rule != "exact" and s.element not in CODEBOOK_ELEMENTS:
        return f"the {s.codebook_rule} option chooses codebook codes (nf4); it does not apply to {s.element}"
    return _min_problem(s) or _two_level_problem(s)


CODEBOOK_RULES = ("exact", "bnb")
"""nf4 code choice: exact (nearest value to the exact ratio) or bnb (bitsandbytes' quantize_4bit, bit for bit)."""


def is_unsigned(element: str) -> bool:
    """uint8, uint4, ...: codes 0 .. 2^b - 1, always with a zero point or a float min."""
    return element in INT_ELEMENTS and element.startswith("uint")


SIGNED_INT_ELEMENTS = tuple(e for e in INT_ELEMENTS if not e.startswith("uint"))


def _min_problem(s: Scheme) -> str:
    if s.min_format is None:
        return ""
    if s.min_format not in MIN_FORMATS:
        return f"min= stores the block offset in {', '.join(MIN_FORMATS)}, not {s.min_format!r}"
    if not is_unsigned(s.element):
        return (f"min= (a float block offset, codes 0 .. 2^b - 1) applies to unsigned integer elements "
                f"({', '.join(e for e in INT_ELEMENTS if is_unsigned(e))}), not {s.element}")
    if s.is_mx:
        return "min= does not combine with power-of-two (ue8m0) scales"
    return ""


def _two_level_problem(s: Scheme) -> str:
    if not s.super_block and (s.sub_scale or s.sub_min):
        return "integer block-scale codes need a super-block"
    if not s.super_block:
        return ""
    if s.granularity is not Granularity.GROUP or s.super_block % s.group:
        return "a super-block is a whole number of groups"
    if s.sub_scale is None or (s.sub_min is None) != (s.min_format is None):
        return "a two-level scheme has integer block-scale codes, and block-min codes exactly when it has min="
    return ""


INT_RANGES = ("narrow", "full", "full_neg")
"""The symmetric signed-integer conventions: code range and scale divisor (int4 shown).

    narrow    ±7,      s = amax / 7      (2^(b-1) - 1: the grid is symmetric about an exact zero)
    full      -8..7,   s = amax / 7.5    (2^(b-1) - 1/2: the extra negative code is used)
    full_neg  -8..7,   s = amax / 8      (2^(b-1))
"""


# --------------------------------------------------------------------------- presets
def _mx(element: str, name: str) -> Scheme:
    return Scheme(element, Granularity.GROUP, group=32, scale="ue8m0", mx=MXRule.FLOOR, nonfinite="nan", preset=name)


PRESETS: dict[str, Scheme] = {
    "mxfp8": _mx("e4m3", "mxfp8"),
    "mxfp8_e4m3": _mx("e4m3", "mxfp8_e4m3"),
    "mxfp8_e5m2": _mx("e5m2", "mxfp8_e5m2"),
    "mxfp6": _mx("e2m3", "mxfp6"),
    "mxfp6_e2m3": _mx("e2m3", "mxfp6_e2m3"),
    "mxfp6_e3m2": _mx("e3m2", "mxfp6_e3m2"),
    "mxfp4": _mx("e2m1", "mxfp4"),
    "mxint8": _mx("int8", "mxint8"),
    "nvfp4": Scheme("e2m1", Granularity.GROUP, group=16, scale="e4m3", tensor_scale=True, nonfinite="nan",
                    preset="nvfp4"),
    "dsv3_weight": Scheme("e4m3", Granularity.BLOCK, group=128, block_rows=128, scale="fp32", preset="dsv3_weight"),
    "dsv3_act": Scheme("e4m3", Granularity.TILE, group=128, scale="fp32", preset="dsv3_act"),
}
"""Named recipes. dsv3_*: DeepSeek-V3 (128x128 weight blocks, 1x128 activation tiles, fp32 scales)."""

def _gguf(name: str, element: str, group: int, **fields: object) -> Scheme:
    return Scheme(element, Granularity.GROUP, group=group, scale="fp16", preset=name, **fields)  # type: ignore[arg-type]


GGUF_PRESETS: dict[str, Scheme] = {
    "gguf_q8_0": _gguf("gguf_q8_0", "int8", 32, ggml="Q8_0"),
    "gguf_q4_0": _gguf("gguf_q4_0", "int4", 32, int_range="full_neg", ggml="Q4_0"),
    "gguf_q4_1": _gguf("gguf_q4_1", "uint4", 32, symmetric=False, min_format="fp16", ggml="Q4_1"),
    "gguf_q5_0": _gguf("gguf_q5_0", "int5", 32, int_range="full_neg", ggml="Q5_0"),
    "gguf_q5_1": _gguf("gguf_q5_1", "uint5", 32, symmetric=False, min_format="fp16", ggml="Q5_1"),
    "gguf_q4_k": _gguf("gguf_q4_k", "uint4", 32, symmetric=False, min_format="fp16", super_block=256,
                       sub_scale="uint6", sub_min="uint6", ggml="Q4_K"),
    "gguf_q6_k": _gguf("gguf_q6_k", "int6", 16, int_range="full_neg", super_block=256, sub_scale="int8", ggml="Q6_K"),
}
"""llama.cpp's GGML block types (ggml-common.h's block_* structs), with llama.cpp's reference quantizers
(ggml-quants.c quantize_row_*_ref; precisionlab.quant.ggml). Per block (d, m: fp16; q: the element's code value):

    gguf_q8_0  int8:g32                      x_hat = q * d,       q in -127..127,  34 bytes / 32
    gguf_q4_0  int4:g32:range=full_neg       x_hat = q * d,       q in -8..7,      18 bytes / 32
    gguf_q4_1  uint4:g32:min=fp16            x_hat = q * d + m,   q in 0..15,      20 bytes / 32
    gguf_q5_0  int5:g32:range=full_neg       x_hat = q * d,       q in -16..15,    22 bytes / 32
    gguf_q5_1  uint5:g32:min=fp16            x_hat = q * d + m,   q in 0..31,      24 bytes / 32
    gguf_q4_k  uint4, g32 in super-blocks of 256: x_hat = (d * sc_j) * q - (dmin * mc_j),  q in 0..15,
               sc_j, mc_j uint6 per 32, d, dmin fp16 per 256                                144 bytes / 256
    gguf_q6_k  int6, g16 in super-blocks of 256:  x_hat = (d * sc_j) * q,  q in -32..31,
               sc_j int8 per 16, d fp16 per 256                                             210 bytes / 256

The grammar spells the five one-level layouts (those strings dequantize identically from the same stored
values); the preset adds llama.cpp's quantizer, whose scale comes from the float32 statistics (d = max / -8
for Q4_0, so d < 0 when the largest-magnitude element is positive) and whose codes use the unrounded
float32 scale. Rows must be whole blocks (GGUF stores no partial block)."""

PRESETS.update(GGUF_PRESETS)

PRESET_OPTIONS = ("axis", "nonfinite", "mx", "minscale", "scaleround")
"""The options a preset accepts (its element, granularity and scale format are fixed); gguf_* presets
accept axis= only (llama.cpp's quantizer fixes the rest)."""


def default_scale(element: str) -> str:
    """fp16 for integer elements (the byte count of the per-group int8 drill), fp32 for float and codebook elements."""
    return "fp16" if element in INT_ELEMENTS else "fp32"


# --------------------------------------------------------------------------- parsing
def parse_scheme(spec: str | Scheme) -> Scheme:
    """Parse a scheme string (see the module docstring); a Scheme passes through."""
    if isinstance(spec, Scheme):
        return spec
    if not isinstance(spec, str):
        raise TypeError(f"a scheme is a string or a Scheme, got {type(spec).__name__}")
    parts = [p.strip() for p in spec.strip().lower().split(":")]
    if not parts[0] or any(not p for p in parts):
        raise ValueError(f"empty field in scheme {spec!r}; expected ELEMENT[:GRANULARITY][:OPTION ...]")
    head, rest = parts[0], parts[1:]
    if head in PRESETS:
        return _apply_options(PRESETS[head], rest, spec, preset=True)
    element = ELEMENT_ALIASES.get(head, head)
    if element not in ELEMENTS:
        try:
            p3109 = p3109_element(element)
        except ValueError as err:
            raise ValueError(f"{err} (scheme {spec!r})") from None
        if p3109 is None:
            raise ValueError(f"unknown element or preset {head!r} in scheme {spec!r}{_suggest(head)}")
        element = p3109
    fields: dict[str, object] = {"element": element, "scale": default_scale(element),
                                 "symmetric": not is_unsigned(element)}
    if rest and _is_granularity(rest[0]):
        fields.update(_granularity(rest[0], spec))
        rest = rest[1:]
    base = Scheme(**fields)  # type: ignore[arg-type]
    return _apply_options(base, rest, spec, preset=False)


def _is_granularity(token: str) -> bool:
    return token in ("tensor", "row", "col", "channel") or token.startswith(("g", "block", "tile"))


def _granularity(token: str, spec: str) -> dict[str, object]:
    if token == "tensor":
        return {"granularity": Granularity.TENSOR}
    if token in ("row", "channel"):
        return {"granularity": Granularity.ROW}
    if token == "col":
        return {"granularity": Granularity.COL}
    if token.startswith("g"):
        return {"granularity": Granularity.GROUP, "group": _positive(token[1:], token, spec)}
    kind, body = ("block", token[5:]) if token.startswith("block") else ("tile", token[4:])
    rows_text, sep, cols_text = body.partition("x")
    if not sep:
        raise ValueError(f"{token!r} in scheme {spec!r}: write {kind}<R>x<C>, e.g. block128x128 or tile1x128")
    rows, cols = _positive(rows_text, token, spec), _positive(cols_text, token, spec)
    if rows * cols > MAX_GROUP:
        raise ValueError(f"{token!r} in scheme {spec!r}: a block holds at most {MAX_GROUP} (2^24) elements")
    if kind == "tile":
        if rows != 1:
            raise ValueError(f"{token!r} in scheme {spec!r}: tiles are 1x<C>; use block{rows}x{cols} for 2-D blocks")
        return {"granularity": Granularity.TILE, "group": cols}
    return {"granularity": Granularity.BLOCK, "group": cols, "block_rows": rows}


MAX_GROUP = 1 << 24
"""Largest group or block (elements): a ragged last group is padded and stored, so a group far larger
than the tensor would allocate its padding (a per-tensor scale needs no granularity at all)."""


def _positive(text: str, token: str, spec: str) -> int:
    if not text.isdigit() or int(text) <= 0:
        raise ValueError(f"{token!r} in scheme {spec!r} needs a positive integer size")
    if int(text) > MAX_GROUP:
        raise ValueError(f"{token!r} in scheme {spec!r}: a group holds at most {MAX_GROUP} (2^24) elements")
    return int(text)


_OPTION_NAMES = ("sym", "asym", "scale=", "outliers=", "axis=", "floor", "rceil", "minscale=", "nonfinite=",
                 "range=", "scaleround=", "min=", "bnb")


def _apply_options(base: Scheme, options: list[str], spec: str, preset: bool) -> Scheme:
    changes: dict[str, object] = {}
    seen: dict[str, str] = {}
    for option in options:
        key, eq, value = option.partition("=")
        field = "symmetric" if key in ("sym", "asym") else _option_field(key)
        if field in seen:
            raise ValueError(f"options {seen[field]!r} and {option!r} in scheme {spec!r} set the same thing; "
                             "give it once")
        seen[field] = option
        if preset and base.ggml is not None and key != "axis":
            raise ValueError(f"preset {base.preset} is llama.cpp's {base.ggml} layout and quantizer; option {option!r} "
                             f"in {spec!r} is not allowed (allowed: axis=)")
        if preset and _option_field(key) not in PRESET_OPTIONS:
            raise ValueError(f"preset {base.preset} fixes its element, granularity and scale; "
                             f"option {option!r} in {spec!r} is not allowed (allowed: axis=, nonfinite=, "
                             "floor/rceil for MX, minscale= for nvfp4, scaleround= for nvfp4 and dsv3_*)")
        if _is_granularity(option) and not eq:
            raise ValueError(f"granularity {option!r} in scheme {spec!r} must come right after the element")
        if key in ("sym", "asym") and not eq:
            changes["symmetric"] = key == "sym"
        elif key in ("floor", "rceil") and not eq:
            changes["mx"] = MXRule(key)
        elif key == "bnb" and not eq:
            changes["codebook_rule"] = "bnb"
        elif key == "scale" and eq:
            if value not in SCALE_FORMATS:
                raise ValueError(f"scale format {value!r} in scheme {spec!r}; choose one of {', '.join(SCALE_FORMATS)}")
            changes["scale"] = value
        elif key == "outliers" and eq:
            if not value.isdigit():
                raise ValueError(f"outliers= in scheme {spec!r} needs a non-negative integer, got {value!r}")
            changes["outliers"] = int(value)
        elif key == "axis" and eq:
            try:
                changes["axis"] = int(value)
            except ValueError:
                raise ValueError(f"axis= in scheme {spec!r} needs an integer, got {value!r}") from None
        elif key == "minscale" and eq:
            changes["minscale"] = value
        elif key == "nonfinite" and eq:
            changes["nonfinite"] = value
        elif key == "range" and eq:
            if value not in INT_RANGES:
                raise ValueError(f"range={value} in scheme {spec!r}; choose one of {', '.join(INT_RANGES)}")
            changes["int_range"] = value
        elif key == "scaleround" and eq:
            changes["scale_round"] = value
        elif key == "min" and eq:
            if value not in MIN_FORMATS:
                raise ValueError(f"min={value} in scheme {spec!r}; the block offset is stored in one of "
                                 f"{', '.join(MIN_FORMATS)}")
            changes["min_format"] = value
        else:
            raise ValueError(f"unknown option {option!r} in scheme {spec!r}{_suggest_option(option)}")
    scale = changes.get("scale", base.scale)
    if scale == "ue8m0" and changes.get("mx", base.mx) is None:
        changes["mx"] = MXRule.FLOOR  # a ue8m0 scale follows the MX rule
    if scale != "ue8m0" and "mx" in changes:
        raise ValueError(f"floor / rceil in scheme {spec!r} is the power-of-two scale rule; it applies to the mx* "
                         "presets and to scale=ue8m0")
    return replace(base, **changes)  # type: ignore[arg-type]


def _option_field(key: str) -> str:
    return {"floor": "mx", "rceil": "mx", "min": "min_format", "bnb": "codebook_rule"}.get(key, key)


# --------------------------------------------------------------------------- formatting
def format_scheme(s: Scheme) -> str:
    """Canonical string: preset or element, granularity, then non-default options in a fixed order."""
    if s.preset is not None:
        base = PRESETS[s.preset]
        parts = [s.preset]
    else:
        base = Scheme(s.element, scale=default_scale(s.element), symmetric=not is_unsigned(s.element))
        parts = [s.element]
        gran = _granularity_text(s)
        if gran:
            parts.append(gran)
    if s.symmetric != base.symmetric:
        parts.append("sym" if s.symmetric else "asym")
    if s.scale != base.scale:
        parts.append(f"scale={s.scale}")
    if s.min_format != base.min_format and s.min_format is not None:
        parts.append(f"min={s.min_format}")
    if s.outliers != base.outliers:
        parts.append(f"outliers={s.outliers}")
    if s.axis != base.axis:
        parts.append(f"axis={s.axis}")
    if s.mx is MXRule.RCEIL and base.mx is not MXRule.RCEIL:
        parts.append(s.mx.value)
    if s.minscale != base.minscale:
        parts.append(f"minscale={s.minscale}")
    if s.nonfinite != base.nonfinite:
        parts.append(f"nonfinite={s.nonfinite}")
    if s.int_range != base.int_range:
        parts.append(f"range={s.int_range}")
    if s.scale_round != base.scale_round:
        parts.append(f"scaleround={s.scale_round}")
    if s.codebook_rule != base.codebook_rule:
        parts.append(s.codebook_rule)
    return ":".join(parts)


def _granularity_text(s: Scheme) -> str:
    if s.granularity is Granularity.TENSOR:
        return ""
    if s.granularity is Granularity.ROW:
        return "row"
    if s.granularity is Granularity.COL:
        return "col"
    if s.granularity is Granularity.GROUP:
        return f"g{s.group}"
    if s.granularity is Granularity.TILE:
        return f"tile1x{s.group}"
    return f"block{s.block_rows}x{s.group}"


def _suggest(token: str) -> str:
    names = [*ELEMENTS, *PRESETS, *ELEMENT_ALIASES]
    close = difflib.get_close_matches(token, names, n=4, cutoff=0.5)
    hint = f"; did you mean {', '.join(close)}?" if close else ""
    return f"{hint} (elements: {', '.join(ELEMENTS)}, binary<K>p<P>se|sf; presets: {', '.join(PRESETS)})"


_GRANULARITY_NAMES = ("tensor", "row", "col", "channel")


def _suggest_option(option: str) -> str:
    close = difflib.get_close_matches(option, _OPTION_NAMES + _GRANULARITY_NAMES, n=3, cutoff=0.4)
    if close:
        return f"; did you mean {', '.join(close)}?"
    return f"; options: {', '.join(_OPTION_NAMES)}; granularity (right after the element): tensor, row, col, g<N>, " \
        "block<R>x<C>, tile1x<C>"
