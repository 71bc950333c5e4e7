"""One linear layer under every way of running it on the CPU, timed and broken down with torch.profiler.

    cases = [LinearCase("4096x4096", random_weight(4096, 4096))]
    rows = profile_linears(cases, ms=(1, 512), repeats=5)        # one LinearTiming per case, M and variant

Variants (the layer takes float32 activations (M, K) and returns float32 (M, N), as in a float32 model):

    fp32           F.linear in float32
    bf16           x and W in bf16 (W stored bf16), output cast back
    dequant_int8   unfused: W = int8 codes -> bf16, times the row scales, then the bf16 F.linear
    dequant_int4   unfused: two codes per byte unpacked, -8, -> bf16, times the group scales, bf16 F.linear
    fused_int8     torch _weight_int8pack_mm, bf16 activations (models.kernels: int8:row:scale=bf16)
    fused_int4     torch _weight_int4pack_mm_for_cpu, bf16 activations (int4:g128:scale=bf16; the kernel
                   group is 128 where K allows, else the largest of 64 / 32 that divides it)
    llamacpp_q8_0  llama.cpp's ggml mul_mat with Q8_0 weights (float32 activations, converted to Q8_0 inside)
    llamacpp_q4_0  the same with Q4_0 weights

The fused kernels also run with float32 activations at M = 1 (`FP32_ACTIVATION`: their scalar path), so
that the activations' dtype can be compared; at M = 512 that path would take minutes per call.

Per variant and M: `ms` = wall time per call, the fastest of `repeats` calls (at M = 1: at least
GEMV_REPEATS, and as many more rounds as fit GEMV_BUDGET_S) timed with perf_counter in an interleaved order
(every variant once per round, the order rotated each round; the fastest, because a shared machine only
ever slows a call down; the median is kept beside it), without the profiler
attached (torch.profiler adds 10-40 us per region on a loaded machine: more than a small GEMV takes);
`conversion_share` = the share of a call's ops' self CPU time that torch.profiler (CPU activities) attributes
to conversion (every op that is not a matmul: casts, dequantization, unpacking), the median over the same
rounds repeated under the profiler (a median: one preempted cast of a microsecond call would move a sum);
for llama.cpp, whose conversion happens inside one C call, the time of the activations' Q8_0 conversion
run on its own (GgmlMatmul.quantize_activations) over the call's time.
`weight_bytes` = the stored bytes of the weight as each variant reads them (codes and scales); `op` = the
matmul op torch.profiler saw take the most self time in the variant's calls (the evidence of which kernel
ran: aten::_weight_int4pack_mm_for_cpu for fused_int4; llama.cpp's ggml_mul_mat is one C call the profiler
does not see, named as such); `weights` = what the weight is (dtype, or scheme and kernel group).
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from precisionlab import peers
from precisionlab.models import kernels

INT8_SCHEME = "int8:row:scale=bf16"
INT4_SCHEME = "int4:g128:scale=bf16"
TORCH_VARIANTS = ("fp32", "bf16", "dequant_int8", "dequant_int4", "fused_int8", "fused_int4")
LLAMACPP_VARIANTS = ("llamacpp_q8_0", "llamacpp_q4_0")
VARIANTS = TORCH_VARIANTS + LLAMACPP_VARIANTS
FP32_ACTIVATION = {"fused_int8": "fused_int8_fp32act", "fused_int4": "fused_int4_fp32act"}
"""The fused kernels' float32-activation runs (M = 1 only), by the variant they shadow."""
GEMV_REPEATS = 15
"""At M = 1 a call takes milliseconds and a loaded machine preempts many of them: at least this many."""
GEMV_BUDGET_S = 0.5
GEMV_MAX_ROUNDS = 500
"""At M = 1 the rounds go on until they have taken GEMV_BUDGET_S seconds (at most GEMV_MAX_ROUNDS): a small
layer's call takes microseconds, and the fastest of 15 such calls on a loaded machine moved fp32 / fused int4
on the 256 x 256 layer between 0.47 and 0.63 within one run (and 0.6-1.4 between runs); the fastest of 500
held it at 0.49-0.52. A large layer's 15 rounds already take longer than the budget."""
MATMUL_OPS = frozenset({"aten::mm", "aten::addmm", "aten::bmm", "aten::matmul", "aten::linear", "aten::mv",
                        "aten::addmv", *kernels.KERNEL_OPS.values()})
"""Ops whose self time counts as the matmul; every other op inside a call counts as conversion."""
EXPECTED_OPS = {name: kernels.KERNEL_OPS[kernels.TORCH_INT8 if "int8" in name else kernels.TORCH_INT4]
                for name in ("fused_int8", "fused_int4", "fused_int8_fp32act", "fused_int4_fp32act")}
"""The op each fused variant must be seen running; a row whose `op` differs says so in its note."""
LLAMACPP_OP = "ggml_mul_mat (llama.cpp: one C call, not a torch op)"
MATH = {"fp32": "fp32", "bf16": "bf16", "dequant_int8": "bf16", "dequant_int4": "bf16", "fused_int8": "fp32",
        "fused_int4": "fp32", "llamacpp_q8_0": "fp32", "llamacpp_q4_0": "fp32"}
"""The unit each variant's arithmetic runs on, whose measured matmul rate is its FLOP ceiling: the fused
torch kernels multiply in float32 FMAs (their source), llama.cpp in integer dot products (no int8 ceiling is
measured; float32 is the reference)."""


@dataclass
class LinearCase:
    """A named (N, K) float32 weight to profile."""

    name: str
    weight: Any


@dataclass
class LinearTiming:
    case: str
    variant: str
    m: int
    n: int
    k: int
    activation: str
    ms: float
    samples: list[float] = field(default_factory=list)
    conversion_share: float = math.nan
    profiler_ms: float = math.nan
    """The call's time under torch.profiler (region total, its overhead included)."""
    weight_bytes: int = 0
    rel_diff: float = math.nan
    """||y - x W_hat^T|| / ||x W_hat^T|| with W_hat the variant's own weight (Variant.emulated): a check that the
    call computes this layer on its grid (the rest is the activations' rounding and the accumulation)."""
    median_ms: float = math.nan
    note: str = ""
    op: str = ""
    """The matmul op torch.profiler saw take the most self time in the calls (see the module)."""
    weights: str = ""
    """The weight as the variant holds it: a dtype, or the scheme and the kernel group."""

    @property
    def flops(self) -> float:
        return 2.0 * self.m * self.n * self.k

    @property
    def gbps(self) -> float:
        """Weight bytes read per second."""
        return self.weight_bytes / (self.ms * 1e-3) / 1e9 if self.ms > 0 else math.nan

    @property
    def gflops(self) -> float:
        return self.flops / (self.ms * 1e-3) / 1e9 if self.ms > 0 else math.nan


def random_weight(n: int, k: int, seed: int = 0) -> Any:
    """An (N, K) float32 weight with entries N(0, 1/K) (a fan-in initialisation)."""
    torch = peers.torch()
    generator = torch.Generator().manual_seed(seed)
    return torch.randn(n, k, generator=generator) / math.sqrt(k)


@dataclass
class Variant:
    """A ready call: run() computes y for the case's input; convert() (llama.cpp) only the conversion."""

    name: str
    activation: str
    weight_bytes: int
    run: Callable[[], Any]
    output: Callable[[], np.ndarray]
    emulated: np.ndarray | None = None
    """The weight the output should match: W (fp32), bf16(W), or the scheme's dequantized weight."""
    convert: Callable[[], Any] | None = None
    close: Callable[[], None] = lambda: None
    note: str = ""
    weights: str = ""


def _torch_variant(name: str, weight: Any, x: Any) -> Variant:
    torch = peers.torch()
    linear = torch.nn.functional.linear
    bf16 = torch.bfloat16
    box: dict[str, Any] = {}
    activation = "bfloat16"
    if name == "fp32":
        run: Callable[[], Any] = lambda: linear(x, weight)  # noqa: E731
        activation, nbytes, emulated, weights = "float32", weight.numel() * 4, weight.numpy(), "float32"
    elif name == "bf16":
        w16 = weight.to(bf16)
        run = lambda: linear(x.to(bf16), w16).float()  # noqa: E731
        nbytes, emulated, weights = w16.numel() * 2, w16.float().numpy(), "bfloat16"
    elif name == "dequant_int8":
        packed = kernels.pack(weight, INT8_SCHEME)
        codes, scales = packed.codes, packed.scales
        nbytes, emulated, weights = packed.stored_bytes, packed.emulated, INT8_SCHEME
        run = lambda: linear(x.to(bf16), codes.to(bf16) * scales[:, None]).float()  # noqa: E731
    elif name == "dequant_int4":
        nibbles, group_scales, g, emulated = _plain_int4(weight)
        n, k = weight.shape
        nbytes, weights = nibbles.numel() + group_scales.numel() * 2, f"{INT4_SCHEME} (groups of {g})"

        def run() -> Any:
            codes = torch.stack([nibbles & 15, nibbles >> 4], dim=-1).reshape(n, k // g, g)
            w = ((codes.to(bf16) - 8) * group_scales[:, :, None]).reshape(n, k)
            return linear(x.to(bf16), w).float()
    else:  # fused_int8, fused_int4 and their fp32act runs: the kernel as models.kernels calls it
        activation = "float32" if name.endswith("fp32act") else "bfloat16"
        scheme = INT8_SCHEME if name.startswith("fused_int8") else INT4_SCHEME
        packed = kernels.pack(weight, scheme, activation)
        nbytes, emulated, dtype = packed.stored_bytes, packed.emulated, getattr(torch, activation)
        weights = scheme if scheme == INT8_SCHEME else f"{scheme} (kernel group {packed.group})"
        run = lambda: kernels.kernel_matmul(packed, x.to(dtype)).float()  # noqa: E731

    def call() -> Any:
        box["y"] = run()
        return box["y"]

    return Variant(name, activation, int(nbytes), call, lambda: box["y"].double().numpy(), emulated,
                   weights=weights)


def _plain_int4(weight: Any) -> tuple[Any, Any, int, np.ndarray]:
    """INT4_SCHEME's codes two to a byte (low nibble: even input, high: odd) as uint8 (N, K/2), unsigned
    (code + 8), its bf16 scales per kernel group (N, K/g), the group and the dequantized weight: the unfused
    path's stored form."""
    torch = peers.torch()
    values, divisors, emulated = kernels.code_values(weight, INT4_SCHEME)
    k = values.shape[1]
    g = kernels.kernel_group(INT4_SCHEME, k)
    unsigned = (values + 8).astype(np.uint8)
    nibbles = torch.from_numpy(np.ascontiguousarray(unsigned[:, 0::2] | (unsigned[:, 1::2] << 4)))
    scales = torch.from_numpy(np.ascontiguousarray(divisors[:, ::g])).to(torch.bfloat16)
    return nibbles, scales, g, emulated


def _llamacpp_variant(name: str, weight: Any, x: Any, threads: int) -> Variant:
    from precisionlab.models.ggml_matmul import GgmlMatmul
    from precisionlab.quant import quantize

    kind = {"llamacpp_q8_0": "Q8_0", "llamacpp_q4_0": "Q4_0"}[name]
    mm = GgmlMatmul(weight.numpy(), kind, int(x.shape[0]), threads)
    mm.set_input(x.numpy())
    emulated = quantize(weight.numpy(), f"gguf_{kind.lower()}").dequantize()
    return Variant(name, "float32 (Q8_0 inside)", mm.weight_bytes, mm.run, lambda: mm.output().astype(np.float64),
                   emulated, convert=mm.quantize_activations, close=mm.close, weights=f"gguf {kind}")


def build_variants(weight: Any, x: Any, names: Sequence[str], threads: int = 1) -> tuple[list[Variant], dict[str, str]]:
    """The ready variants for one weight and input, and name -> reason for the ones that cannot run here."""
    from precisionlab.models import ggml_matmul

    ready: list[Variant] = []
    skipped: dict[str, str] = {}
    for name in names:
        try:
            if name.startswith("llamacpp"):
                reason = ggml_matmul.missing_reason()
                if reason:
                    skipped[name] = reason
                    continue
                ready.append(_llamacpp_variant(name, weight, x, threads))
            else:
                ready.append(_torch_variant(name, weight, x))
        except ValueError as exc:  # a shape the kernel does not take
            skipped[name] = str(exc)
    return ready, skipped


def _rotated(items: list[Any], shift: int) -> list[Any]:
    shift %= max(1, len(items))
    return items[shift:] + items[:shift]


def _self_times(event: Any, matmuls: dict[str, float] | None = None) -> tuple[float, float]:
    """(conversion, matmul) self CPU microseconds of the ops below a profiler region; `matmuls` (optional)
    accumulates each matmul op's self time by name."""
    conversion = matmul = 0.0
    stack = list(event.cpu_children)
    while stack:
        child = stack.pop()
        if child.name in MATMUL_OPS:
            matmul += child.self_cpu_time_total
            if matmuls is not None:
                matmuls[child.name] = matmuls.get(child.name, 0.0) + child.self_cpu_time_total
        else:
            conversion += child.self_cpu_time_total
        stack.extend(child.cpu_children)
    return conversion, matmul


@dataclass(frozen=True)
class Shares:
    """What the profiled rounds say of one variant: the conversion share, the median ms per call under the
    profiler, and the matmul op with the most self time ("" when the profiler saw none: llama.cpp)."""

    share: float
    ms: float
    op: str


def time_variants(variants: Sequence[Variant], repeats: int, budget_s: float = 0.0,
                  max_rounds: int = 0) -> dict[str, list[float]]:
    """Wall milliseconds per call of each variant, interleaved (one warm-up call each first): `repeats` rounds,
    then more until the rounds have taken `budget_s` seconds or there are `max_rounds` of them."""
    for v in variants:
        v.run()
    samples: dict[str, list[float]] = {v.name: [] for v in variants}
    began = time.perf_counter()
    r = 0
    while r < repeats or (time.perf_counter() - began < budget_s and r < max_rounds):
        for v in _rotated(list(variants), r):
            start = time.perf_counter()
            v.run()
            samples[v.name].append((time.perf_counter() - start) * 1e3)
        r += 1
    return samples


def profile_shares(variants: Sequence[Variant], repeats: int) -> dict[str, Shares]:
    """name -> Shares (conversion share, median profiler ms per call, the matmul op) over `repeats` interleaved
    rounds under torch.profiler (llama.cpp: the separately run conversion over the call, both timed inside the
    profiler)."""
    profiler = peers.torch_profiler()
    with profiler.profile(activities=[profiler.ProfilerActivity.CPU]) as prof:
        for r in range(repeats):
            for v in _rotated(list(variants), r):
                with profiler.record_function(f"plab::{v.name}"):
                    v.run()
                if v.convert is not None:
                    with profiler.record_function(f"plab::{v.name}::convert"):
                        v.convert()
    totals: dict[str, list[float]] = {}
    parts: dict[str, list[float]] = {}
    matmuls: dict[str, dict[str, float]] = {}
    for event in prof.events():
        if not event.name.startswith("plab::"):
            continue
        label = event.name[len("plab::"):]
        if label.endswith("::convert"):
            parts.setdefault(label[: -len("::convert")], []).append(event.cpu_time_total)
            continue
        totals.setdefault(label, []).append(event.cpu_time_total)
        conversion, matmul = _self_times(event, matmuls.setdefault(label, {}))
        if event.cpu_children and conversion + matmul > 0:
            parts.setdefault(f"{label}::ops", []).append(conversion / (conversion + matmul))
    out: dict[str, Shares] = {}
    for v in variants:
        total = totals.get(v.name, [])
        ms = statistics.median(total) / 1e3 if total else math.nan
        if v.convert is not None:
            converted = parts.get(v.name, [])
            share = statistics.median(converted) / statistics.median(total) if converted and total else math.nan
        else:
            calls = parts.get(f"{v.name}::ops", [])  # the median call's share: one preempted cast moves no more
            share = statistics.median(calls) if calls else math.nan
        seen = matmuls.get(v.name, {})
        op = max(seen, key=lambda name: seen[name]) if seen else ""
        out[v.name] = Shares(min(share, 1.0) if math.isfinite(share) else share, ms, op)
    return out


def profile_linears(cases: Sequence[LinearCase], ms: Sequence[int] = (1, 512), variants: Sequence[str] = VARIANTS,
                    repeats: int = 5, threads: int = 1, seed: int = 0,
                    progress: Callable[[str], None] | None = None) -> tuple[list[LinearTiming], dict[str, str]]:
    """Every variant on every case at every M (see the module; at M = 1 at least GEMV_REPEATS repeats); returns
    the timings and, per 'case/variant/m', the reason a variant could not run there. torch runs `threads`
    threads meanwhile (peers.torch_threads: restored after)."""
    torch = peers.torch()
    note = progress or (lambda _line: None)
    rows: list[LinearTiming] = []
    skipped: dict[str, str] = {}
    with peers.torch_threads(threads), torch.inference_mode():
        for case in cases:
            weight = case.weight.detach().float().contiguous()
            k = int(weight.shape[1])
            for m in ms:
                generator = torch.Generator().manual_seed(seed + m)
                x = torch.randn(m, k, generator=generator)
                names = list(variants)
                if m == 1:
                    names += [FP32_ACTIVATION[v] for v in variants if v in FP32_ACTIVATION]
                ready, missing = build_variants(weight, x, names, threads)
                skipped.update({f"{case.name}/{name}/m{m}": why for name, why in missing.items()})
                try:
                    rows.extend(_measure(case.name, ready, weight, x, max(repeats, GEMV_REPEATS) if m == 1
                                         else repeats, GEMV_BUDGET_S if m == 1 else 0.0))
                finally:
                    for v in ready:
                        v.close()
                note(f"profiled {case.name} at M={m} ({len(ready)} variants)")
    return rows, skipped


def _measure(case: str, ready: list[Variant], weight: Any, x: Any, repeats: int,
             budget_s: float = 0.0) -> list[LinearTiming]:
    n, k = (int(d) for d in weight.shape)
    m = int(x.shape[0])
    xs = x.double().numpy()
    samples = time_variants(ready, repeats, budget_s, GEMV_MAX_ROUNDS)
    shares = profile_shares(ready, max(2, repeats // 2))
    rows = []
    for v in ready:
        v.run()
        diff = math.nan
        if v.emulated is not None:
            expected = xs @ v.emulated.astype(np.float64).T
            norm = float(np.linalg.norm(expected))
            diff = float(np.linalg.norm(v.output() - expected)) / norm if norm > 0 else math.nan
        seen = shares[v.name]
        op = LLAMACPP_OP if v.convert is not None and not seen.op else seen.op
        note = v.note
        expected = EXPECTED_OPS.get(v.name)
        if expected is not None and op != expected:
            note = f"{note} expected {expected} to run; torch.profiler saw {op or 'no matmul op'}".strip()
        rows.append(LinearTiming(case, v.name, m, n, k, v.activation, min(samples[v.name]), samples[v.name],
                                 seen.share, seen.ms, v.weight_bytes, diff, statistics.median(samples[v.name]), note,
                                 op, v.weights))
    return rows


# --------------------------------------------------------------------------- a whole decode step (Amdahl)
def greedy_decode(model: Any, prompt: Any) -> Generator[Any, Any, None]:
    """Batch-1 greedy decoding over the model's own KV cache (a transformers DynamicCache, handed over by
    models.hooks.cache_kwargs): the first next() runs the prompt and yields the next token; each send(token)
    runs one decode step on it and yields the following token."""
    from precisionlab.models.hooks import cache_kwargs

    cache = peers.transformers().DynamicCache(config=model.config)
    kwargs = cache_kwargs(model, cache)
    logits = model(input_ids=prompt, **kwargs).logits
    while True:
        token = yield logits[:, -1:].argmax(-1)
        logits = model(input_ids=token, **kwargs).logits


@dataclass
class DecodeProfile:
    """Per decode step (batch 1, one new token over the KV cache), torch.profiler's wall microseconds:
    the whole step, its nn.Linear calls (block linears and the output head apart)."""

    steps: int
    step_us: list[float]
    linear_us: list[float]
    block_us: list[float]

    @property
    def linear_share(self) -> float:
        return sum(self.linear_us) / sum(self.step_us)

    @property
    def block_share(self) -> float:
        return sum(self.block_us) / sum(self.step_us)

    @property
    def step_ms(self) -> float:
        return statistics.median(self.step_us) / 1e3


def decode_profile(model: Any, prompt: Any, steps: int, block_names: Sequence[str]) -> DecodeProfile:
    """Profile `steps` greedy decode steps after a prefill of `prompt` (token ids, shape (1, P)); every
    nn.Linear (and KernelLinear) call is a profiler region, the ones named in `block_names` counted apart."""
    torch = peers.torch()
    profiler = peers.torch_profiler()

    kernel_class: Any = kernels.kernel_linear_class()
    blocks = set(block_names)
    handles, open_regions = [], []
    module: Any
    for name, module in model.named_modules():
        if isinstance(module, (torch.nn.Linear, kernel_class)):
            label = f"plab::linear::{'block' if name in blocks else 'other'}"

            def pre(_m: Any, _a: Any, label: str = label) -> None:
                region = profiler.record_function(label)
                region.__enter__()
                open_regions.append(region)

            def post(_m: Any, _a: Any, _o: Any) -> None:
                open_regions.pop().__exit__(None, None, None)

            handles += [module.register_forward_pre_hook(pre), module.register_forward_hook(post)]
    try:
        with torch.inference_mode():
            decoding = greedy_decode(model, prompt)
            token = next(decoding)
            with profiler.profile(activities=[profiler.ProfilerActivity.CPU]) as prof:
                for _ in range(steps):
                    with profiler.record_function("plab::step"):
                        token = decoding.send(token)
    finally:
        for handle in handles:
            handle.remove()
    step_us: list[float] = []
    linear_us: list[float] = []
    block_us: list[float] = []
    for event in prof.events():
        if event.name != "plab::step":
            continue
        step_us.append(event.cpu_time_total)
        linear = block = 0.0
        stack = list(event.cpu_children)
        while stack:
            child = stack.pop()
            if child.name.startswith("plab::linear::"):
                linear += child.cpu_time_total
                block += child.cpu_time_total if child.name.endswith("::block") else 0.0
            else:
                stack.extend(child.cpu_children)
        linear_us.append(linear)
        block_us.append(block)
    return DecodeProfile(steps, step_us, linear_us, block_us)


# --------------------------------------------------------------------------- this machine's ceilings
@dataclass
class Machine:
    """This CPU's measured ceilings under `threads` torch threads: the copy bandwidth and the best torch matmul
    rate per precision (fp32, bf16)."""

    copy_gbps: float
    copy_kernel: str
    matmul_gflops: dict[str, float]
    matmul_shapes: dict[str, str]
    threads: int
    read_gbps: float = math.nan
    """A read-only stream (torch.sum over the copy's source): what a GEMV's weight read can approach."""

    def ceiling(self, precision: str) -> float:
        return self.matmul_gflops.get(precision, math.nan)


COPY_ELEMENTS = 1 << 24
"""float32 elements of the copy-bandwidth test: 64 MB each way, the 4096 x 4096 fp32 weight's size."""
COPY_REPEATS = 15


def copy_bandwidth(repeats: int = COPY_REPEATS, n: int = COPY_ELEMENTS) -> tuple[float, str]:
    """(GB/s, kernel): the fastest of `repeats` interleaved calls of torch's copy dst <- src and in-place scale
    y <- 1.0 y over n float32 elements, 2 n 4 bytes each (the in-place scale has no write-allocate traffic the
    count misses). The fastest, as the layers' times are: a shared machine only slows a call down."""
    torch = peers.torch()
    src = torch.rand(n)
    dst = torch.empty(n)
    kernels_ = {"torch copy_": lambda: dst.copy_(src), "torch in-place scale": lambda: dst.mul_(1.0)}
    best = {name: math.inf for name in kernels_}
    for fn in kernels_.values():
        fn()
    for _ in range(repeats):
        for name, fn in kernels_.items():
            start = time.perf_counter()
            fn()
            best[name] = min(best[name], time.perf_counter() - start)
    name = min(best, key=lambda k: best[k])
    return 2.0 * n * 4 / best[name] / 1e9, f"{name}, fastest of {repeats}"


def read_bandwidth(repeats: int = COPY_REPEATS, n: int = COPY_ELEMENTS) -> float:
    """GB/s of the fastest of `repeats` torch.sum calls over n float32 elements (n 4 bytes read, nothing written)."""
    torch = peers.torch()
    src = torch.rand(n)
    src.sum()
    best = math.inf
    for _ in range(repeats):
        start = time.perf_counter()
        src.sum()
        best = min(best, time.perf_counter() - start)
    return n * 4 / best / 1e9


def measure_machine(threads: int = 1, budget_s: float = 0.3, size: int = 1024) -> Machine:
    """Copy bandwidth and matmul ceilings (gemm.timing's torch matmuls), measured now with `threads` torch
    threads (restored after)."""
    from precisionlab.gemm.timing import matmul_timings

    with peers.torch_threads(threads):
        copy_gbps, copy_kernel = copy_bandwidth()
        read_gbps = read_bandwidth()
        timings = [t for t in matmul_timings(size, size, size, budget_s) if t.library == "torch"]
    best: dict[str, float] = {}
    shapes: dict[str, str] = {}
    for t in timings:
        if t.precision in ("fp32", "bf16") and t.gflops > best.get(t.precision, 0.0):
            best[t.precision], shapes[t.precision] = t.gflops, t.shape
    return Machine(copy_gbps, copy_kernel, best, shapes, threads, read_gbps)
