"""The format advisor: rules as data, every column filled, numbers from the engine, and the seed's answers."""

from __future__ import annotations

import json
import re
import string
from typing import Any

import pytest

from precisionlab.advise.advisor import RULES, SCENARIOS, Inputs, Rule, advise
from precisionlab.advise.format_choice import ROLE_NOTES, candidates, decades_at, unit_roundoff
from precisionlab.advise.scenario_facts import stall_point
from precisionlab.capacity.models import get_model
from precisionlab.formats import get_format
from precisionlab.hardware import get_accelerator

H100 = Inputs(accelerator=get_accelerator("h100"), gpu_key="h100")


def choose(gpu: str, role: str = "activations", range_decades: float = 4.0, rel_error: float = 1e-2,
           bound: str = "memory") -> list[str]:
    """Names of the formats the custom chooser keeps, best first."""
    return [c.name for c in candidates(get_accelerator(gpu), gpu, role, range_decades, rel_error, bound)]


def literal_text(template: str) -> str:
    """A template with its {fields} removed: what was typed by hand."""
    return "".join(text for text, _, _, _ in string.Formatter().parse(template))


@pytest.mark.parametrize("rule", RULES, ids=lambda r: r.scenario)
def test_templates_hold_no_typed_numbers(rule: Rule) -> None:
    for column in ("title", *Rule.COLUMNS):
        text = literal_text(getattr(rule, column))
        # digits are allowed only inside names such as fp16, e4m3, W4A16
        assert not re.search(r"(?<![A-Za-z0-9_])\d", text), f"{rule.scenario}.{column}: {text!r}"


@pytest.mark.parametrize("role", sorted(ROLE_NOTES))
def test_role_notes_hold_no_typed_numbers_and_reach_the_risk_column(role: str) -> None:
    assert not re.search(r"(?<![A-Za-z0-9_])\d", literal_text(ROLE_NOTES[role]))
    advice = advise("custom", Inputs(accelerator=get_accelerator("h100"), gpu_key="h100", role=role))
    assert ROLE_NOTES[role].split(":")[0].split("(")[0].strip() in advice.risk


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_every_column_filled(scenario: str) -> None:
    advice = advise(scenario, H100)
    for column in ("title", "format", *Rule.COLUMNS):
        value = getattr(advice, column)
        assert isinstance(value, str) and value, (scenario, column)
        assert column == "format" or len(value) > 10, (scenario, column)
        assert "{" not in value and "nan" not in value.split(), (scenario, column, value)  # every field filled
    # each argued column carries at least one number
    for column in ("range", "precision", "throughput"):
        assert re.search(r"\d", getattr(advice, column)), (scenario, column)


def test_fp8_trap_numbers_from_the_engine() -> None:
    advice = advise("fp8_portability", H100)
    assert advice.facts["code_ratio"] == 2.0  # seeds: "identical bits decode a factor of two apart"
    assert advice.facts["distinct_ratios"] == 1
    assert advice.facts["nan_code_hex"] == "0x80"  # NaN in FNUZ, -0 in OCP
    assert advice.facts["ocp_meaning"] == "-0"
    assert "max 448" in advice.range and "max 240" in advice.range
    assert "bias 7" in advice.range and "bias 8" in advice.range
    assert "tag" in advice.recommend
    assert advise("fp8_portability", Inputs(accelerator=get_accelerator("mi300x"), gpu_key="mi300x")
                  ).facts["target_fp8"] == "e4m3fnuz"


def test_reduction_stall_matches_the_seed() -> None:
    # seeds: summing 1e6 terms of 1e-2 in fp16 stalls at about 32 (ulp/2 at 32 is 1.6e-2 > 1e-2), 99.7% error
    assert stall_point(1e-2, "fp16") == 32
    facts = advise("reduction", H100).facts
    assert facts["stall"] == 32
    assert facts["half_ulp"] == 2.0**-6
    assert round(facts["stall_err"] * 100, 1) == 99.7
    assert facts["stall_fp32"] == 2**18  # ulp(2^18) / 2 = 2^-6 > 1e-2 in fp32 (2^18 * 2^-23 / 2)
    assert facts["overflow_rms"] == pytest.approx((65504 / 4096) ** 0.5)


def test_pretrain_memory_bill() -> None:
    facts = advise("pretrain", H100).facts
    assert facts["bytes_per_param"] == 16  # 2 + 2 + 4 + 4 + 4: same as pure fp32 Adam (seeds, exercise 2)
    assert facts["train_tb"] == pytest.approx(70_553_706_496 * 16 / 1e12)
    assert facts["min_gpus"] == -(-70_553_706_496 * 16 // (80 * 10**9))


def test_serve_and_kv_numbers_come_from_the_capacity_model() -> None:
    serve = advise("serve", H100).facts
    assert serve["speedup"] > 2.5 and serve["ridge"] / serve["intensity"] > 100
    assert serve["ttft_int4_ms"] == pytest.approx(serve["ttft_bf16_ms"])  # prefill: compute-bound
    kv = advise("kv_cache", H100).facts
    assert kv["kv_fp16_kib"] == 128 and kv["kv_fp8_kib"] == 64
    assert kv["batch_fp8"] >= 2 * kv["batch_fp16"]
    faster = advise("kv_cache", Inputs(accelerator=get_accelerator("h100").with_overrides(bandwidth_gbs=6700),
                                      gpu_key="h100")).facts
    assert faster["tps_fp16"] == pytest.approx(2 * kv["tps_fp16"])


def test_serve_says_when_bf16_weights_do_not_fit() -> None:
    """Llama-3-70B in bf16: 70.6e9 params x 2 bytes = 141 GB > 80 GB, so its tokens/s is only a bound."""
    big = advise("serve", Inputs(accelerator=get_accelerator("h100"), gpu_key="h100",
                                 model=get_model("llama3_70b"))).facts
    assert big["w_bf16"] > 80 and "do not fit in 80 GB" in big["bf16_note"] and big["batch_bf16"] == 0
    assert advise("serve", H100).facts["bf16_note"] == ""  # Llama-2-13B: 26 GB fits


def test_serve_int4_error_is_the_asymmetric_one() -> None:
    """int4 with a zero point uses all 16 codes: [min, max] in 15 steps, so a group spanning ±1 errs by at
    most 1/15 (the symmetric ±7 grid would give 1/14). Checked against the quant engine on such a group."""
    import numpy as np

    import precisionlab as pl

    serve = advise("serve", H100).facts
    assert serve["levels"] == 16 and serve["int4_rel"] == pytest.approx(1 / 15)
    group = np.linspace(-1.0, 1.0, 128).reshape(1, 128)  # spacing 2/127: within 1/127 of the worst point
    err = float(np.abs(pl.quantize(group, "int4:g128:asym").dequantize() - group).max())
    assert 1 / 15 - 1 / 127 < err <= serve["int4_rel"] * 1.01 < 1 / 14  # fp16 scale rounding: < 1%


def test_unit_roundoff_and_decades_by_hand() -> None:
    assert unit_roundoff(get_format("bf16")) == 2.0**-8
    assert unit_roundoff(get_format("int8")) == 1 / 254
    assert decades_at(get_format("int8"), 0.01) == pytest.approx(__import__("math").log10(2 * 0.01 * 127))
    assert decades_at(get_format("e4m3"), 0.01) == 0  # e4m3's 2^-4 > 0.01


def test_custom_picks_the_targets_fp8_flavour() -> None:
    want: dict[str, Any] = {"role": "kv_cache", "range_decades": 3.0, "rel_error": 0.07, "bound": "memory"}
    assert choose("h100", **want)[0] == "e4m3"
    mi = choose("mi300x", **want)
    assert mi[0] == "e4m3fnuz" and "e4m3" not in mi


def test_custom_compute_bound_needs_a_matrix_rate() -> None:
    want: dict[str, Any] = {"role": "activations", "range_decades": 1.0, "rel_error": 0.1, "bound": "compute"}
    # A100 has no fp8 path: int8 (624 TOPS, 1.4 decades at 10%) beats bf16 (312)
    assert choose("a100", **want)[0] == "int8"
    assert choose("h100", **want)[0] in ("e4m3", "int8")
    assert choose("h100", role="accumulator", range_decades=10, rel_error=1e-6)[0] == "fp32"
    assert "tf32" not in choose("h100", rel_error=1e-3)  # memory-bound: tf32 is not a storage format
    assert "tf32" in choose("h100", rel_error=1e-3, bound="compute")


def test_custom_errors() -> None:
    with pytest.raises(ValueError, match="no format meets"):
        advise("custom", Inputs(accelerator=get_accelerator("h100"), gpu_key="h100", rel_error=1e-30))
    with pytest.raises(ValueError, match="unknown tensor role"):
        choose("h100", role="bias")


def test_cli_all_scenarios(run_cli) -> None:  # type: ignore[no-untyped-def]
    result = run_cli("advise", "--json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["findings"]["advise.fp8_portability.code_ratio"] == 2.0
    assert data["findings"]["advise.reduction.stall"] == 32
    assert data["findings"]["advise.kv_cache.format"].startswith("fp8")
    advice = data["sections"][0]
    assert advice["columns"][-2:] == ["risk accepted", "revert if"]
    assert len(advice["rows"]) == len(SCENARIOS)


def test_cli_custom_from_options(run_cli) -> None:  # type: ignore[no-untyped-def]
    result = run_cli("advise", "--role", "weights", "--range-decades", "3", "--rel-error", "0.07", "--gpu", "mi300x",
                     "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["findings"]["advise.custom.format"] == "e4m3fnuz"


def test_cli_model_override_and_terminal(run_cli) -> None:  # type: ignore[no-untyped-def]
    result = run_cli("advise", "serve", "--model", "llama3_8b")
    assert result.exit_code == 0, result.output
    assert "Llama-3-8B" in result.output


@pytest.mark.parametrize("args", [
    ("nope",), ("custom", "--rel-error", "1e-30"), ("serve", "--model", "llama9"), ("--bound", "disk"),
])
def test_cli_bad_input_exit_2(run_cli, args: tuple[str, ...]) -> None:  # type: ignore[no-untyped-def]
    assert run_cli("advise", *args).exit_code == 2


def test_cli_one_gpu_only(run_cli) -> None:  # type: ignore[no-untyped-def]
    result = run_cli("advise", "--gpu", "h100,mi300x")
    assert result.exit_code == 2
    assert "one target accelerator" in result.output and result.output.strip().count("\n") == 0


def test_kv_context_label_is_exact() -> None:
    # 100000 tokens is not a whole number of k (1024): the label must not round it to "97k"
    advice = advise("kv_cache", Inputs(accelerator=get_accelerator("h100"), gpu_key="h100", long_context=100_000))
    assert "100000 tokens" in advice.title
    assert advise("kv_cache", H100).facts["ctx_label"] == "128k"


def test_kv_crossover_text_for_a_sliding_window() -> None:
    mistral = get_model("mistral_7b")
    advice = advise("kv_cache", Inputs(accelerator=get_accelerator("h100"), gpu_key="h100", model=mistral))
    assert "never (its 4096-token sliding window caps the cache) for one sequence" in advice.throughput
    assert "inf" not in advice.throughput
    # at batch 32 the windowed cache (32 x 4096 x 128 KiB = 16 GiB) does pass the 14.5 GB of bf16 weights
    expected = 2 * 7_241_732_096 // (32 * 131072) + 1  # smallest L with 32 x L x 128 KiB > bf16 weights
    assert f"from {expected} tokens at batch 32" in advice.throughput


def test_custom_with_no_range_needed_says_so() -> None:
    advice = advise("custom", Inputs(accelerator=get_accelerator("h100"), gpu_key="h100", role="weights",
                                     range_decades=0.0, rel_error=0.3))
    assert advice.format == "e2m1"  # 4 bits, u = 2^-2 = 0.25 <= 0.3: the fewest bits that meet the need
    assert "no range was asked for" in advice.range and "inf" not in advice.range


def test_custom_compute_bound_int8_rate_in_tops() -> None:
    advice = advise("custom", Inputs(accelerator=get_accelerator("a100"), gpu_key="a100", role="activations",
                                     range_decades=1.0, rel_error=0.1, bound="compute"))
    # A100 datasheet (dense): int8 624 TOPS, bf16 312 TFLOPS
    assert "int8 at 624 TOP/s against 312 TFLOP/s for bf16" in advice.throughput


@pytest.mark.parametrize(("gpu", "want"), [("h100-80gb", "e4m3"), ("rtx-4090", "e4m3"), ("a100-80gb", "e4m3"),
                                           ("mi300", "e4m3fnuz")])
def test_accelerator_aliases_work_for_the_fp8_target(gpu: str, want: str) -> None:
    # hardware._ALIASES accepts "h100-80gb" and "rtx-4090"; the fp8 target must come from the resolved
    # device, not from a re-lookup of the findings key ("h100_80gb" is no alias): it raised before
    from precisionlab.labs import advise as advise_lab

    result = advise_lab.run(scenario="fp8_portability", gpu=gpu)
    assert result.findings["advise.fp8_portability.target_e4m3"] == want
    assert f"{want} on" in result.sections[0].rows[0][1]


@pytest.mark.parametrize(("term", "stall"), [(2.0**-6, 32.0), (2.0**-8, 8.0), (1e-2, 32.0), (3e-3, 8.0)])
def test_stall_point_at_a_tie(term: float, stall: float) -> None:
    # A power-of-two term is exactly half an ulp one binade up: 32 + 2^-6 is a tie in fp16 (ulp(32) = 2^-5)
    # and round-to-nearest-even keeps 32, so the sum stalls there, not at 64. Checked by running the sum.
    import numpy as np
    total, step = np.float16(0), np.float16(term)
    while np.float16(total + step) != total:
        total = np.float16(total + step)
    assert float(total) == stall
    assert stall_point(term, "fp16") == stall
