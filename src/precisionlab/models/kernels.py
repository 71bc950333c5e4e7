"""Real weight-only kernels on the CPU: which precisionlab schemes torch's fused int8 / int4 matmuls run
exactly, packing a layer for them, and swapping a model's linears for ones that call them.

    plan = kernel_plan("int4:g128:scale=bf16")       # plan.kernel, plan.runs, plan.reason
    with kernel_linears(model, "int8:row:scale=bf16") as swap:   # selected nn.Linear -> KernelLinear
        model(ids)                                   # the forward now runs torch's int8 kernel
    swap.remove(); swap.install()                    # switch back and forth (speed comparisons)

The kernels (torch 2.13, CPU; read in aten/src/ATen/native/cpu/int8mm_kernel.cpp and int4mm_kernel.cpp,
checked numerically in tests/test_kernels_cpu.py):

    _weight_int8pack_mm(A[M,K], B int8[N,K], scales[N])     y = A @ (B * scales)^T
        w = fp32(q * s) (exact: 8 x 8 bits), fp32 FMA accumulation, output in A's dtype. scales must have
        A's dtype. Vectorised (AVX-512 / AVX2) for bf16 A only: fp16 and fp32 A take a scalar loop (many
        times slower; docs/profile.md has the measured ratios with their conditions). K must be a multiple
        of 16: other K give wrong results without an error (K = 200: 16 %).
    _convert_weight_to_int4pack_for_cpu(q int32[N,K] in 0..15, innerKTiles) -> uint8[N, K/2]
    _weight_int4pack_mm_for_cpu(A[M,K], packed, g, qScaleAndZeros[K/g, N, 2])
        w = fp32(fma(q - 8, s, z)): the zero point z is a float added at code 8, s and z in A's dtype;
        g in {32, 64, 128, 256} dividing K; N a multiple of 16. Vectorised for bf16 A only (BLOCK_M = 4 rows
        share one dequantization, so large M dequantizes the weight M/4 times).

Which schemes run exactly (`kernel_plan`): the kernel's grid must hold the scheme's grid point for point.

    int8 kernel   int8, symmetric, per row or per tensor, any scale format  w = q * s      (codes -128..127)
                  bf16 scales go into the kernel; any other format (the default fp16 of int8:row) multiplies
                  the kernel's output instead, y_n = s_n * sum_k x_k q_nk in float32: one scale per output
                  row factors out of the row's sum, so the grid is the scheme's, and the kernel runs with
                  unit scales (`KernelPlan.how` says so; `output_rounding` counts the extra fp32 rounding).
    int4 kernel   int4, symmetric, g<G> / row / tensor, scale=bf16         w = (q - 8) * s + 0   (z = 0)
                  with a kernel group g' in {256, 128, 64, 32} dividing both G (K for row / tensor) and K:
                  a scheme group of 128 on K = 576 (SmolLM2; precisionlab pads the last group) runs as
                  kernel groups of 64, each scheme scale written into the kernel groups it covers.

An int4 scheme whose only difference is its scale format (the default fp16 scales of int4:g128) has no
exact kernel: its group scales sit inside the sum, where only the activations' dtype (bf16) goes; its `runs`
names the bf16-scale twin the kernel does run. Asymmetric int4 does not map: precisionlab's zero points are
integers, x_hat = (q - z) s, and its min= offsets are q s + m, where the kernel's float zero sits at code 8;
neither set of grid points is the kernel's in general.

The activations: the fast path takes bf16 activations, so a KernelLinear rounds its input to bf16 and its
bf16 output back to the model's dtype (`ACTIVATION_DTYPE`; float32 is accepted, for measurements of the
slow path). Its output then differs from the emulation (`models.weights`: the same dequantized weight in
the model's dtype) by the bf16 roundings and the accumulation order, elementwise within `output_bound`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from precisionlab import peers
from precisionlab.quant import Granularity, QuantizedTensor, Scheme, parse_scheme, quantize
from precisionlab.quant.elements import make_codec

TORCH_INT8 = "torch _weight_int8pack_mm"
TORCH_INT4 = "torch _weight_int4pack_mm_for_cpu"
KERNELS = (TORCH_INT8, TORCH_INT4)
KERNEL_OPS = {TORCH_INT8: "aten::_weight_int8pack_mm", TORCH_INT4: "aten::_weight_int4pack_mm_for_cpu"}
"""The op torch.profiler names for each kernel (`op_calls` counts them)."""
INT4_GROUPS = (256, 128, 64, 32)
"""The group sizes torch's CPU int4 kernel takes, largest first (the kernel group is the largest that fits)."""
INT8_K_MULTIPLE = 16
"""torch's int8 kernel steps K by 16 with aligned loads: other K give wrong sums, silently."""
INT4_N_MULTIPLE = 16
ACTIVATION_DTYPE = "bfloat16"
"""The activations' dtype of the fast path (torch vectorises these kernels for bf16 activations only)."""
ACTIVATION_DTYPES = ("bfloat16", "float32")
BF16_UNIT = 2.0**-8
"""Unit roundoff of bf16 (8 significant bits, round to nearest)."""
FP32_UNIT = 2.0**-24


@dataclass(frozen=True)
class KernelPlan:
    """What runs a scheme: `kernel` (None when no kernel runs its grid exactly), `runs` (the scheme the
    kernel would run: the scheme itself when exact, its bf16-scale twin when only the scale format differs,
    None when nothing maps) and `reason` (why not, in words; "" when exact)."""

    scheme: str
    kernel: str | None
    runs: str | None
    reason: str = ""
    how: str = ""
    """How an exact kernel holds the scheme when that is not plain (int8 scales applied to the output)."""

    @property
    def exact(self) -> bool:
        return self.kernel is not None


def _mapping_problem(s: Scheme) -> tuple[str | None, str]:
    """(kernel, "") when the kernel runs the scheme's grid exactly, else (kernel that would, or None; reason)."""
    if s.element not in ("int8", "int4"):
        return None, f"torch's CPU kernels take int8 or int4 weights, not {s.element}"
    kernel = TORCH_INT8 if s.element == "int8" else TORCH_INT4
    if s.ggml is not None:
        return None, (f"{s} is llama.cpp's {s.ggml} block type (fp16 block scales): llama.cpp's own kernel runs it "
                      "(`precisionlab profile` times it), torch's do not")
    if (s.is_mx or s.tensor_scale or s.has_min or s.is_two_level
            or s.outliers or s.axis not in (-1, 1)):
        return None, f"{s}: the kernels hold plain scaled codes along the inputs (no presets, offsets, outlier " \
                     "rows or other axes)"
    if not s.symmetric:
        return None, f"{s}: precisionlab's zero points are integer codes, (q - z) * s; the int4 kernel adds a " \
                     "float zero at code 8 and the int8 kernel has none"
    if s.element == "int8" and s.granularity not in (Granularity.ROW, Granularity.TENSOR):
        return None, f"{s}: the int8 kernel takes one scale per output row (row or tensor granularity)"
    if s.element == "int4" and s.granularity not in (Granularity.ROW, Granularity.TENSOR, Granularity.GROUP):
        return None, f"{s}: the int4 kernel takes groups along the inputs (g<N>, row or tensor granularity)"
    if s.element == "int4" and s.granularity is Granularity.GROUP and not any(s.group % g == 0 for g in INT4_GROUPS):
        return None, f"{s}: the int4 kernel's groups are {', '.join(map(str, INT4_GROUPS))}, and none divides {s.group}"
    if s.element == "int4" and s.scale != "bf16":
        return kernel, (f"{s} stores {s.scale} group scales, which sit inside the kernel's sum; the fast kernel "
                        "takes them in the activations' dtype (bf16) only")
    return kernel, ""


def output_scaled(scheme: str | Scheme) -> bool:
    """Whether the int8 kernel runs `scheme` with unit scales and multiplies its output by the row scales
    (an int8 scheme whose scales are not bf16, the activations' dtype the kernel takes its scales in)."""
    s = parse_scheme(scheme)
    return s.element == "int8" and s.scale != "bf16"


def kernel_plan(scheme: str | Scheme) -> KernelPlan:
    """Which kernel runs `scheme` exactly, or which scheme the kernel would run instead (see the module)."""
    s = parse_scheme(scheme)
    kernel, reason = _mapping_problem(s)
    if kernel is not None and not reason:
        how = (f"its {s.scale} row scales multiply the kernel's output in float32 (one scale per output row "
               "factors out of the row's sum; the kernel runs with unit scales)" if output_scaled(s) else "")
        return KernelPlan(str(s), kernel, str(s), how=how)
    if kernel is not None:  # only the scale format differs
        twin = dataclasses.replace(s, scale="bf16", scale_round=s.scale_round)
        return KernelPlan(str(s), None, str(twin), reason)
    return KernelPlan(str(s), None, None, reason)


def kernel_group(scheme: str | Scheme, k: int) -> int:
    """The int4 kernel's group size for a weight of K inputs: the largest of INT4_GROUPS dividing K and the
    scheme's group (K itself for row / tensor granularity); ValueError when none does."""
    s = parse_scheme(scheme)
    span = s.group if s.granularity is Granularity.GROUP else k
    for g in INT4_GROUPS:
        if span % g == 0 and k % g == 0:
            return g
    raise ValueError(f"{s} on {k} inputs: no int4 kernel group ({', '.join(map(str, INT4_GROUPS))}) divides both "
                     f"{k} and {span}")


def layer_problem(scheme: str | Scheme, shape: tuple[int, int]) -> str:
    """Why a (N, K) weight cannot run the scheme's kernel ("" when it can): the kernels' shape rules."""
    plan = kernel_plan(scheme)
    if plan.kernel is None:
        return plan.reason
    n, k = shape
    if plan.kernel == TORCH_INT8:
        return "" if k % INT8_K_MULTIPLE == 0 else f"{k} inputs: the int8 kernel needs a multiple of {INT8_K_MULTIPLE}"
    if n % INT4_N_MULTIPLE:
        return f"{n} outputs: the int4 kernel needs a multiple of {INT4_N_MULTIPLE}"
    try:
        kernel_group(scheme, k)
    except ValueError as exc:
        return str(exc)
    return ""


# --------------------------------------------------------------------------- packing
@dataclass
class PackedWeight:
    """One (N, K) weight laid out for its kernel, with the emulation's dequantized values beside it.

    int8: codes int8 (N, K), scales (N,); int4: codes uint8 (N, K/2) in torch's packed layout, scales_zeros
    (K/g, N, 2), group g. `emulated` is precisionlab's `quantize(W, scheme).dequantize()` (float32), the
    weight the evaluation uses; `stored_bytes` the bytes the kernel reads (codes and scales as held)."""

    scheme: str
    kernel: str
    shape: tuple[int, int]
    codes: Any
    scales: Any
    group: int
    emulated: np.ndarray
    activation: str = ACTIVATION_DTYPE
    output_scales: Any = None
    """int8 schemes whose scales are not bf16: the row scales (N,) in their own format (fp16, else float32),
    multiplying the kernel's output (then `scales` are ones); None otherwise."""

    @property
    def stored_bytes(self) -> int:
        tensors = [self.codes, self.scales] + ([] if self.output_scales is None else [self.output_scales])
        return int(sum(t.numel() * t.element_size() for t in tensors))


def code_values(source: Any, scheme: str | Scheme) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(integer code values (N, K), per-element divisors (N, K), dequantized values (N, K)) of a 2-D weight
    quantized by precisionlab under `scheme`, or of a QuantizedTensor of that scheme (a PTQ method's codes):
    value * divisor is the dequantized value, exactly (checked)."""
    if isinstance(source, QuantizedTensor):
        if str(source.scheme) != str(parse_scheme(scheme)):
            raise ValueError(f"the quantized weight holds {source.scheme}, not {scheme}")
        q = source
    else:
        q = quantize(source, scheme)
    values = make_codec(q.scheme).values()[q.codes]
    if values.ndim != 2:
        raise ValueError(f"{scheme}: expected a 2-D weight, got shape {q.shape}")
    rows, cols = q.layout.block
    divisors = np.repeat(np.repeat(q.divisors()[0], rows, axis=0)[: values.shape[0]], cols, axis=1)
    n, k = q.shape
    values, divisors = values[:n, :k], divisors[:n, :k]
    emulated = q.dequantize()
    if not np.array_equal((values * divisors).astype(np.float32), emulated):
        raise ValueError(f"{scheme}: the codes and scales do not reproduce the dequantized weight")
    return values, divisors, emulated


def pack(weight: Any, scheme: str | Scheme, activation: str = ACTIVATION_DTYPE) -> PackedWeight:
    """Quantize an (N, K) weight with precisionlab (the emulation's own codes and scales), or take a
    QuantizedTensor of the scheme as it is, and lay it out for the kernel of `kernel_plan(scheme)`; ValueError
    when the scheme has no exact kernel or the shape does not fit."""
    torch = peers.torch()
    if activation not in ACTIVATION_DTYPES:
        raise ValueError(f"activation dtype must be one of {', '.join(ACTIVATION_DTYPES)}, got {activation!r}")
    plan = kernel_plan(scheme)
    if plan.kernel is None:
        raise ValueError(f"no kernel runs {plan.scheme}: {plan.reason}")
    shape = (int(weight.shape[0]), int(weight.shape[1])) if len(weight.shape) == 2 else (0, 0)
    if shape == (0, 0):
        raise ValueError(f"the kernels take 2-D weights, got shape {tuple(weight.shape)}")
    problem = layer_problem(plan.scheme, shape)
    if problem:
        raise ValueError(problem)
    dtype = getattr(torch, activation)
    values, divisors, emulated = code_values(weight, plan.scheme)
    k = shape[1]
    if plan.kernel == TORCH_INT8:
        scales = torch.from_numpy(np.ascontiguousarray(divisors[:, 0]))
        codes = torch.from_numpy(values.astype(np.int8))
        if not output_scaled(plan.scheme):
            _check_representable(scales, dtype, plan.scheme)
            return PackedWeight(plan.scheme, plan.kernel, shape, codes, scales.to(dtype), k, emulated, activation)
        held = torch.float16 if parse_scheme(plan.scheme).scale == "fp16" else torch.float32
        _check_representable(scales, held, plan.scheme)
        return PackedWeight(plan.scheme, plan.kernel, shape, codes, torch.ones(shape[0], dtype=dtype), k, emulated,
                            activation, output_scales=scales.to(held))
    g = kernel_group(plan.scheme, k)
    per_group = torch.from_numpy(np.ascontiguousarray(divisors[:, ::g].T))  # (K/g, N): constant within a group
    _check_representable(per_group, dtype, plan.scheme)
    scales_zeros = torch.stack([per_group, torch.zeros_like(per_group)], dim=-1).to(dtype).contiguous()
    unsigned = torch.from_numpy((values + 8).astype(np.int32))
    codes = torch.ops.aten._convert_weight_to_int4pack_for_cpu(unsigned, 2)
    return PackedWeight(plan.scheme, plan.kernel, shape, codes, scales_zeros, g, emulated, activation)


def _check_representable(scales: Any, dtype: Any, scheme: str) -> None:
    if not bool((scales.to(dtype).float() == scales).all()):
        raise ValueError(f"{scheme}: a scale is not exact in {dtype} (the kernel would run another grid)")


def kernel_matmul(packed: PackedWeight, x: Any) -> Any:
    """x (M, K) in the packed activation dtype, contiguous -> (M, N) in that dtype through the kernel; float32
    when the row scales multiply the kernel's output (`PackedWeight.output_scales`: the product of the kernel's
    dtype and the scales' is computed and returned in float32, torch's type promotion)."""
    torch = peers.torch()
    if packed.kernel == TORCH_INT8:
        y = torch.ops.aten._weight_int8pack_mm(x, packed.codes, packed.scales)
        return y if packed.output_scales is None else y * packed.output_scales
    return torch.ops.aten._weight_int4pack_mm_for_cpu(x, packed.codes, packed.group, packed.scales)


@functools.cache
def kernel_linear_class() -> type:
    """The KernelLinear module class (built on first use: torch is imported lazily)."""
    torch = peers.torch()

    class KernelLinear(torch.nn.Module):  # type: ignore[name-defined]
        """A Linear whose matmul runs a weight-only kernel: y = cast(kernel(cast(x))) + bias (see the module)."""

        def __init__(self, packed: PackedWeight, bias: Any = None) -> None:
            super().__init__()
            self.packed = packed
            self.out_features, self.in_features = packed.shape
            self.bias = bias
            self.dtype = getattr(torch, packed.activation)

        def forward(self, x: Any) -> Any:
            flat = x.reshape(-1, self.in_features)
            # a fresh buffer: the int8 kernel loads aligned rows, which a view into a larger tensor may not be
            inner = flat.to(self.dtype, copy=True, memory_format=torch.contiguous_format)
            out = kernel_matmul(self.packed, inner).to(x.dtype)
            if self.bias is not None:
                out = out + self.bias
            return out.reshape(*x.shape[:-1], self.out_features)

        def extra_repr(self) -> str:
            scaled = ", row scales on the output" if self.packed.output_scales is not None else ""
            return (f"in_features={self.in_features}, out_features={self.out_features}, scheme={self.packed.scheme}, "
                    f"kernel={self.packed.kernel}, activations={self.packed.activation}{scaled}")

    return KernelLinear


def kernel_linear(module: Any, scheme: str | Scheme, activation: str = ACTIVATION_DTYPE, quantized: Any = None) -> Any:
    """A KernelLinear computing `module` (an nn.Linear) under `scheme` through its kernel: the module's weight
    quantized by precisionlab, or `quantized` (a QuantizedTensor of the scheme: a PTQ method's codes)."""
    packed = pack(module.weight.detach() if quantized is None else quantized, scheme, activation)
    bias = None if module.bias is None else module.bias.detach()
    return kernel_linear_class()(packed, bias)


def op_calls(run: Any, ops: Sequence[str]) -> dict[str, int]:
    """How many times each op named in `ops` (torch.profiler's names, e.g. KERNEL_OPS' values) ran during
    run(): the evidence that a call reached the kernel rather than some other path."""
    profiler = peers.torch_profiler()
    with profiler.profile(activities=[profiler.ProfilerActivity.CPU]) as prof:
        run()
    counts = dict.fromkeys(ops, 0)
    for event in prof.events():
        if event.name in counts:
            counts[event.name] += 1
    return counts


def cpu_capability() -> str:
    """The vector ISA torch's CPU kernels dispatch to here ('AVX512', 'AVX2', 'DEFAULT', ...): the int4 kernel
    has an AVX-512 and an AVX2 body, and which one runs sets its speed."""
    torch = peers.torch()
    try:
        return str(torch.backends.cpu.get_cpu_capability())
    except (AttributeError, RuntimeError):
        return "unknown"


# --------------------------------------------------------------------------- swapping a model's linears
@dataclass
class KernelSwap:
    """Selected linears of a model and their kernel replacements: `install()` puts the kernel modules in,
    `remove()` the originals back (both cheap: the packing is done once). `skipped`: name -> reason."""

    scheme: str
    kernel: str
    model: Any
    swapped: dict[str, tuple[Any, str, Any, Any]] = field(default_factory=dict)
    """name -> (parent module, attribute, original module, kernel module)."""
    skipped: dict[str, str] = field(default_factory=dict)
    installed: bool = False

    def install(self) -> None:
        for parent, attribute, _, replacement in self.swapped.values():
            setattr(parent, attribute, replacement)
        self.installed = True

    def remove(self) -> None:
        for parent, attribute, original, _ in self.swapped.values():
            setattr(parent, attribute, original)
        self.installed = False

    @property
    def stored_bytes(self) -> int:
        """Bytes the kernels read (codes and scales of every swapped layer)."""
        return sum(entry[3].packed.stored_bytes for entry in self.swapped.values())


def prepare_swap(model: Any, scheme: str | Scheme, include: Sequence[str] = (), exclude: Sequence[str] | None = None,
                 activation: str = ACTIVATION_DTYPE, quantized: Mapping[str, Any] | None = None) -> KernelSwap:
    """Pack every selected nn.Linear (models.weights.linear_layers: the emulation's selection) for the scheme's
    kernel, without installing; a layer the kernel cannot take stays as it is, its reason in `skipped`.
    `quantized` (layer name -> QuantizedTensor, a PTQ result's) selects those layers instead and packs their
    stored codes. ValueError when the scheme has no exact kernel."""
    from precisionlab.models.weights import LINEAR, layer_kind, linear_layers

    plan = kernel_plan(scheme)
    if plan.kernel is None:
        raise ValueError(f"no kernel runs {plan.scheme}: {plan.reason}")
    swap = KernelSwap(plan.scheme, plan.kernel, model)
    modules = dict(model.named_modules())
    selected = (linear_layers(model, include, exclude) if quantized is None
                else {name: modules[name] for name in quantized})
    for name, module in selected.items():
        if layer_kind(module) != LINEAR:
            swap.skipped[name] = f"a {type(module).__name__}: the kernels replace nn.Linear layers"
            continue
        problem = layer_problem(plan.scheme, (int(module.weight.shape[0]), int(module.weight.shape[1])))
        if problem:
            swap.skipped[name] = problem
            continue
        parent_name, _, attribute = name.rpartition(".")
        parent = modules[parent_name] if parent_name else model
        source = None if quantized is None else quantized[name]
        swap.swapped[name] = (parent, attribute, module, kernel_linear(module, plan.scheme, activation, source))
    return swap


@contextlib.contextmanager
def kernel_linears(model: Any, scheme: str | Scheme, include: Sequence[str] = (),
                   exclude: Sequence[str] | None = None, activation: str = ACTIVATION_DTYPE,
                   quantized: Mapping[str, Any] | None = None) -> Iterator[KernelSwap]:
    """The model with its selected linears running the scheme's kernel; the originals are back on exit."""
    swap = prepare_swap(model, scheme, include, exclude, activation, quantized)
    swap.install()
    try:
        yield swap
    finally:
        swap.remove()


# --------------------------------------------------------------------------- the stated tolerance
UNITS = {"float32": 0.0, "bfloat16": BF16_UNIT, "float16": 2.0**-11}
"""The unit roundoff of a cast from float32 to each model dtype (0: none)."""


def output_rounding(packed: PackedWeight, dtype: Any = "float32") -> float:
    """t, the relative error of a KernelLinear's output chain in a model of `dtype` (a torch dtype or its name):
    the kernel's bf16 output, t = u; with the row scales on the output (int8, not bf16 scales), that bf16
    output times the scale in float32, then cast to the model's dtype: t = (1 + u)(1 + u32)(1 + u_dtype) - 1
    (u_dtype from UNITS). A bf16 kernel output casts exactly to float32 or bf16 (and to fp16 in its range)."""
    if packed.output_scales is None:
        return BF16_UNIT
    name = str(dtype).removeprefix("torch.")
    if name not in UNITS:
        raise ValueError(f"no rounding known for a model in {name}; one of {', '.join(UNITS)}")
    return (1 + BF16_UNIT) * (1 + FP32_UNIT) * (1 + UNITS[name]) - 1


def output_bound(x: Any, emulated: np.ndarray, k: int | None = None,
                 rounding: float = BF16_UNIT) -> tuple[np.ndarray, np.ndarray]:
    """(y, bound): the exact product y = x @ W_hat^T (float64, x as given, W_hat the emulation's weight) and the
    elementwise bound on a KernelLinear's deviation from it (bias excluded), with u = 2^-8 (bf16), gamma_K =
    K u32 / (1 - K u32) (fp32 accumulation in any order, u32 = 2^-24) and t = `rounding`, the relative error
    of the output chain (`output_rounding`: u for the kernel's bf16 output):

        |y_kernel - y| <= t |y| + (1 + t) (u + (1 + u) gamma_K) sum_k |x_k| |w_k|

    from the input rounded to bf16 (|dx| <= u |x|), the fp32 sum of the exact products (each FMA rounds once;
    with unit int8 scales the products x q are exact too), then the output's roundings: y_kernel =
    s (1 + theta), s the fp32 sum, |theta| <= t."""
    xs = np.asarray(x, dtype=np.float64).reshape(-1, emulated.shape[1])
    w = emulated.astype(np.float64)
    k = int(k or emulated.shape[1])
    gamma = k * FP32_UNIT / (1 - k * FP32_UNIT)
    u = BF16_UNIT
    y = xs @ w.T
    magnitude = np.abs(xs) @ np.abs(w).T
    bound = rounding * np.abs(y) + (1 + rounding) * (u + (1 + u) * gamma) * magnitude
    return y, bound


def bound_fraction(y_kernel: Any, x: Any, emulated: np.ndarray, rounding: float = BF16_UNIT) -> float:
    """max |y_kernel - y| / bound over the elements (see output_bound); at most 1 when the kernel keeps the
    stated tolerance. 0/0 (exact zero outputs) counts as 0."""
    y, bound = output_bound(x, emulated, rounding=rounding)
    diff = np.abs(np.asarray(y_kernel, dtype=np.float64).reshape(y.shape) - y)
    with np.errstate(invalid="ignore", divide="ignore"):
        ratio = np.where(bound > 0, diff / np.where(bound > 0, bound, 1.0), np.where(diff > 0, math.inf, 0.0))
    return float(ratio.max()) if ratio.size else 0.0
