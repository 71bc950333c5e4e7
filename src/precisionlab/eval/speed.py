"""Speed beside quality: decode and prefill tokens per second of the reference and of each candidate that a
real kernel runs (models.kernels), measured in one run, interleaved, with the ratio and its spread.

    run = measure_speed(loaded, [speed_candidate(c) for c in parse_candidates(["int8:row:scale=bf16"])])
    run.row("int8:row:scale=bf16").decode_ratio          # median of the paired per-repetition ratios
    result.add(speed_part(run))                          # the `speed` table and eval.speed.* findings

What is measured (batch 1, greedy, the model's own KV cache): prefill = one forward over a fixed prompt of
`prompt_tokens` tokens from the built-in evaluation text; decode = `new_tokens` single-token steps after it.
tokens/s = tokens / wall seconds. Every repetition runs every variant (the reference and each kernel
candidate) once, in an order rotated by one each repetition so no variant always runs first or last; the
ratio of a repetition is candidate / reference of that repetition (paired: both saw the same machine load);
the reported ratio is the median over repetitions, its spread the smallest and largest. torch runs
`threads` threads (default 1: on a shared machine one thread per process is what is reproducible).

A candidate runs on a kernel when its weights' scheme is one a torch kernel runs exactly (`kernel_plan`:
int8:row with its fp16 scales does, the scales multiplying the kernel's output); otherwise it says "no
kernel: emulated only" and why (int4 with fp16 group scales: the bf16-scale twin runs, and `kernel_twins`
adds it to `eval --speed`'s candidates so the model timed is also judged; activations or KV cache quantized
at run time; a codebook or float element...). Before timing, each kernel candidate is checked against its
emulation on the prompt: every swapped layer's output must lie within `models.kernels.output_bound` of the
exact product of its input with the emulated weight (bound_fraction <= 1), the KL divergence of the kernel
path's next-token distributions from the emulation's is reported beside it (`kl_to_emulation`, nats per
token), and torch.profiler counts the kernel op's calls in that forward (`op_calls`: one per swapped layer
when the kernel really ran). The conditions are recorded beside the ratios: threads, the 1-minute load
average at the start and the end, torch's CPU capability, the activations' and the model's dtypes.
"""

from __future__ import annotations

import contextlib
import math
import os
import statistics
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from precisionlab import peers
from precisionlab.models import kernels
from precisionlab.results import Part, Scalar, Table

PROMPT_TOKENS = 128
NEW_TOKENS = 32
REPETITIONS = 5
THREADS = 1
NO_KERNEL = "no kernel: emulated only"


@dataclass(frozen=True)
class SpeedCandidate:
    """What the speed measurement needs of a candidate: its label, its weights' scheme, and optionally a PTQ
    method's stored codes per layer (`quantized`: name -> QuantizedTensor; then those layers are the ones
    swapped) with `prepare(model)`, which installs its emulation and returns an object with restore()."""

    label: str
    scheme: str | None
    reason: str = ""
    """Why it has no kernel when that is known before the scheme is looked at ("" otherwise)."""
    quantized: Mapping[str, Any] | None = None
    prepare: Callable[[Any], Any] | None = None


def speed_candidate(candidate: Any) -> SpeedCandidate:
    """The speed view of an eval Candidate: weight-only scheme candidates can have a kernel; a candidate that
    quantizes activations or the KV cache at run time, or that installs its own weights, has none."""
    if candidate.act or candidate.kv:
        return SpeedCandidate(candidate.label, candidate.weights,
                              "the activations or the KV cache are quantized at run time, which no kernel here does")
    if candidate.prepare is not None:
        return SpeedCandidate(candidate.label, candidate.weights,
                              "it installs its own weights; pass its stored codes (ptq.speed.ptq_speed_candidate)")
    if candidate.weights is None:
        return SpeedCandidate(candidate.label, None, "it quantizes no weight")
    return SpeedCandidate(candidate.label, candidate.weights)


def kernel_twins(specs: Sequence[str]) -> list[str]:
    """The specs, each weight-only scheme without an exact kernel followed by the bf16-scale twin a kernel
    runs (int4:g128 -> int4:g128:scale=bf16), so that the model that runs is also evaluated; repeats dropped."""
    out: list[str] = []
    for label in specs:
        out += [label, *twin_lines([label])]
    return list(dict.fromkeys(out))


def twin_lines(specs: Sequence[str]) -> dict[str, str]:
    """twin -> the one line that says why `kernel_twins` adds it, for each spec that has one."""
    from precisionlab.eval.candidates import parse_candidates

    lines: dict[str, str] = {}
    for candidate in parse_candidates(list(specs)):
        if candidate.weights and not (candidate.act or candidate.kv):
            plan = kernels.kernel_plan(candidate.weights)
            if plan.kernel is None and plan.runs is not None:
                lines[plan.runs] = twin_line(candidate.label, plan)
    return lines


def twin_line(label: str, plan: kernels.KernelPlan) -> str:
    """Why the bf16-scale twin `plan.runs` of the candidate `label` (which has no exact kernel) is measured and
    evaluated too, in one line."""
    from precisionlab.quant import parse_scheme

    scale = parse_scheme(plan.scheme).scale
    kernel = "int4" if kernels.kernel_plan(plan.runs or plan.scheme).kernel == kernels.TORCH_INT4 else "int8"
    return (f"{label} keeps {scale} scales, which no kernel here takes; its bf16-scale twin {plan.runs} runs on the "
            f"{kernel} kernel and is evaluated too, so the model timed is the model judged")


# --------------------------------------------------------------------------- results
@dataclass
class SpeedRow:
    label: str
    kernel: str | None
    note: str
    runs: str | None = None
    decode: list[float] = field(default_factory=list)
    """tokens/s per repetition."""
    prefill: list[float] = field(default_factory=list)
    layers: int = 0
    skipped: dict[str, str] = field(default_factory=dict)
    kernel_bytes: int = 0
    bound_fraction: float = math.nan
    kl_to_emulation: float = math.nan
    op: str = ""
    """The kernel's op as torch.profiler names it (models.kernels.KERNEL_OPS)."""
    op_calls: int = 0
    """Its calls in one forward of the kernel path over the prompt (== layers when every swapped layer ran it)."""
    twin_line: str = ""
    """A row without a kernel whose bf16-scale twin runs: why that twin is measured (and evaluated) too."""


@dataclass
class SpeedRun:
    reference_decode: list[float]
    reference_prefill: list[float]
    rows: list[SpeedRow]
    settings: dict[str, Scalar]

    def row(self, label: str) -> SpeedRow:
        for row in self.rows:
            if row.label == label:
                return row
        raise KeyError(f"no speed row {label!r}")

    def ratios(self, row: SpeedRow, what: str = "decode") -> list[float]:
        """candidate / reference tokens/s per repetition (paired)."""
        mine = row.decode if what == "decode" else row.prefill
        ref = self.reference_decode if what == "decode" else self.reference_prefill
        return [a / b for a, b in zip(mine, ref, strict=True)]


# --------------------------------------------------------------------------- measuring
def check_settings(prompt_tokens: int, new_tokens: int, repetitions: int, threads: int) -> None:
    """ValueError unless every count is a positive integer (repetitions at least 2: one ratio has no spread)."""
    for label, value, least in (("prompt_tokens", prompt_tokens, 1), ("new_tokens", new_tokens, 1),
                                ("repetitions", repetitions, 2), ("threads", threads, 1)):
        if isinstance(value, bool) or not isinstance(value, int) or value < least:
            raise ValueError(f"{label} must be an integer >= {least}, got {value!r}")


def measure_speed(loaded: Any, candidates: Sequence[SpeedCandidate], include: Sequence[str] = (),
                  exclude: Sequence[str] | None = None, prompt_tokens: int = PROMPT_TOKENS,
                  new_tokens: int = NEW_TOKENS, repetitions: int = REPETITIONS, threads: int = THREADS,
                  progress: Any = None) -> SpeedRun:
    """Decode and prefill tokens/s of the reference and each kernel candidate, interleaved (see the module)."""
    check_settings(prompt_tokens, new_tokens, repetitions, threads)
    if loaded.kind != "causal-lm":
        raise ValueError(f"speed is measured on causal LMs (decode tokens/s); {loaded.name} is a {loaded.kind}")
    torch = peers.torch()
    note = getattr(progress, "note", None) or getattr(progress, "done", None) or (lambda _line: None)
    prompt = torch.tensor([prompt_ids(loaded, prompt_tokens)])
    load_start = os.getloadavg()[0] if hasattr(os, "getloadavg") else math.nan
    rows: list[SpeedRow] = []
    swaps: dict[str, kernels.KernelSwap] = {}
    with peers.torch_threads(threads), torch.inference_mode():
        for candidate in candidates:
            row, swap = _plan_row(loaded, candidate, include, exclude)
            rows.append(row)
            if swap is not None:
                _check(loaded, candidate, swap, row, prompt, include, exclude)
                swaps[row.label] = swap
                note(f"speed: {row.label} on {row.kernel} ({row.layers} layers, {row.op} ran {row.op_calls} times "
                     f"a forward; within {row.bound_fraction:.2g} of the stated bound)")
        variants: list[tuple[str, kernels.KernelSwap | None]] = [("reference", None), *swaps.items()]
        times: dict[str, tuple[list[float], list[float]]] = {label: ([], []) for label, _ in variants}
        for _label, swap in variants:  # warm-up: first calls allocate
            with _installed(swap):
                _generate(loaded.model, prompt[:, : min(8, prompt.shape[1])], 2)
        for rep in range(repetitions):
            order = variants[rep % len(variants):] + variants[: rep % len(variants)]
            for label, swap in order:
                with _installed(swap):
                    prefill_s, decode_s = _generate(loaded.model, prompt, new_tokens)
                times[label][0].append(prompt.shape[1] / prefill_s)
                times[label][1].append(new_tokens / decode_s)
            note(f"speed: repetition {rep + 1}/{repetitions}")
    for row in rows:
        if row.label in times:
            row.prefill, row.decode = times[row.label]
    settings: dict[str, Scalar] = {"prompt_tokens": int(prompt.shape[1]), "new_tokens": new_tokens,
                                   "repetitions": repetitions, "threads": threads,
                                   "activations": kernels.ACTIVATION_DTYPE, "model_dtype": loaded.dtype,
                                   "load_average_start": load_start,
                                   "load_average_end": os.getloadavg()[0] if hasattr(os, "getloadavg") else math.nan,
                                   "cpu_capability": kernels.cpu_capability()}
    return SpeedRun(times["reference"][1], times["reference"][0], rows, settings)


def prompt_ids(loaded: Any, tokens: int) -> list[int]:
    """The first `tokens` token ids of the built-in evaluation text (after the BOS / EOS start token)."""
    from precisionlab.eval import data, scoring

    lm = scoring.CausalLM(loaded.model, loaded.tokenizer, loaded.max_length)
    ids = [lm.prefix_id]
    for doc in data.ppl_documents(data.builtin_split(), 40):
        ids += lm.encode(doc.text + "\n\n")
        if len(ids) >= tokens:
            break
    if len(ids) < tokens:
        raise ValueError(f"the built-in text holds {len(ids)} tokens, fewer than the {tokens} asked for")
    return ids[: min(tokens, loaded.max_length - 1)]


@contextlib.contextmanager
def _installed(swap: kernels.KernelSwap | None) -> Iterator[None]:
    if swap is None:
        yield
        return
    swap.install()
    try:
        yield
    finally:
        swap.remove()


def _plan_row(loaded: Any, candidate: SpeedCandidate, include: Sequence[str],
              exclude: Sequence[str] | None) -> tuple[SpeedRow, kernels.KernelSwap | None]:
    if candidate.reason or candidate.scheme is None:
        return SpeedRow(candidate.label, None, f"{NO_KERNEL} ({candidate.reason or 'no weight scheme'})"), None
    plan = kernels.kernel_plan(candidate.scheme)
    if plan.kernel is None:
        twin = f"; {plan.runs} runs on torch's kernel" if plan.runs else ""
        return SpeedRow(candidate.label, None, f"{NO_KERNEL} ({plan.reason}{twin})", runs=plan.runs,
                        twin_line=twin_line(candidate.label, plan) if plan.runs else ""), None
    swap = kernels.prepare_swap(loaded.model, plan.scheme, include, exclude, quantized=candidate.quantized)
    if not swap.swapped:
        reasons = sorted(set(swap.skipped.values()))
        return SpeedRow(candidate.label, None, f"{NO_KERNEL} (no selected layer fits the kernel: "
                                               f"{'; '.join(reasons) or 'no layer selected'})"), None
    notes = [f"{plan.scheme}: {plan.how}"] if plan.how else []
    if swap.skipped:
        notes.append(f"{len(swap.skipped)} selected layers stay emulated: "
                     f"{'; '.join(sorted(set(swap.skipped.values())))}")
    row = SpeedRow(candidate.label, plan.kernel, "; ".join(notes), runs=plan.runs, layers=len(swap.swapped),
                   skipped=dict(swap.skipped), kernel_bytes=swap.stored_bytes, op=kernels.KERNEL_OPS[plan.kernel])
    return row, swap


def _check(loaded: Any, candidate: SpeedCandidate, swap: kernels.KernelSwap, row: SpeedRow, prompt: Any,
           include: Sequence[str], exclude: Sequence[str] | None) -> None:
    """Fill row.bound_fraction (every swapped layer's output on its emulated-model input, against
    models.kernels.output_bound) and row.kl_to_emulation (next-token KL of the kernel path from the emulation)."""
    from precisionlab.models.weights import quantize_weights

    torch = peers.torch()
    model = loaded.model
    report = (candidate.prepare(model) if candidate.prepare is not None
              else quantize_weights(model, candidate.scheme or "", include, exclude))
    fractions: list[float] = []
    handles = []

    def hook_for(replacement: Any) -> Callable[..., None]:
        def hook(_module: Any, args: tuple[Any, ...], _output: Any) -> None:
            x = args[0]
            y = replacement(x)
            if replacement.bias is not None:
                y = y - replacement.bias  # the bound covers the matmul; the fp32 bias add is one more rounding
            rounding = kernels.output_rounding(replacement.packed, x.dtype)
            fractions.append(kernels.bound_fraction(y.double().numpy(), x.double().numpy(),
                                                    replacement.packed.emulated, rounding))

        return hook

    try:
        for _parent, _attribute, original, replacement in swap.swapped.values():
            handles.append(original.register_forward_hook(hook_for(replacement)))
        try:
            emulated = model(input_ids=prompt, use_cache=False).logits[0].double()
        finally:
            for handle in handles:
                handle.remove()
        box: dict[str, Any] = {}
        with _installed(swap):
            counts = kernels.op_calls(lambda: box.update(logits=model(input_ids=prompt, use_cache=False).logits),
                                      [row.op])
        kernel = box["logits"][0].double()
    finally:
        report.restore()
    row.op_calls = counts[row.op]
    log_p, log_q = torch.log_softmax(emulated, -1), torch.log_softmax(kernel, -1)
    row.kl_to_emulation = float((log_p.exp() * (log_p - log_q)).sum(-1).mean())
    row.bound_fraction = max(fractions) if fractions else math.nan


def _generate(model: Any, prompt: Any, new_tokens: int) -> tuple[float, float]:
    """(prefill seconds, decode seconds): one forward over the prompt, then new_tokens greedy steps."""
    from precisionlab.models.profiling import greedy_decode

    start = time.perf_counter()
    step = greedy_decode(model, prompt)
    token = next(step)
    prefill = time.perf_counter() - start
    start = time.perf_counter()
    for _ in range(new_tokens):
        token = step.send(token)
    return prefill, time.perf_counter() - start


# --------------------------------------------------------------------------- table and findings
def _median(values: Sequence[float]) -> float:
    return statistics.median(values) if values else math.nan


COLUMNS = ["scheme", "kernel", "runs as", "layers on kernel", "op calls", "kernel MB", "decode tok/s",
           "decode ratio", "ratio min", "ratio max", "prefill tok/s", "prefill ratio", "bound fraction",
           "KL to emulation", "note"]
CONDITIONS = ("threads", "load_average_start", "load_average_end", "cpu_capability", "activations", "model_dtype")
"""The settings that are the measurement's conditions (findings <prefix>.<name>, and the table's note)."""


def conditions_line(settings: Mapping[str, Scalar]) -> str:
    """The measurement's conditions in one sentence (threads, load, CPU, shapes, dtypes)."""
    def load(key: str) -> str:
        value = settings.get(key)
        return f"{value:.2f}" if isinstance(value, float) and math.isfinite(value) else "n/a"

    return (f"Conditions: torch threads {settings['threads']}; load average (1 min) {load('load_average_start')} at "
            f"the start, {load('load_average_end')} at the end; torch CPU capability "
            f"{settings.get('cpu_capability', 'unknown')}; batch 1: each layer call is M = 1 in decode, M = "
            f"{settings['prompt_tokens']} in prefill; kernel layers take {settings['activations']} activations, "
            f"the model is {settings['model_dtype']}.")


def speed_part(run: SpeedRun, prefix: str = "eval.speed") -> Part:
    """The `speed` table and findings eval.speed.<label>.decode_tokens_per_s / .prefill_tokens_per_s /
    .decode_ratio (with .decode_ratio_min / .decode_ratio_max) / .prefill_ratio (with min / max) / .kernel,
    plus .kernel_bytes, .bound_fraction, .kl_to_emulation, .op and .op_calls (the kernel op torch.profiler saw,
    and its calls in one forward), .twin_of (a bf16-scale twin: the candidate it stands for), and .note (and
    .runs_as) for a row without a kernel; eval.speed.reference.*; eval.speed.threads / prompt_tokens /
    new_tokens / repetitions and the conditions eval.speed.load_average_start / load_average_end /
    cpu_capability / activations / model_dtype (`prefix` replaces eval.speed: the ladder's are
    ladder.speed.<step>...)."""
    findings: dict[str, Scalar] = {f"{prefix}.{k}": v for k, v in run.settings.items()
                                   if k in ("prompt_tokens", "new_tokens", "repetitions", *CONDITIONS)}
    ref_decode, ref_prefill = _median(run.reference_decode), _median(run.reference_prefill)
    findings[f"{prefix}.reference.decode_tokens_per_s"] = ref_decode
    findings[f"{prefix}.reference.prefill_tokens_per_s"] = ref_prefill
    reference: dict[str, Scalar] = {"scheme": "reference", "kernel": "torch fp32 matmul", "decode tok/s": ref_decode,
                                    "decode ratio": 1.0, "prefill tok/s": ref_prefill, "prefill ratio": 1.0,
                                    "note": ""}
    rows: list[list[Scalar]] = [[reference.get(c) for c in COLUMNS]]
    measured = {row.label for row in run.rows if row.kernel is not None}
    twins = {row.runs: row for row in run.rows if row.kernel is None and row.runs in measured and row.twin_line}
    for row in run.rows:
        key = f"{prefix}.{row.label}"
        findings[f"{key}.kernel"] = row.kernel or "none"
        if row.kernel is None:
            twinned = row.label in {t.label for t in twins.values()}
            note = f"{NO_KERNEL}: {row.twin_line}" if twinned else row.note
            findings[f"{key}.note"] = note
            if row.runs:
                findings[f"{key}.runs_as"] = row.runs
            cells: dict[str, Scalar] = {"scheme": row.label, "kernel": NO_KERNEL, "runs as": row.runs, "note": note}
            rows.append([cells.get(c) for c in COLUMNS])
            continue
        decode, prefill = run.ratios(row, "decode"), run.ratios(row, "prefill")
        values: dict[str, Scalar] = {
            "decode_tokens_per_s": _median(row.decode), "prefill_tokens_per_s": _median(row.prefill),
            "decode_ratio": _median(decode), "decode_ratio_min": min(decode), "decode_ratio_max": max(decode),
            "prefill_ratio": _median(prefill), "prefill_ratio_min": min(prefill), "prefill_ratio_max": max(prefill),
            "kernel_bytes": row.kernel_bytes, "bound_fraction": row.bound_fraction,
            "kl_to_emulation": row.kl_to_emulation, "op": row.op, "op_calls": row.op_calls}
        findings.update({f"{key}.{name}": value for name, value in values.items()})
        note = row.note
        if row.label in twins:
            findings[f"{key}.twin_of"] = twins[row.label].label
            note = "; ".join(filter(None, [f"added by --speed as the kernel twin of {twins[row.label].label}", note]))
        cells = {"scheme": row.label, "kernel": row.kernel, "runs as": row.runs, "layers on kernel": row.layers,
                 "op calls": f"{row.op} x {row.op_calls}", "kernel MB": row.kernel_bytes / 1e6,
                 "decode tok/s": values["decode_tokens_per_s"], "decode ratio": values["decode_ratio"],
                 "ratio min": min(decode), "ratio max": max(decode), "prefill tok/s": values["prefill_tokens_per_s"],
                 "prefill ratio": values["prefill_ratio"], "bound fraction": row.bound_fraction,
                 "KL to emulation": row.kl_to_emulation, "note": note}
        rows.append([cells.get(c) for c in COLUMNS])
    s = run.settings
    why = " ".join(f"{t.twin_line}." for t in twins.values())
    table = Table(
        key="speed", title="Speed beside quality: decode and prefill tokens/s against the reference",
        columns=COLUMNS, rows=rows,
        note=(f"{conditions_line(s)} {why + ' ' if why else ''}"
              f"Batch 1, greedy: prefill of {s['prompt_tokens']} prompt tokens, then {s['new_tokens']} decode steps; "
              f"{s['repetitions']} repetitions, every variant once per repetition in a rotated order; ratio = "
              "candidate / reference tokens/s of the same repetition, median (min, max) over repetitions. Kernel "
              f"layers take {s['activations']} activations (cast from and back to the model's {s['model_dtype']}); "
              "the other layers run as the reference does. op calls: the kernel op torch.profiler saw and its calls "
              "in one forward over the prompt (one per layer on the kernel). bound fraction: the "
              "largest kernel deviation from the exact product with the emulated weight, over the stated bound "
              "(models.kernels.output_bound; <= 1 holds the tolerance); KL to emulation: nats per token between "
              "the emulated and the kernel path's next-token distributions on the prompt."),
        formats={"kernel MB": ".4g", "decode tok/s": ".4g", "decode ratio": ".3g", "ratio min": ".3g",
                 "ratio max": ".3g", "prefill tok/s": ".4g", "prefill ratio": ".3g", "bound fraction": ".3g",
                 "KL to emulation": ".2e"},
    )
    return Part([table], findings=findings)


def speed_run(loaded: Any, specs: Sequence[str], include: Sequence[str] = (), exclude: Sequence[str] | None = None,
              threads: int | None = None, progress: Any = None, **settings: int) -> SpeedRun:
    """`measure_speed` of the candidates `specs` (scheme strings, as `eval --schemes` takes them): the eval
    command's `--speed`."""
    from precisionlab.eval.candidates import parse_candidates

    return measure_speed(loaded, [speed_candidate(c) for c in parse_candidates(list(specs))], include, exclude,
                         threads=threads or THREADS, progress=progress, **{**defaults(), **settings})


def defaults() -> dict[str, int]:
    """The module's settings as they are now (read at call time)."""
    return {"prompt_tokens": PROMPT_TOKENS, "new_tokens": NEW_TOKENS, "repetitions": REPETITIONS}


def add_speed(result: Any, run: SpeedRun) -> None:
    """The speed table and findings added to a LabResult; its recorded command gains --speed."""
    result.add(speed_part(run))
    _mark_command(result)


def _mark_command(result: Any) -> None:
    """The recorded command reproduces the speed measurement too."""
    command = result.params.get("command")
    if isinstance(command, str) and command and "--speed" not in command.split():
        result.params["command"] = f"{command} --speed"
