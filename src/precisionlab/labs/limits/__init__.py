"""The limits lab: what each format can and cannot represent, every hazard beside its fix.

Sections: (1) derived format table, (2) one value's round trip, (3) exp overflow and the
max-subtracted softmax, (4) 1 + t and fp32 master weights, (5) accumulator precision and
the stall, with pairwise and Kahan beside them, (6) summation order, (7) cancellation in
variance, (8) the two E4M3s and the vendor cross-check. All arithmetic is emulated
exactly (numerics); nothing here prints.

One module per hazard; each section builder returns a `Part` (its tables, figures and its
own findings) and `run` assembles them in order.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from precisionlab.formats import get_format
from precisionlab.labs import Lab
from precisionlab.labs.formats_table import custom_format_note, format_table
from precisionlab.labs.limits.accumulation import dot_error_section, stall_section
from precisionlab.labs.limits.cancellation import variance_section
from precisionlab.labs.limits.exp_overflow import exp_overflow_section, softmax_section
from precisionlab.labs.limits.fp8 import VENDOR_LIBRARIES, fp8_crosscheck_section, fp8_trap_section
from precisionlab.labs.limits.options import MAX_BLOCKS, check_sizes, float_formats
from precisionlab.labs.limits.order import summation_order_section
from precisionlab.labs.limits.round_trip import round_trip_section
from precisionlab.labs.limits.updates import one_plus_section, update_fix_section
from precisionlab.peers import install_hint, missing_reason
from precisionlab.results import LabResult, Scalar

Progress = Callable[[str], None]

SECTION_STEPS = 7
"""Progress callbacks per run (one at the start of sections 2 to 8)."""


def run(value: float = 0.1, formats: Sequence[str] | None = None, min_log2_n: int = 6, max_log2_n: int = 16,
        order_n: int = 1 << 20, variance_n: int = 100_000, drift_n: int = 1_000_000, stall_count: int = 1_000_000,
        seed: int = 0, progress: Progress | None = None) -> LabResult:
    """Run every section. Sizes: dot products of n = 2^min_log2_n .. 2^max_log2_n, an
    order_n-value sum (a multiple of 4096), variance of variance_n values (and of drift_n
    values to show the drift of the fixes; 0 skips), stall_count repeated additions.
    formats: float formats for sections 2-4 (default: every float)."""
    chosen = float_formats(formats)
    check_sizes(value, min_log2_n, max_log2_n, order_n, variance_n, drift_n, stall_count, seed)
    say = progress or (lambda _: None)
    result = LabResult(
        name="limits",
        title="Limits: what each format can and cannot represent, every hazard beside its fix",
        sections=[format_table()],
        params={"value": value, "formats": ",".join(f.name for f in chosen), "min_log2_n": min_log2_n,
                "max_log2_n": max_log2_n, "order_n": order_n, "variance_n": variance_n,
                "drift_n": drift_n, "stall_count": stall_count, "seed": seed},
    )
    say("round trip")
    result.add(round_trip_section(value, chosen))
    say("exp overflow")
    result.add(exp_overflow_section(chosen))
    result.add(softmax_section())
    say("1 + t")
    result.add(one_plus_section(chosen))
    result.add(update_fix_section(seed))
    say("accumulator precision")
    result.add(dot_error_section(min_log2_n, max_log2_n, seed))
    result.add(stall_section(stall_count))
    say("summation order")
    result.add(summation_order_section(order_n, seed))
    say("cancellation")
    result.add(variance_section(variance_n, drift_n, seed))
    say("fp8 variants")
    result.add(fp8_trap_section())
    result.add(fp8_crosscheck_section())
    findings = result.findings
    result.summary = ("".join(f"{note}. " for note in custom_notes(formats)) + headline(findings, max_log2_n) + " "
                      "Every number is measured on emulated arithmetic with one exact rounding per operation. "
                      "Read each hazard with the fix printed beside it: subtract the max before exp, keep fp32 "
                      "master weights, accumulate in fp32 (or pairwise), compare reductions with a tolerance, "
                      "subtract the mean before squaring, and know which E4M3 your hardware means.")
    checked = str(findings["vendor_crosscheck.libraries"]).split(", ")
    for library in VENDOR_LIBRARIES:
        if library not in checked:
            result.skip(f"vendor_crosscheck.{library}", f"the {library} column of the fp8 code cross-check",
                        missing_reason(library), install_hint(library), section="fp8_crosscheck")
    return result


def custom_notes(names: Sequence[str] | None) -> list[str]:
    """'custom format e4m4: ...' for each name given that is not a registered format."""
    notes = [custom_format_note(name, get_format(name)) for name in names or ()]
    return list(dict.fromkeys(note for note in notes if note))


def headline(findings: dict[str, Scalar], max_log2_n: int) -> str:
    """The lab's headline: three of its hazards in numbers (the headline formats are always measured)."""
    exp16, keep16 = findings["exp_overflow_x.fp16"], findings["smallest_surviving_update.bf16"]
    dot16 = findings["dot_relative_error.fp16"]
    dot = f"{dot16:.0%}" if isinstance(dot16, float) else str(dot16)
    keep = f"{keep16:g}" if isinstance(keep16, float) else str(keep16)
    return (f"exp(x) overflows fp16 from x = {exp16}, in bf16 1.0 + t stays 1.0 for every power of ten t below "
            f"{keep}, and a sequential fp16 dot product of 2^{max_log2_n} terms is off by {dot}.")


LAB = Lab(
    name="limits",
    title="Numerics hazards: overflow, lost updates, accumulation, order, cancellation, fp8 variants",
    run=run,
    order=10,
    quick={"min_log2_n": 4, "max_log2_n": 10, "order_n": 1 << 14, "variance_n": 20_000, "drift_n": 0,
           "stall_count": 1_000_000},
)

__all__ = ["LAB", "MAX_BLOCKS", "SECTION_STEPS", "run"]
