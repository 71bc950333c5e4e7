"""Run a paired evaluation: the reference once (or from its cache), then each candidate once.

    run = evaluate(loaded, parse_candidates(["int8:row", "int4:g128"]), resolve_tasks(["ppl", "choice"], ...),
                   max_drop=1.0)
    run.tasks[0].outcomes[0].comparisons["ppl"].verdict        # "pass" / "fail" / "inconclusive"

Per candidate: its weights are quantized in place (models.weights; restored afterwards),
activation hooks and the KV-cache factory are attached, the layer-output error is measured
on a probe of PROBE_TOKENS tokens, then every task is scored with the same batches as the
reference. Statistics come from eval.stats on the per-example scores, resampling the data's
units (topics for the built-in sets, blocks of consecutive units of a text file, JSONL lines on their own):

    task       metric (verdict)                              unit  extra metrics (interval, no verdict)
    ppl        perplexity: percent increase                   %    kl (nats / token), top1_agreement (%)
    choice     acc: difference in percentage points           pp   acc_norm (with its own verdict)
    generate   exact_match with the reference's output, or    pp   token_agreement (% of the longer output
               with `answer` when the file gives one                before the first differing token)
    retrieval  acc@1                                          pp   cosine (embedding cosine with the reference)

Threads and runtime: the reference and every candidate run with one torch thread count (`threads=`, default
torch's current one; recorded in `settings["torch_threads"]`), since threads and batching change logits in their
last bits. A cached reference is used only when it was computed under the same runtime (library versions,
threads, attention implementation, dtype, device: eval.reference); otherwise it is computed again and the
progress says what changed ("reference: ppl recomputed: torch 2.13.0 -> 2.14.0").

Workers: `evaluate(..., workers=2)` (a process pool), `scheduler="tcp://host:8786"` or `client=` (Dask) score
the candidates elsewhere, one candidate per task, each worker loading the model once (eval.workers); the
reference stays in this process and its arrays are sent to every worker once. The EvalRun equals the serial
one bit for bit.

Memory: the model once. While a candidate is applied its selected weights hold the new values in their own
storage and the originals wait on disk (models.weights.replace_weights: a plain candidate spills every one to a
temporary directory under the cache root; a prepared one keeps up to SPILL_ABOVE bytes of them in memory and
spills the rest there), read back one layer at a time for the layer-output error and to restore the model;
no weight it does not replace is copied. Beside it, one batch of logits (PPL_TOKEN_BUDGET tokens × vocabulary
floats). The bill per command, measured on a 1.5 B Llama: docs/eval.md, "Memory: what each command holds".
"""

from __future__ import annotations

import contextlib
import math
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Generic, Protocol, TypeVar

import numpy as np

from precisionlab import peers
from precisionlab.eval import ppl_task, reference_outputs, scoring, stats
from precisionlab.eval.candidates import LLAMACPP, Candidate
from precisionlab.eval.records import example_records as example_records
from precisionlab.eval.records import write_examples as write_examples
from precisionlab.eval.reference import (
    load_reference,
    reference_key,
    runtime_identity,
    save_reference,
    stale_reason,
)
from precisionlab.eval.tasks import TaskSpec

PPL_MAX_TOKENS = 512
"""Tokens scored per perplexity document (the built-in documents have about 250)."""
GENERATE_NEW_TOKENS = 32
PROBE_TOKENS = 256
"""Tokens of the probe on which the layer-output error is measured."""


class Scored(Protocol):
    """An outcome of one candidate on one task."""

    candidate: str


OutcomeT = TypeVar("OutcomeT", bound=Scored)


@dataclass(frozen=True)
class Limits:
    """Token limits of the scoring (part of the reference-cache key)."""

    ppl_max_tokens: int = PPL_MAX_TOKENS
    generate_new_tokens: int = GENERATE_NEW_TOKENS
    probe_tokens: int = PROBE_TOKENS

PRIMARY = {"ppl": "ppl", "choice": "acc", "generate": "exact_match", "retrieval": "acc@1"}
UNITS = {"ppl": "%", "choice": "pp", "generate": "pp", "retrieval": "pp"}


class Progress(Protocol):
    """What evaluate() reports: start(description, total) a step of `total` examples (0: a phase without a count,
    such as quantizing a candidate's weights), advance(n) examples done, done(line) the step's closing line."""

    def start(self, description: str, total: int) -> None: ...

    def advance(self, n: int) -> None: ...

    def done(self, description: str) -> None: ...


class SilentProgress:
    def start(self, description: str, total: int) -> None:
        return None

    def advance(self, n: int) -> None:
        return None

    def done(self, description: str) -> None:
        return None


# --------------------------------------------------------------------------- results
@dataclass
class Outcome:
    """One candidate on one task."""

    candidate: str
    metrics: dict[str, float]
    """The candidate's own metric values (ppl, acc, acc_norm, ...)."""
    comparisons: dict[str, stats.Comparison]
    """Verdict-bearing comparisons against the reference, primary metric first."""
    extras: dict[str, stats.Interval]
    """Intervals of the candidate's agreement with the reference (kl, top1_agreement, cosine, ...)."""
    per_example: dict[str, list[Any]]
    seconds: float = 0.0
    damage: Any = None
    """Perplexity tasks: where the damage lands (eval.damage.Damage)."""


class TaskView(Generic[OutcomeT]):
    """What a task's run answers whoever scored it (in process, or in a runtime): its name, kind, primary metric
    and unit, which way is better, and one candidate's outcome."""

    spec: TaskSpec
    outcomes: list[OutcomeT]

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def kind(self) -> str:
        return self.spec.kind

    @property
    def primary(self) -> str:
        return PRIMARY[self.spec.kind]

    @property
    def unit(self) -> str:
        return UNITS[self.spec.kind]

    @property
    def higher_is_better(self) -> bool:
        return self.spec.kind != "ppl"

    def outcome(self, label: str) -> OutcomeT:
        for outcome in self.outcomes:
            if outcome.candidate == label:
                return outcome
        raise KeyError(f"task {self.name} has no candidate {label!r}")


@dataclass
class TaskRun(TaskView[Outcome]):
    spec: TaskSpec
    reference: dict[str, float]
    reference_examples: dict[str, list[Any]]
    reference_cached: bool
    reference_seconds: float
    outcomes: list[Outcome] = field(default_factory=list)
    arrays: dict[str, np.ndarray] = field(default_factory=dict, repr=False)
    """The reference's raw outputs (what the cache holds), for scoring the candidates."""
    recomputed: str = ""
    """Why a cache entry of another runtime was not used ("torch 2.13.0 -> 2.14.0"; "" otherwise)."""


@dataclass
class CandidateRun:
    candidate: Candidate
    bits_per_weight: float
    model_bytes: int
    rel_err: float
    sqnr_db: float
    layer_output_err: float
    """Mean over the quantized layers of ||x W_hat^T - x W^T|| / ||x W^T|| on the probe."""
    alignment: str
    """"aligned", "partly (k/N layers)" or "no": whether the scheme reproduced the source weights."""
    quantized_layers: int
    skipped_layers: int
    notes: list[str]
    layers: list[dict[str, Any]]
    act_layers: int = 0
    quantize_seconds: float = 0.0

    @property
    def label(self) -> str:
        return self.candidate.label


@dataclass
class EvalRun:
    model: dict[str, Any]
    candidates: list[CandidateRun]
    tasks: list[TaskRun]
    max_drop: float
    settings: dict[str, Any]
    seconds: float = 0.0

    def task(self, name: str) -> TaskRun:
        for task in self.tasks:
            if task.name == name:
                return task
        raise KeyError(f"no task {name!r}")


# --------------------------------------------------------------------------- entry point
def check_resamples(n_resamples: int) -> int:
    """ValueError unless the bootstrap gets an integer of at least 100 resamples."""
    if isinstance(n_resamples, bool) or not isinstance(n_resamples, int) or n_resamples < 100:
        raise ValueError(f"--resamples must be an integer >= 100, got {n_resamples!r}")
    return n_resamples


def check_max_drop(max_drop: float) -> float:
    """The threshold as a float; ValueError unless it is a finite number >= 0."""
    value = float(max_drop)
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"--max-drop must be a finite number >= 0 (percentage points, or percent for perplexity), "
                         f"got {max_drop!r}")
    return value


@dataclass(frozen=True)
class CandidateScoring:
    """How every candidate is scored: the layers it quantizes, the threshold and the statistics' settings."""

    include: tuple[str, ...]
    exclude: tuple[str, ...] | None
    max_drop: float
    seed: int
    n_resamples: int
    limits: Limits
    confidence: float


def evaluate(loaded: Any, candidates: Sequence[Candidate], tasks: Sequence[TaskSpec], max_drop: float,
             include: Sequence[str] = (), exclude: Sequence[str] | None = None, cache: bool = True,
             cache_dir: Path | None = None, progress: Progress | None = None, seed: int = 0,
             n_resamples: int = stats.DEFAULT_RESAMPLES, limits: Limits = Limits(),
             confidence: float = stats.DEFAULT_CONFIDENCE, threads: int | None = None, workers: int = 1,
             scheduler: str | None = None, client: Any = None, model_spec: str | None = None) -> EvalRun:
    """Score the reference (cached) and every candidate on every task; compare them (see the module) with
    intervals of `confidence` (two-sided; the escalation ladder asks for its per-test level).

    torch runs `threads` threads (None: its current count) for the reference and every candidate; the count is
    in the reference's cache key and in `settings["torch_threads"]`. `workers` processes, a Dask `scheduler`
    address or a connected `client` score the candidates elsewhere (eval.workers; `model_spec`, what they load,
    defaults to the model's source); the run is the same, bit for bit."""
    check_max_drop(max_drop)
    check_resamples(n_resamples)
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must lie strictly between 0 and 1, got {confidence!r}")
    progress = progress or SilentProgress()
    _check_candidates(loaded, candidates)
    distributed = workers != 1 or scheduler is not None or client is not None
    if distributed:
        from precisionlab.eval import workers as eval_workers

        eval_workers.check_distributable(candidates, workers, scheduler, client)
    threads = _threads(threads)
    start = time.perf_counter()
    settings = {"ppl_max_tokens": limits.ppl_max_tokens, "kl_top_k": scoring.KL_TOP_K,
                "generate_new_tokens": limits.generate_new_tokens, "probe_tokens": limits.probe_tokens,
                "n_resamples": n_resamples, "seed": seed,
                "confidence": confidence, "torch_threads": threads,
                "interval": "expanded percentile, paired bootstrap; 0/1 scores: its union with Tango's score interval; "
                            "perplexity: its union with the studentized bootstrap, Cantelli's end when too skewed"}
    options = CandidateScoring(tuple(include), None if exclude is None else tuple(exclude), float(max_drop), seed,
                               n_resamples, limits, confidence)
    with peers.torch_threads(threads):
        runtime = runtime_identity(loaded.model, threads)
        settings["runtime"] = runtime
        runs = [_reference(loaded, spec, cache, cache_dir, progress, limits, runtime) for spec in tasks]
        probe = _probe(loaded, limits.probe_tokens)
        if distributed:
            scored: Iterable[tuple[CandidateRun, list[Outcome]]] = eval_workers.score_distributed(
                loaded, candidates, runs, probe, options, runtime, progress, score_candidate, task_line,
                workers=workers, scheduler=scheduler, client=client, model_spec=model_spec)
        else:
            scored = (score_candidate(loaded, candidate, runs, probe, options, progress) for candidate in candidates)
        candidate_runs: list[CandidateRun] = []
        for candidate_run, outcomes in scored:
            candidate_runs.append(candidate_run)
            for run, outcome in zip(runs, outcomes, strict=True):
                run.outcomes.append(outcome)
    model_info = {"name": loaded.name, "kind": loaded.kind, "source": loaded.source, "form": loaded.form,
                  "fingerprint": loaded.fingerprint, "dtype": loaded.dtype, "parameters": loaded.parameters,
                  "bytes": loaded.nbytes, "grid_note": loaded.grid_note, "source_types": dict(loaded.source_types),
                  "load_seconds": loaded.load_seconds, "loaded_from_cache": loaded.from_cache,
                  "max_length": loaded.max_length}
    return EvalRun(model_info, candidate_runs, runs, float(max_drop), settings, time.perf_counter() - start)


def _threads(threads: int | None) -> int:
    """The torch thread count of a run: `threads`, or torch's current count (ValueError below 1)."""
    if threads is None:
        return int(peers.torch().get_num_threads())
    if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
        raise ValueError(f"threads must be a positive integer, got {threads!r}")
    return threads


def score_candidate(loaded: Any, candidate: Candidate, runs: Sequence[TaskRun], probe: Any,
                    options: CandidateScoring, progress: Progress) -> tuple[CandidateRun, list[Outcome]]:
    """One candidate installed on the model, its layer-output error on the probe, then every task scored against
    its reference (runs[i].arrays); the model is restored afterwards. The outcomes follow `runs`."""
    progress.start(f"quantizing the weights for {candidate.label}", 0)  # a phase without a count
    outcomes: list[Outcome] = []
    with _applied(loaded, candidate, options.include, options.exclude) as (report, act_layers, make_cache):
        output_err, per_layer = _layer_output_error(loaded, report, probe)
        layers = [_layer_dict(r, per_layer.get(r.name)) for r in report.layers] if report else []
        candidate_run = CandidateRun(
            candidate=candidate,
            bits_per_weight=report.bits_per_weight if report else math.nan,
            model_bytes=report.model_bytes if report else loaded.nbytes,
            rel_err=report.rel_err if report else 0.0,
            sqnr_db=report.sqnr_db if report else math.inf,
            layer_output_err=output_err,
            alignment=report.alignment if report else "no",
            quantized_layers=len(report.quantized) if report else 0,
            skipped_layers=len(report.skipped) if report else 0,
            notes=report.notes() if report else [],
            layers=layers,
            act_layers=act_layers,
            quantize_seconds=report.seconds if report else 0.0,
        )
        for run in runs:
            began = time.perf_counter()
            progress.start(f"{candidate.label}: {run.name}", len(run.spec.items))
            outcome = _candidate_outcome(loaded, run, candidate.label, make_cache, options.max_drop, options.seed,
                                         options.n_resamples, progress, options.limits, options.confidence)
            outcome.seconds = time.perf_counter() - began
            outcomes.append(outcome)
            progress.done(task_line(candidate.label, run, outcome))
    return candidate_run, outcomes


def task_line(label: str, run: TaskRun, outcome: Outcome) -> str:
    """The progress line of a candidate's finished task."""
    return f"{label}: {run.name} ({len(run.spec.items)} examples, {outcome.seconds:.1f} s)"


def _check_candidates(loaded: Any, candidates: Sequence[Candidate]) -> None:
    if not candidates:
        raise ValueError("give at least one candidate scheme")
    for candidate in candidates:
        if candidate.kv and loaded.kind != "causal-lm":
            raise ValueError(f"candidate {candidate.label}: KV-cache quantization applies to causal LMs, not to "
                             f"the {loaded.kind} {loaded.name}")


# --------------------------------------------------------------------------- applying a candidate
@contextlib.contextmanager
def _applied(loaded: Any, candidate: Candidate, include: Sequence[str],
             exclude: Sequence[str] | None) -> Iterator[tuple[Any, int, Callable[[], Any] | None]]:
    from precisionlab.models.hooks import SchemeKV, activation_quantization, quantized_cache
    from precisionlab.models.weights import quantize_weights, spilling_to

    with tempfile.TemporaryDirectory(prefix="precisionlab-originals-", dir=spill_parent()) as spill:
        if candidate.prepare is not None:  # a prepared candidate installs its own weights (eval.candidates)
            with spilling_to(spill):  # its originals past models.weights.SPILL_ABOVE wait in the same place
                report = candidate.prepare(loaded.model, include, exclude)
        else:
            report = (quantize_weights(loaded.model, candidate.weights, include, exclude, spill_dir=Path(spill))
                      if candidate.weights else None)
        try:
            with contextlib.ExitStack() as stack:
                act_layers = 0
                if candidate.act == LLAMACPP:
                    act_layers = len(stack.enter_context(_llamacpp(loaded, report, candidate.weights)))
                elif candidate.act:
                    act_layers = len(stack.enter_context(activation_quantization(loaded.model, candidate.act,
                                                                                 include, exclude)))
                make_cache = None
                if candidate.kv:
                    quantizer = SchemeKV(candidate.kv)
                    make_cache = lambda: quantized_cache(loaded.model, quantizer)  # noqa: E731
                yield report, act_layers, make_cache
        finally:
            if report is not None:
                report.restore()


def _llamacpp(loaded: Any, report: Any, scheme: str | None) -> Any:
    """act=llamacpp: every Linear's input as llama.cpp quantizes it for its weight's GGML type."""
    from precisionlab.models.llamacpp import block_mins, linear_types, llamacpp_activations

    types = linear_types(loaded, report, scheme)
    return llamacpp_activations(loaded.model, types, block_mins(report, loaded.model, scheme, types))


def spill_parent() -> str | None:
    """Where a candidate's original weights wait: under the cache root (on disk, where the models' caches are:
    /tmp may be a tmpfs, which would hold them in memory after all), or the system's temporary directory when
    the cache root cannot be written."""
    from precisionlab.models.loading import cache_root

    root = cache_root() / "spill"
    try:
        root.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=root):
            pass
    except OSError:
        return None
    return str(root)


def _layer_dict(record: Any, output_err: float | None) -> dict[str, Any]:
    return {"layer": record.name, "kind": record.kind, "shape": list(record.shape), "quantized": record.quantized,
            "bytes": record.nbytes, "source_bytes": record.source_bytes, "bits_per_weight": record.bits_per_weight,
            "rel_err": record.rel_err, "sqnr_db": record.sqnr_db, "output_rel_err": output_err,
            "unchanged": record.unchanged, "tied": list(record.tied), "note": record.note}


# --------------------------------------------------------------------------- probe and layer-output error
def _probe(loaded: Any, tokens: int) -> Any:
    """Token ids (causal LM) or texts (encoder) of the layer-output probe, from the built-in evaluation text."""
    from precisionlab.eval import data

    docs = data.ppl_documents(data.builtin_split(), 2)
    if loaded.kind == "causal-lm":
        lm = scoring.CausalLM(loaded.model, loaded.tokenizer, loaded.max_length)
        ids = [lm.prefix_id, *lm.encode("\n\n".join(d.text for d in docs))][:tokens]
        return ids
    return [d.text for d in docs]


def _layer_output_error(loaded: Any, report: Any, probe: Any) -> tuple[float, dict[str, float]]:
    """Per quantized layer, ||y_hat - x W^T|| / ||x W^T|| on the inputs x the layer receives in the quantized
    model's forward over the probe, y_hat being what the layer outputs there; and their mean.

    x is taken before any other pre-hook runs, so an activation quantization hook counts in y_hat. W is the
    original weight, in the folded coordinates for a folded layer (`report.original`), and where a fold
    also divided the layer's output rows, both outputs are scaled back by `report.output_scale`."""
    if report is None or not report.quantized:
        return math.nan, {}
    torch = peers.torch()
    replaced = {id(param) for param in report.replaced}
    modules = dict(loaded.model.named_modules())
    errors: dict[str, float] = {}
    handles = []

    raw: dict[str, Any] = {}

    def input_hook_for(name: str) -> Callable[..., None]:
        def hook(_module: Any, args: tuple[Any, ...]) -> None:
            raw[name] = args[0]

        return hook

    def hook_for(name: str, module: Any) -> Callable[..., None]:
        def hook(_module: Any, args: tuple[Any, ...], output: Any) -> None:
            original = report.original(module.weight)  # read from its spill file: one layer in memory at a time
            x = raw.pop(name, args[0])
            if x.dtype in (torch.long, torch.int32, torch.int64):  # an embedding: a row lookup
                ref = torch.nn.functional.embedding(x, original)
            elif type(module).__name__ == "Conv1D":
                ref = torch.addmm(module.bias, x.reshape(-1, x.shape[-1]), original).reshape(output.shape)
            else:
                ref = torch.nn.functional.linear(x, original, getattr(module, "bias", None))
            scale = report.output_scale(module.weight)
            out, ref = output.double(), ref.double()
            if scale is not None:
                out, ref = out * scale.to(out.device), ref * scale.to(out.device)
            diff = (out - ref).norm()
            size = ref.norm()
            errors[name] = float(diff / size) if size > 0 else (0.0 if diff == 0 else math.inf)

        return hook

    for record in report.quantized:
        module = modules[record.name]
        watched = [record.name] if id(module.weight) in replaced else []
        watched += [tied for tied in record.tied if tied in modules]
        for name in watched:
            handles.append(modules[name].register_forward_pre_hook(input_hook_for(name), prepend=True))
            handles.append(modules[name].register_forward_hook(hook_for(name, modules[name])))
    try:
        with torch.inference_mode():
            if loaded.kind == "causal-lm":
                loaded.model(input_ids=torch.tensor([probe]), use_cache=False)
            else:
                inputs = loaded.tokenizer(probe, padding=True, truncation=True, max_length=loaded.max_length,
                                          return_tensors="pt")
                loaded.model(**inputs)
    finally:
        for handle in handles:
            handle.remove()
    values = [v for v in errors.values() if math.isfinite(v)]
    return (float(np.mean(values)) if values else math.nan), errors


# --------------------------------------------------------------------------- reference
def _causal(loaded: Any, make_cache: Callable[[], Any] | None = None) -> scoring.CausalLM:
    return scoring.CausalLM(loaded.model, loaded.tokenizer, loaded.max_length, make_cache)


def _reference(loaded: Any, spec: TaskSpec, use_cache: bool, cache_dir: Path | None, progress: Progress,
               limits: Limits, runtime: dict[str, str]) -> TaskRun:
    began = time.perf_counter()
    settings = reference_outputs.settings(spec, limits, loaded.max_length)
    key = reference_key(loaded.fingerprint, spec.kind, spec.fingerprint, settings)
    arrays = load_reference(key, runtime, cache_dir) if use_cache else None
    cached = arrays is not None
    reason = ""
    if arrays is None:
        reason = stale_reason(key, runtime, cache_dir) if use_cache else ""
        if reason:  # an entry of another runtime exists: say why it is not used
            progress.done(f"reference: {spec.name} recomputed: {reason}")
        progress.start(f"reference: {spec.name}", len(spec.items))
        arrays = reference_pass(loaded, spec, progress.advance, limits)
        if use_cache:
            save_reference(key, runtime, arrays, cache_dir)
    summary, examples = reference_outputs.summary(loaded, spec, arrays)
    seconds = time.perf_counter() - began
    progress.done(f"reference: {spec.name} ({len(spec.items)} examples, "
                  f"{'from the cache' if cached else f'{seconds:.1f} s'})")
    return TaskRun(spec, summary, examples, cached, seconds, arrays=arrays, recomputed=reason)


def reference_pass(loaded: Any, spec: TaskSpec, advance: scoring.Advance,
                   limits: Limits = Limits()) -> dict[str, np.ndarray]:
    """The reference model's raw outputs for one task (what the cache stores; eval.reference_outputs)."""
    return reference_outputs.outputs(loaded, spec, advance, limits)


# --------------------------------------------------------------------------- candidates
def _candidate_outcome(loaded: Any, run: TaskRun, label: str, make_cache: Callable[[], Any] | None, max_drop: float,
                       seed: int, n_resamples: int, progress: Progress, limits: Limits,
                       confidence: float = stats.DEFAULT_CONFIDENCE) -> Outcome:
    spec = run.spec
    arrays = run.arrays
    groups = spec.groups
    options: dict[str, Any] = {"groups": groups, "n_resamples": n_resamples, "seed": seed, "confidence": confidence}
    if spec.kind == "ppl":
        metrics, comparisons, extras, per_example, found = ppl_task.candidate(
            _causal(loaded, make_cache), spec, arrays, max_drop, options, progress.advance, limits)
        return Outcome(label, metrics, comparisons, extras, per_example, damage=found)
    if spec.kind == "choice":
        choice = scoring.score_choice(_causal(loaded, make_cache), spec.items, progress.advance)
        acc = stats.compare_scores(arrays["acc"], choice.acc, max_drop, **options)
        acc_norm = stats.compare_scores(arrays["acc_norm"], choice.acc_norm, max_drop, **options)
        per_example = {"acc": choice.acc.tolist(), "acc_norm": choice.acc_norm.tolist(), "loglik": choice.loglik}
        return Outcome(label, {"acc": 100 * float(choice.acc.mean()), "acc_norm": 100 * float(choice.acc_norm.mean())},
                       {"acc": acc, "acc_norm": acc_norm}, {}, per_example)
    if spec.kind == "generate":
        lm = _causal(loaded, make_cache)
        outputs = scoring.generate(lm, [e.prompt for e in spec.items], limits.generate_new_tokens, progress.advance)
        reference = run.reference_examples["tokens"]
        agreement = np.asarray([scoring.prefix_agreement(r, c) for r, c in zip(reference, outputs, strict=True)])
        same = np.asarray([float(r == c) for r, c in zip(reference, outputs, strict=True)])
        ones = np.ones(len(outputs))
        token = stats.paired_bootstrap_mean(np.zeros(len(outputs)), agreement, percent=True, **options)
        per_example = {"tokens": outputs, "same_as_reference": same.tolist(), "token_agreement": agreement.tolist()}
        if reference_outputs.has_answers(spec):
            matches = reference_outputs.answer_matches(spec, outputs, loaded.tokenizer)
            comparison = stats.compare_scores(np.asarray(run.reference_examples["exact_match"]), matches, max_drop,
                                              **options)
            per_example["exact_match"] = matches.tolist()
        else:
            comparison = stats.compare_scores(ones, same, max_drop, **options)
            matches = same
        return Outcome(label, {"exact_match": 100 * float(matches.mean()), "token_agreement": token.estimate},
                       {"exact_match": comparison}, {"token_agreement": token}, per_example)
    queries = scoring.embed(loaded, [p.query for p in spec.items], lambda n: None)
    passages = scoring.embed(loaded, [p.passage for p in spec.items], progress.advance)
    hits = reference_outputs.retrieval_hits(queries, passages)
    cosine = 0.5 * (_cosines(arrays["queries"], queries) + _cosines(arrays["passages"], passages))
    comparison = stats.compare_scores(np.asarray(run.reference_examples["acc@1"]), hits, max_drop, **options)
    fidelity = stats.paired_bootstrap_mean(np.zeros(len(cosine)), cosine, percent=False, **options)
    per_example = {"acc@1": hits.tolist(), "cosine": cosine.tolist()}
    return Outcome(label, {"acc@1": 100 * float(hits.mean()), "cosine": fidelity.estimate}, {"acc@1": comparison},
                   {"cosine": fidelity}, per_example)


def _cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    norms = np.linalg.norm(a64, axis=1) * np.linalg.norm(b64, axis=1)
    return np.where(norms > 0, np.sum(a64 * b64, axis=1) / np.maximum(norms, 1e-300), 0.0)
