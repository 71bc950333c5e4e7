"""`precisionlab capacity` through the CLI runner: findings keys, JSON, plots and one-line errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.test_capacity_config import LLAMA3_8B_CONFIG


def findings(run_cli, *args: str) -> dict:  # type: ignore[no-untyped-def]
    result = run_cli("capacity", "--json", *args)
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)["findings"]


def test_required_findings(run_cli) -> None:  # type: ignore[no-untyped-def]
    f = findings(run_cli)
    assert f["kv.llama3_8b.fp16.bytes_per_token"] == 131072
    assert f["kv.llama3_8b.fp16.bytes_per_seq_8k"] == 2**30
    assert round(f["decode.13b.fp16.tokens_per_s"]) == 115
    assert round(f["decode.13b.int8.tokens_per_s"]) == 231
    assert round(f["decode.13b.int4.tokens_per_s"]) == 462
    assert round(f["decode.13b.ridge_flop_per_byte"]) == 333
    # scale bytes cost a little: int4 g128 asym stores 4-bit codes, an fp16 scale and a 4-bit zero point per
    # 128 weights (GPTQ / AWQ), 4 + (16 + 4) / 128 = 4.15625 bits: 3e12 / (13e9 * 4.15625 / 8)
    assert f["decode.13b.int4_scaled.tokens_per_s"] == pytest.approx(3e12 / (13e9 * (4 + (16 + 4) / 128) / 8))
    assert f["decode.13b.int8_scaled.tokens_per_s"] == pytest.approx(3e12 / (13e9 * (8 + 16 / 128) / 8))
    for ctx in ("4k", "32k", "128k"):
        for w in ("bf16", "fp8", "int4"):
            for kv in ("fp16", "fp8", "int8", "int4", "kivi2"):
                assert isinstance(f[f"batch.llama3_8b.h100.{ctx}.{w}.{kv}"], int)
    assert f["batch.llama3_8b.h100.4k.bf16.fp16"] == 104  # (72e9 - 16.06e9) / 512 MiB, see test_capacity_model


def test_gpu_override_changes_capacity(run_cli) -> None:  # type: ignore[no-untyped-def]
    base = findings(run_cli, "--gpu", "h100")
    bigger = findings(run_cli, "--gpu", "h100", "--memory", "160", "--bandwidth", "6700", "--reserve", "0")
    # hand: floor((160e9 - 2 x 8,030,261,248) / (4096 x 131072))
    assert bigger["batch.llama3_8b.h100.4k.bf16.fp16"] == (160 * 10**9 - 2 * 8_030_261_248) // (4096 * 131072)
    key = "decode.llama3_8b.h100.8k.bf16.fp16.batch1.tokens_per_s"
    assert bigger[key] == pytest.approx(2 * base[key])


def test_several_gpus_and_tp(run_cli) -> None:  # type: ignore[no-untyped-def]
    f = findings(run_cli, "--gpu", "h100,mi300x", "--tp", "2", "--batch", "8")
    assert f["batch.llama3_8b.mi300x.4k.bf16.fp16"] > f["batch.llama3_8b.h100.4k.bf16.fp16"]
    assert f["tp.llama3_8b.h100.tp2.batch1.tokens_per_s"] == pytest.approx(
        2 * f["tp.llama3_8b.h100.tp1.batch1.tokens_per_s"])


def test_config_file_findings_under_model_name(run_cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    folder = tmp_path / "my-llama"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(LLAMA3_8B_CONFIG))
    f = findings(run_cli, "--config", str(folder / "config.json"))
    assert f["kv.my_llama.fp16.bytes_per_token"] == 131072
    assert f["kv.my_llama.fp16.bytes_per_seq_8k"] == 2**30
    assert f["batch.my_llama.h100.4k.bf16.fp16"] == 104
    f = findings(run_cli, "--config", str(folder / "config.json"), "--name", "Custom 8B")
    assert "kv.custom_8b.fp16.bytes_per_token" in f


def test_sliding_window_crossover_is_inf_in_strict_json(run_cli) -> None:  # type: ignore[no-untyped-def]
    f = findings(run_cli, "--model", "mistral_7b")
    assert f["crossover.mistral_7b.bf16.fp16.context_batch1"] == "inf"
    assert isinstance(f["crossover.mistral_7b.bf16.fp16.context_batch32"], int)


def test_deepseek_runs(run_cli) -> None:  # type: ignore[no-untyped-def]
    f = findings(run_cli, "--model", "deepseek-v3", "--gpu", "h200", "--tp", "8")
    assert f["kv.deepseek_v3.fp16.bytes_per_token"] == 70272
    assert f["batch.deepseek_v3.h200.4k.bf16.fp16"] == 0  # 1.34 TB of bf16 weights do not fit on 8 x 141 GB
    assert f["batch.deepseek_v3.h200.4k.fp8.fp16"] > 0


def test_terminal_output_and_plots(run_cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    result = run_cli("capacity", "--out", str(tmp_path / "out"))
    assert result.exit_code == 0, result.output
    assert "128 KiB" in result.output
    assert (tmp_path / "out" / "capacity_batch_vs_context.png").stat().st_size > 0
    assert (tmp_path / "out" / "capacity_decode_roofline.png").stat().st_size > 0
    assert json.loads((tmp_path / "out" / "capacity.json").read_text())["lab"] == "capacity"


@pytest.mark.parametrize(("args", "message"), [
    (("--model", "llama3-8"), "did you mean"),
    (("--model", "gpt5"), "unknown model 'gpt5'"),
    (("--gpu", "h1000"), "unknown accelerator"),
    (("--reserve", "1.5"), "reserve"),
    (("--config", "missing.json"), "error: no such file: missing.json"),
])
def test_bad_input_is_one_line_exit_2(run_cli, args: tuple[str, ...], message: str) -> None:  # type: ignore[no-untyped-def]
    result = run_cli("capacity", *args)
    assert result.exit_code == 2
    assert message in result.output
    assert result.output.strip().count("\n") == 0


@pytest.mark.parametrize(("text", "message"), [
    ('{"num_hidden_layers": 32', "malformed config.json"),
    (json.dumps({**LLAMA3_8B_CONFIG, "num_attention_heads": 0}), "num_attention_heads must be positive"),
    (json.dumps({**LLAMA3_8B_CONFIG, "num_attention_heads": 30}), "not divisible"),
    (json.dumps({"hidden_size": 4096}), "lacks required field(s): num_hidden_layers"),
])
def test_bad_config_is_one_line_exit_2(run_cli, tmp_path: Path, text: str, message: str) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "config.json"
    path.write_text(text)
    result = run_cli("capacity", "--config", str(path))
    assert result.exit_code == 2
    assert message in result.output
    assert result.output.strip().count("\n") == 0


def test_zero_batch_is_usage_error(run_cli) -> None:  # type: ignore[no-untyped-def]
    assert run_cli("capacity", "--batch", "0").exit_code == 2


def test_registered_lab() -> None:
    from precisionlab.labs import get_lab

    assert get_lab("capacity").order == 50
    assert get_lab("advise").order == 51
