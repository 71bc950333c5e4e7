"""Limits lab, lost updates: 1.0 + t in every format, and the fixes (fp32 master weights, stochastic rounding)."""

from __future__ import annotations

from precisionlab.formats import FloatFormat
from precisionlab.labs.limits.options import with_headline
from precisionlab.numerics.updates import POWERS_OF_TEN, apply_updates, one_plus, smallest_surviving_update
from precisionlab.results import Part, Scalar, Table
from precisionlab.rounding import round_to


def one_plus_section(formats: list[FloatFormat]) -> Part:
    findings: dict[str, Scalar] = {}
    ts = list(POWERS_OF_TEN)
    rows: list[list[Scalar]] = []
    for fmt in with_headline(formats):
        results = one_plus(ts, fmt).tolist()
        smallest = smallest_surviving_update(fmt, ts)
        findings[f"smallest_surviving_update.{fmt.name}"] = smallest
        if fmt in formats:
            rows.append([fmt.name, fmt.eps / 2, *results, smallest])
    columns = ["format", "ulp(1)/2", *[f"1+1e-{k}" for k in range(1, 9)], "smallest surviving t"]
    table = Table(
        key="one_plus",
        title="1.0 + t: the stored result, and the smallest power of ten that still changes 1.0",
        columns=columns,
        rows=rows,
        note=("1 + t leaves 1.0 only when t > ulp(1)/2 = 2^-(M+1). fp16 keeps 1e-3 and loses 1e-4, bf16 keeps "
              "1e-2 and loses 1e-3, fp32 keeps 1e-7: a 1e-3 update to a bf16 weight of 1.0 is not small, it "
              "is gone, every step. Fix: fp32 master weights (next table)."),
        formats={c: ".10g" for c in columns[2:-1]} | {"ulp(1)/2": ".3g", "smallest surviving t": ".0e"},
    )
    return Part([table], findings=findings)


def update_fix_section(seed: int) -> Part:
    count, update = 1000, 1e-3
    exact = 1.0 + count * update
    bf16_direct = float(apply_updates(1.0, update, count, "bf16")[0])
    fp16_direct = float(apply_updates(1.0, update, count, "fp16")[0])
    master = float(apply_updates(1.0, update, count, "fp32")[0])
    master_cast = float(round_to(master, "bf16"))
    lanes = 16
    stochastic = apply_updates(1.0, update, count, "bf16", rounding="stochastic", lanes=lanes, seed=seed)
    rows: list[list[Scalar]] = [
        ["bf16 weight, nearest-even", bf16_direct, abs(bf16_direct - exact) / exact],
        ["fp16 weight, nearest-even", fp16_direct, abs(fp16_direct - exact) / exact],
        ["fp32 master weight", master, abs(master - exact) / exact],
        ["fp32 master, cast to bf16 for the forward pass", master_cast, abs(master_cast - exact) / exact],
        [f"bf16 weight, stochastic rounding (mean of {lanes} runs)", float(stochastic.mean()),
         abs(float(stochastic.mean()) - exact) / exact],
    ]
    table = Table(
        key="update_fix",
        title=f"The fix: {count} updates of {update:g} applied to a weight of 1.0 (exact result {exact:g})",
        columns=["weights kept in", "final weight", "rel error"],
        rows=rows,
        note=("In bf16 every update is rounded away; in fp16 each one is rounded to a multiple of the local "
              "spacing and the weight drifts. An fp32 master copy keeps them, and the bf16 cast of the master is "
              "the nearest bf16 to the right answer. Stochastic rounding keeps the update on average."),
        formats={"final weight": ".8g", "rel error": ".3g"},
    )

    return Part([table])
