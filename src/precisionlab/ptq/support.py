"""What each PTQ method applies to: its options and defaults, and the schemes it accepts (the one place).

    check_method(method, scheme, options)   the canonical scheme text run_method will use, or ValueError
                                            (one line, naming why) before any model is loaded
    check_layer(method, scheme, shape)      ValueError when the scheme cannot store a layer of that shape
    refusal(method, scheme)                 the reason a method refuses a scheme, or None when it takes it

The rules (every method's weights come out on the scheme's own grid, `quant.quantize` bit for bit where
nothing moves them; tests/test_ptq_support.py checks that over the whole scheme registry):

    rtn          every scheme (quant.quantize itself)
    gptq         the schemes the column sweep models exactly (`ptq.grid`): one-level scales along the input
                 axis, every element family (integers with zero points or float minimums, floats, nf4, MX,
                 NVFP4) and the one-level gguf presets (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, with llama.cpp's own
                 rounding). Refused: axis= other than the input axis (its groups run across the columns the
                 sweep visits one at a time), outliers= (whole rows kept in fp16, outside the grid) and
                 two-level super-block scales (gguf_q4_k, gguf_q6_k: llama.cpp fits a block's scale code and
                 the super-block scale together over all of its 256 elements; a sweep fixes one group at a time)
    awq          every scheme (the scaled weight, clipped or not, is quantized by quant.quantize); clipping only
                 where the scheme's blocks are single rows along the input axis
    smoothquant  W8A8: an 8-bit weight element (int8, uint8, fp8, mxint8, mxfp8, gguf_q8_0, 8-bit P3109) and an
                 8-bit activation scheme per token or per tensor (per channel cannot be applied inside a GEMM)
    llm_int8     its fixed recipe only: int8 row-wise weights with fp32 scales (int8, int8:row,
                 int8:row:scale=fp32 or no scheme)
    kivi         a bit width only: int2 or int4 (uint2, uint4, 2, 4); its groups and residual window are options

Scale folding (awq, smoothquant) also needs an architecture whose norms it knows (`ptq.architectures`).
"""

from __future__ import annotations

import math
from typing import Any

from precisionlab.ptq import kivi as kivi_mod
from precisionlab.ptq import llm_int8 as llm_int8_mod
from precisionlab.ptq.smoothquant import DEFAULT_ALPHA, check_w8a8
from precisionlab.quant.scheme import Scheme, parse_scheme
from precisionlab.quant.tensor import stored_bytes

METHODS = ("rtn", "gptq", "awq", "smoothquant", "llm_int8", "kivi")
WEIGHT_ONLY = ("rtn", "gptq", "awq")
"""The methods that change nothing but weights (and AWQ's folds into the norms)."""
LLM_INT8_SCHEMES = ("int8", "int8:row", "int8:row:scale=fp32")
"""The spellings of LLM.int8()'s fixed weight recipe (int8 row-wise, fp32 absmax scales)."""
FOLDING = ("awq", "smoothquant")
"""The methods that fold per-channel scales into the op before a group of layers."""

SEQUENTIAL = ("off", "block", "layer")
"""GPTQ's calibration order (option `sequential`):
    off    every layer on the full-precision model's inputs (one capture)
    block  block by block, each block's layers on the inputs the model gives while the blocks before it
           hold their quantized weights (the GPTQ paper's reference code)
    layer  also inside a block: each set of layers reading one input (q/k/v, o, gate/up, down) on the inputs
           given while the sets before it, in module order, are quantized (AutoGPTQ's true_sequential)"""

OPTIONS: dict[str, dict[str, Any]] = {
    "rtn": {},
    "gptq": {"block_size": 128, "damp": 0.01, "damp_growth": 2.0, "max_damp": 1.0, "act_order": True,
             "static_groups": True, "dtype": "float32", "sequential": "off"},
    "awq": {"n_grid": 20, "duo_scaling": True, "clip": True, "objective": "block", "guard": True,
            "module_tokens": 512},
    "smoothquant": {"alpha": DEFAULT_ALPHA, "act_scheme": None, "samples": 512},
    "llm_int8": {"threshold": llm_int8_mod.THRESHOLD, "outlier_weights": "int8", "token_absmax": "columns",
                 "samples": 512},
    "kivi": {"group": kivi_mod.DEFAULT_GROUP, "residual": kivi_mod.DEFAULT_RESIDUAL, "prefill": 256, "max_kl": None},
}
"""Each method's options and their defaults (`run_method(..., options={...})`)."""


def method_options(method: str, options: dict[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
    """(the method's name, its defaults updated by `options`), or ValueError naming an unknown method or
    option."""
    name = str(method).lower()
    if name not in METHODS:
        raise ValueError(f"unknown PTQ method {method!r}; choose one of {', '.join(METHODS)}")
    opts = dict(OPTIONS[name])
    unknown = sorted(set(options or {}) - set(opts))
    if unknown:
        raise ValueError(f"unknown option {unknown[0]!r} for {name}; its options: {', '.join(opts) or 'none'}")
    opts.update(options or {})
    return name, opts


def check_method(method: str, scheme: str | Scheme | None, options: dict[str, Any] | None = None) -> str:
    """The canonical scheme text `run_method` would use, or ValueError when the method, an option or the
    scheme does not apply (checked before any model is loaded)."""
    name, opts = method_options(method, options)
    return check_scheme(name, scheme, opts)


def check_scheme(method: str, scheme: str | Scheme | None, opts: dict[str, Any]) -> str:
    """check_method with the options already merged (`method_options`); sets smoothquant's act_scheme."""
    check = _CHECKS[method]
    return check(scheme, opts)


def refusal(method: str, scheme: str | Scheme | None) -> str | None:
    """Why `method` (at its default options) refuses `scheme`, or None when it accepts it. A scheme string that
    does not parse is refused with the parser's message."""
    try:
        check_method(method, scheme)
    except ValueError as exc:
        return str(exc)
    return None


def check_layer(method: str, scheme: str, shape: tuple[int, ...]) -> None:
    """ValueError when `scheme` (checked by check_method) cannot store a weight of `shape` (a gguf preset on a
    row that is not whole blocks, outliers= of every row, ...): the same check quant.quantize makes, made
    before calibration. kivi quantizes no weight; llm_int8's row-wise int8 stores any 2-D weight."""
    if method in ("kivi", "llm_int8"):
        return
    stored_bytes(scheme, tuple(shape))


# --------------------------------------------------------------------------- the per-method rules
def columnwise_problem(s: Scheme) -> str:
    """Why GPTQ's column sweep (`ptq.grid`) cannot reproduce scheme `s` exactly, or "" when it can."""
    if s.axis not in (-1, 1):
        return (f"its groups run along axis {s.axis}, but GPTQ sweeps the input columns (axis -1) one at a time; "
                "drop axis=")
    if s.outliers:
        return "outliers= keeps whole rows in fp16 outside the grid; quantize without outliers="
    if s.is_two_level:
        return (f"its block scales are {s.sub_scale} codes of one super-block scale, which llama.cpp's {s.ggml} "
                f"search fits over all {s.super_block} elements of a super-block at once, while a column sweep "
                "fixes one group's scale at a time; use a one-level scheme (e.g. gguf_q4_1 or uint4:g32:min=fp16)")
    return ""


def _rtn(scheme: str | Scheme | None, opts: dict[str, Any]) -> str:
    return str(_needs_scheme("rtn", scheme))


def _gptq(scheme: str | Scheme | None, opts: dict[str, Any]) -> str:
    s = _needs_scheme("gptq", scheme)
    problem = columnwise_problem(s)
    if problem:
        raise ValueError(f"GPTQ does not apply to scheme {s}: {problem}")
    grouped = s.granularity.value in ("group", "tile", "block", "col")
    if opts["act_order"] and grouped and not opts["static_groups"]:
        raise ValueError(f"act_order with the grouped scheme {s} needs static_groups=True: groups fitted in the "
                         "permuted order are not the scheme's layout (they need a g_idx); for groups fitted as the "
                         "sweep reaches them, set act_order=false too")
    if int(opts["block_size"]) < 1 or not 0 < float(opts["damp"]) <= float(opts["max_damp"]):
        raise ValueError("GPTQ needs block_size >= 1 and 0 < damp <= max_damp")
    if not float(opts["damp_growth"]) > 1:
        raise ValueError(f"GPTQ damp_growth must be > 1, got {opts['damp_growth']!r}")
    if opts["dtype"] not in ("float32", "float64"):
        raise ValueError(f"GPTQ dtype must be 'float32' or 'float64', got {opts['dtype']!r}")
    if opts["sequential"] not in SEQUENTIAL:
        raise ValueError(f"GPTQ sequential must be one of {', '.join(SEQUENTIAL)}, got {opts['sequential']!r}")
    return str(s)


def _awq(scheme: str | Scheme | None, opts: dict[str, Any]) -> str:
    s = _needs_scheme("awq", scheme)
    if opts["objective"] not in ("block", "linear"):
        raise ValueError(f"AWQ objective must be 'block' or 'linear', got {opts['objective']!r}")
    if int(opts["n_grid"]) < 1:
        raise ValueError(f"AWQ n_grid must be >= 1, got {opts['n_grid']!r}")
    return str(s)


def _smoothquant(scheme: str | Scheme | None, opts: dict[str, Any]) -> str:
    s = _needs_scheme("smoothquant", scheme)
    w, a = check_w8a8(s, opts["act_scheme"])
    opts["act_scheme"] = str(a)
    alpha = opts["alpha"]
    if alpha != "auto" and not (isinstance(alpha, (int, float)) and 0 <= float(alpha) <= 1):
        raise ValueError(f"SmoothQuant alpha must be a number in [0, 1] or 'auto', got {alpha!r}")
    return str(w)


def _llm_int8(scheme: str | Scheme | None, opts: dict[str, Any]) -> str:
    llm_int8_mod.check_options(opts["outlier_weights"], opts["token_absmax"])
    if not float(opts["threshold"]) > 0:
        raise ValueError(f"LLM.int8() threshold must be > 0, got {opts['threshold']!r}")
    if scheme is not None:
        s = parse_scheme(scheme)
        if str(s) not in LLM_INT8_SCHEMES:
            raise ValueError(f"LLM.int8() is a fixed recipe (int8 row-wise weights with fp32 scales, token-wise "
                             f"activations, fp16 outlier columns); scheme {s} does not apply: pass int8 or int8:row")
    return llm_int8_mod.INT8_ROW


def _kivi(scheme: str | Scheme | None, opts: dict[str, Any]) -> str:
    config = kivi_mod.kivi_config(None if scheme is None else str(scheme), int(opts["group"]), int(opts["residual"]))
    if int(opts["prefill"]) < 1:
        raise ValueError(f"KIVI prefill must be >= 1 token, got {opts['prefill']!r}")
    max_kl = opts["max_kl"]
    if max_kl is not None and not (isinstance(max_kl, (int, float)) and math.isfinite(max_kl) and max_kl >= 0):
        raise ValueError(f"KIVI max_kl must be a finite number >= 0 (nats per decoded token), got {max_kl!r}")
    return f"int{config.bits}"


def _needs_scheme(method: str, scheme: str | Scheme | None) -> Scheme:
    if scheme is None:
        raise ValueError(f"{method} needs a scheme (e.g. int4:g128)")
    return parse_scheme(scheme)


_CHECKS = {"rtn": _rtn, "gptq": _gptq, "awq": _awq, "smoothquant": _smoothquant, "llm_int8": _llm_int8,
           "kivi": _kivi}
