"""The eval lab's "where the damage lands" part: per perplexity task, the frequency and position breakdowns,
the concentration of the damage and the worst tokens of each candidate; per choice or generation task, its worst
examples; for every task, the divergence flag; and one verdict table across all tasks (generic, product-like,
adversarial files side by side). docs/damage.md documents every rule.

Findings (stable keys, <bucket> as eval.damage names it):

    eval.<task>.<scheme>.by_frequency.<bucket>.tokens | .token_share | .kl | .nll_increase | .damage_share
    eval.<task>.<scheme>.by_position.<bucket>.(the same) | .ppl | .reference_ppl
    eval.<task>.<scheme>.concentration.top1_tokens | .top5_tokens | .top1_documents | .top5_documents | .gini
    eval.<task>.<scheme>.by_frequency.<rare bucket>.kl_ratio | .kl_ratio_ci_low | .divergence_test
    eval.<task>.<scheme>.divergence (bool) and .divergence_reason (text, "" when false)
    eval.<task>.window | .stride | .model_context   (a task scored in sliding windows)
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from precisionlab.results import Figure, Scalar, Series, Table

BUCKET_COLUMNS = ["scheme", "bucket", "tokens", "token share %", "KL nats/token", "NLL increase nats/token",
                  "damage share %", "ppl", "reference ppl"]
BUCKET_FORMATS = {"token share %": ".3g", "KL nats/token": ".3g", "NLL increase nats/token": ".3g",
                  "damage share %": ".3g", "ppl": ".4g", "reference ppl": ".4g"}


def damage_parts(evaluation: Any, task: Any, findings: dict[str, Scalar]) -> tuple[list[Table], list[Figure]]:
    """The tables and figures of one task's breakdowns (a choice or generation task: its worst examples), writing
    their findings."""
    if task.kind in ("choice", "generate") and task.outcomes:
        return [_worst_examples_table(task)], []
    outcomes = [o for o in task.outcomes if o.damage is not None]
    if not outcomes:
        return [], []
    window_note = ""
    if task.spec.window is not None:
        from precisionlab.eval.ppl_task import window_of

        context = int(evaluation.model.get("max_length", task.spec.window))
        window, stride = window_of(task.spec, context)
        assert window is not None and stride is not None
        findings.update({f"eval.{task.name}.window": window, f"eval.{task.name}.stride": stride,
                         f"eval.{task.name}.model_context": context})
        window_note = (f"Scored in sliding windows of {window} tokens with a stride of {stride} (at most "
                       f"{task.spec.window} tokens, within the model's context of {context}): every token scored "
                       f"once, those after the first window with at least {window - stride} tokens of context. ")
    tables = [_buckets_table(task, outcomes, "by_frequency", findings),
              _buckets_table(task, outcomes, "by_position", findings, window_note),
              _concentration_table(evaluation, task, outcomes, findings), _worst_table(task, outcomes)]
    return tables, [_position_figure(task, outcomes), _concentration_figure(task, outcomes)]


def _buckets_table(task: Any, outcomes: list[Any], kind: str, findings: dict[str, Scalar],
                   window_note: str = "") -> Table:
    rows: list[list[Scalar]] = []
    for outcome in outcomes:
        key = f"eval.{task.name}.{outcome.candidate}.{kind}"
        for b in getattr(outcome.damage, kind):
            rows.append([outcome.candidate, b.name, b.tokens, 100 * b.token_share, b.kl, b.nll_increase,
                         100 * b.damage_share, b.ppl, b.reference_ppl])
            findings[f"{key}.{b.name}.tokens"] = b.tokens
            findings[f"{key}.{b.name}.token_share"] = b.token_share
            findings[f"{key}.{b.name}.kl"] = b.kl
            findings[f"{key}.{b.name}.nll_increase"] = b.nll_increase
            findings[f"{key}.{b.name}.damage_share"] = b.damage_share
            if kind == "by_position":
                findings[f"{key}.{b.name}.ppl"] = b.ppl
                findings[f"{key}.{b.name}.reference_ppl"] = b.reference_ppl
    if kind == "by_frequency":
        title = f"{task.name}: damage by token frequency"
        note = ("Tokens bucketed by how frequent their id is in the calibration part of the built-in text (never the "
                "evaluation part), under the model's tokenizer: types ordered from the most to the least frequent, "
                "f0_10pct = the most frequent types that make the first 10 % of the calibration tokens, ..., "
                "f90_100pct = the rarest types that occur, unseen = types that never occur there. ")
    else:
        title = f"{task.name}: damage by position"
        note = ("Tokens bucketed by their index in the window the model saw (the prefix token is 0): how much context "
                "each prediction had. ")
        note += window_note
    note += ("KL = KL(reference || candidate) per token, NLL increase = candidate's minus reference's NLL per token "
             "(nats), damage share = the bucket's share of the total KL. Weighted by their token shares the buckets "
             "add up to the overall KL and NLL increase. A bucket without tokens is left out.")
    return Table(key=f"{task.name}_{kind}", title=title, columns=BUCKET_COLUMNS, rows=rows, note=note,
                 formats=BUCKET_FORMATS)


def _concentration_table(evaluation: Any, task: Any, outcomes: list[Any], findings: dict[str, Scalar]) -> Table:
    from precisionlab.eval.damage import MIN_BUCKET_TOKENS, MIN_BUCKET_UNITS, RARE_BUCKETS, RARE_KL_MULTIPLE

    columns = ["scheme", "top 1 % tokens", "top 5 % tokens", "top 1 % documents", "top 5 % documents", "Gini",
               "rare KL / overall", "its CI low", "divergence", "why"]
    rows: list[list[Scalar]] = []
    for outcome in outcomes:
        found = outcome.damage
        c = found.concentration
        key = f"eval.{task.name}.{outcome.candidate}"
        for name in ("top1_tokens", "top5_tokens", "top1_documents", "top5_documents", "gini"):
            findings[f"{key}.concentration.{name}"] = getattr(c, name)
        for test in found.rare_tests:
            findings[f"{key}.by_frequency.{test.name}.kl_ratio"] = test.ratio
            findings[f"{key}.by_frequency.{test.name}.kl_ratio_ci_low"] = test.ci_low
            findings[f"{key}.by_frequency.{test.name}.divergence_test"] = test.state
        tested = [t for t in found.rare_tests if t.state != "not enough data"]
        top = max(tested, key=lambda t: t.ci_low if math.isfinite(t.ci_low) else -math.inf, default=None)
        why = findings.get(f"{key}.divergence_reason") or "; ".join(
            f"{t.name}: not enough data ({t.tokens} tokens in {t.units} unit{'s' if t.units != 1 else ''})"
            for t in found.rare_tests if t.state == "not enough data")
        rows.append([outcome.candidate, 100 * c.top1_tokens, 100 * c.top5_tokens, 100 * c.top1_documents,
                     100 * c.top5_documents, c.gini, top.ratio if top else math.nan, top.ci_low if top else math.nan,
                     findings.get(f"{key}.divergence"), why])
    level = (1 - float(evaluation.settings.get("confidence", 0.95))) / 2
    note = ("Shares of the total KL carried by the worst 1 % / 5 % of tokens and of documents (at least one); Gini of "
            "per-token KL (0: spread evenly, near 1: a few tokens carry it). rare KL / overall: a rare bucket's KL "
            f"per token ({', '.join(RARE_BUCKETS)}) over the overall KL, and the lower end of its bootstrap interval "
            "(resampling the task's documents or topics, as every interval here; the bucket shown is the one with the "
            f"highest lower end). A rare bucket fails when that lower end is above {RARE_KL_MULTIPLE:g}x; with fewer "
            f"than {MIN_BUCKET_TOKENS} tokens or fewer than {MIN_BUCKET_UNITS} documents (or topics) holding them it "
            "is not enough data and never fails. divergence: perplexity PASSES while a rare bucket fails or another "
            f"task FAILS (threshold --max-drop {evaluation.max_drop:g}, declared before the run): the capability loss "
            f"perplexity hides. Each rare-bucket test is one-sided at {level:.3g}, as each verdict is: one more test "
            "of this run's family (docs/eval_statistics.md, error rates).")
    return Table(key=f"{task.name}_concentration", title=f"{task.name}: how concentrated the damage is",
                 columns=columns, rows=rows, note=note,
                 formats={c: ".3g" for c in columns[1:8]})


def _tops(pairs: Any) -> str:
    return ", ".join(f"{t!r} {100 * p:.3g}%" for t, p in pairs)


def _worst_table(task: Any, outcomes: list[Any]) -> Table:
    columns = ["scheme", "rank", "document", "position", "token", "KL nats", "NLL increase nats",
               "top tokens: reference → candidate"]
    rows: list[list[Scalar]] = []
    for outcome in outcomes:
        for rank, w in enumerate(outcome.damage.worst, start=1):
            rows.append([outcome.candidate, rank, w.document, w.position, repr(w.target), w.kl, w.nll_increase,
                         f"{_tops(w.reference_top)} → {_tops(w.candidate_top)}"])
    note = ("The tokens with the largest KL(reference || candidate), per candidate: the document, the token's "
            "position in its window, the token the text has there, and each model's three most likely tokens with "
            "their probabilities (the reference's, then the candidate's: one cell, which wraps, so the table fits). "
            "Every document's worst three are in eval_<task>_examples.jsonl (worst_tokens).")
    return Table(key=f"{task.name}_worst", title=f"{task.name}: the worst examples", columns=columns, rows=rows,
                 note=note, formats={"KL nats": ".3g", "NLL increase nats": ".3g"})


def _short(text: str, limit: int = 60) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else f"...{text[-(limit - 3):]}"


def _head(text: str, limit: int = 24) -> str:
    text = " ".join(text.split())
    return repr(text if len(text) <= limit else f"{text[: limit - 3]}...")


def _worst_examples_table(task: Any) -> Table:
    """A choice task's examples ranked by how far each candidate moved from the gold choice; a generation task's by
    the share of the output that still agrees with the reference's."""
    from precisionlab.eval.damage.worst import WORST_EXAMPLES, choice_margin_drops, worst_indices

    items = task.spec.items
    rows: list[list[Scalar]] = []
    if task.kind == "choice":
        columns = ["scheme", "rank", "example", "context", "gold", "reference pick", "candidate pick",
                   "gold margin drop nats"]
        golds = [item.gold for item in items]
        for outcome in task.outcomes:
            cand = outcome.per_example["loglik"]
            drops = choice_margin_drops(task.reference_examples["loglik"], cand, golds)
            for rank, i in enumerate(worst_indices(drops, WORST_EXAMPLES), start=1):
                item, ref = items[i], task.reference_examples["loglik"][i]
                rows.append([outcome.candidate, rank, item.id, _short(item.context, 40), _head(item.choices[item.gold]),
                             _head(item.choices[int(np.argmax(ref))]), _head(item.choices[int(np.argmax(cand[i]))]),
                             float(drops[i])])
        note = ("Per candidate, the examples whose gold choice lost the most: gold margin = log-likelihood of the gold "
                "choice minus the best other choice's; the drop is the reference's margin minus the candidate's "
                "(nats; the candidate picks a wrong choice once its margin is below 0).")
    else:
        columns = ["scheme", "rank", "example", "prompt", "token agreement %", "same as reference"]
        for outcome in task.outcomes:
            agreement = [float(a) for a in outcome.per_example["token_agreement"]]
            for rank, i in enumerate(worst_indices(-np.asarray(agreement), WORST_EXAMPLES), start=1):
                rows.append([outcome.candidate, rank, items[i].id, _short(items[i].prompt), 100 * agreement[i],
                             bool(outcome.per_example["same_as_reference"][i])])
        note = ("Per candidate, the prompts whose greedy output left the reference's soonest: token agreement = tokens "
                "before the first difference over the longer output.")
    return Table(key=f"{task.name}_worst", title=f"{task.name}: the worst examples", columns=columns, rows=rows,
                 note=note, formats={"gold margin drop nats": ".3g", "token agreement %": ".3g"})


def _middle(name: str) -> float:
    low, high = (int(x) for x in name[1:].split("_"))
    return math.sqrt(max(low, 1) * (high + 1))


def _position_figure(task: Any, outcomes: list[Any]) -> Figure:
    series = [Series(o.candidate, [_middle(b.name) for b in o.damage.by_position], [b.kl for b in o.damage.by_position])
              for o in outcomes]
    return Figure(key=f"{task.name}_by_position", title=f"{task.name}: KL by position in the context",
                  xlabel="position in the window (tokens, bucket's geometric middle)", ylabel="KL nats / token",
                  series=series, xscale="log",
                  note="one point per position bucket (p0_127, p128_511, ...)")


def _concentration_figure(task: Any, outcomes: list[Any]) -> Figure:
    series = [Series(o.candidate, [f for f, _ in o.damage.concentration.curve],
                     [s for _, s in o.damage.concentration.curve]) for o in outcomes]
    return Figure(key=f"{task.name}_concentration", title=f"{task.name}: share of the KL carried by the worst tokens",
                  xlabel="fraction of the tokens, worst first", ylabel="share of the total KL", series=series,
                  xscale="log", note="an even spread is the diagonal; a curve far above it: a few tokens carry it")


def divergence_findings(evaluation: Any, findings: dict[str, Scalar]) -> None:
    """eval.<task>.<scheme>.divergence and .divergence_reason for every task and candidate (eval.damage.divergence)."""
    from precisionlab.eval.damage import divergence

    perplexity = [t.name for t in evaluation.tasks if t.kind == "ppl"]
    for cand in evaluation.candidates:
        verdicts = {t.name: t.outcome(cand.label).comparisons[t.primary].verdict for t in evaluation.tasks}
        for task in evaluation.tasks:
            outcome = task.outcome(cand.label)
            failing = outcome.damage.failing_buckets if outcome.damage is not None else []
            flag = divergence(task.name, task.kind == "ppl", verdicts, perplexity, failing)
            findings[f"eval.{task.name}.{cand.label}.divergence"] = flag.diverges
            findings[f"eval.{task.name}.{cand.label}.divergence_reason"] = flag.reason


def tests_in_run(evaluation: Any) -> tuple[int, int]:
    """(verdicts, rare-bucket tests) of a run: its family of tests, each at the same one-sided level (a rare bucket
    with not enough data is no test)."""
    verdicts = sum(len(o.comparisons) for task in evaluation.tasks for o in task.outcomes)
    rare = sum(1 for task in evaluation.tasks for o in task.outcomes if o.damage is not None
               for t in o.damage.rare_tests if t.state != "not enough data")
    return verdicts, rare


def verdict_table(evaluation: Any) -> Table:
    """Every task's verdict for every candidate in one table, with the threshold declared before the run."""
    columns = ["task", "source", "scheme", "metric", "difference", "unit", "CI low", "CI high", "threshold",
               "verdict", "n"]
    rows: list[list[Scalar]] = []
    for task in evaluation.tasks:
        threshold = -evaluation.max_drop if task.higher_is_better else evaluation.max_drop
        source = "built-in" if task.spec.source == "builtin" else task.spec.source
        for outcome in task.outcomes:
            c = outcome.comparisons[task.primary]
            rows.append([task.name, source, outcome.candidate, task.primary, c.interval.estimate, task.unit,
                         c.interval.low, c.interval.high, threshold, c.verdict.upper(), c.interval.n])
    verdicts, rare = tests_in_run(evaluation)
    level = (1 - float(evaluation.settings.get("confidence", 0.95))) / 2
    note = (f"One verdict per task and candidate against --max-drop {evaluation.max_drop:g}, declared before the run "
            "(percent increase for perplexity, percentage points otherwise): PASS when the whole interval is on "
            "the good side of the threshold, FAIL when it is all beyond it, INCONCLUSIVE otherwise. Give your own "
            "generic, product-like and adversarial files to --tasks and read them here side by side. This run's "
            f"family: {verdicts} verdicts and {rare} rare-bucket tests of the divergence flag, each at a one-sided "
            f"level of {100 * level:.3g} %, with no correction across them.")
    return Table(key="verdicts", title="Verdicts across the tasks", columns=columns, rows=rows, note=note,
                 formats={"difference": ".3g", "CI low": ".3g", "CI high": ".3g", "threshold": ".3g"})
