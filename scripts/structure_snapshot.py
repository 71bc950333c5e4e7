"""Snapshot every lab's `--json` findings and the golden code tables, to check a refactor changes nothing.

    python scripts/structure_snapshot.py DIR            # write the snapshot into DIR (replaced whole)
    python scripts/structure_snapshot.py DIR --compare OTHER   # ... then compare DIR with OTHER byte by byte
    python scripts/structure_snapshot.py --compare-only A B     # compare two snapshots already written

What goes in (all through the command line, in-process):
- `precisionlab run --quick`: one file per lab, `labs/<lab>.json` (the lab's JSON document: findings,
  summary, params, sections, figures). The eval lab takes minutes (it loads a model); it is left out
  unless `--with-eval` is given.
- standalone commands whose output is deterministic, with `--json`: `commands/<name>.json`.
- the golden data: `formats --codes FMT --csv` for every format of 8 bits or fewer (`golden/*.csv`), and
  the tagged safetensors file `quant save` writes for each of a few schemes: its metadata and the SHA-256
  of every tensor's bytes (codes and scales); see `safetensors_digest`.

What is taken out, by name (everything else is compared exactly):
- the report's `provenance` (date, commit, machine, Python version): it names the run, not the result;
- values that are measured times or come from measured times (listed in TIMED_FINDINGS, TIMED_COLUMNS,
  TIMED_FIGURES, TIMED_SUMMARIES below, each with its reason). They are replaced by the string
  "<timed>" so the key itself (and the table shape) is still compared.
"""

from __future__ import annotations

import argparse
import filecmp
import fnmatch
import json
import re
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

TIMED = "<timed>"

TIMED_FINDINGS: dict[str, str] = {
    # gemm lab: the CPU ceilings and library kernels are timed on this machine.
    "machine.copy_gbps": "measured memory-copy bandwidth (gemm, axpy)",
    "machine.*_matmul_gflops": "measured CPU matmul rate (gemm)",
    "roofline.measured.*.attainable_tflops": "roofline of the measured ceilings (gemm)",
    "roofline.measured.*.bound": "intensity against the measured ridge point: can flip with the timing (gemm)",
    "roofline.*.fraction_of_roof": "measured kernel rate over the roof (gemm)",
    "roofline.*x*x*.bound": "intensity against the measured ridge point (gemm)",
    # axpy lab: every rate is a timing.
    "axpy.*.ms": "measured time per iteration (axpy)",
    "axpy.*.gbps": "measured bandwidth (axpy)",
    "axpy.*.fraction_of_copy": "measured bandwidth over the measured copy ceiling (axpy)",
    "axpy.*_speedup": "ratio of two measured times (axpy)",
    "axpy.fp32.path": "fp32 runs the faster of numpy and torch: the path is chosen by timing (axpy)",
    # eval lab (--with-eval): run state, not results.
    "eval.*.reference.cached": "whether this run found the float reference in its on-disk cache (eval)",
}
"""Finding keys (fnmatch patterns) whose values are timings or derived from timings."""

TIMED_COLUMNS: dict[tuple[str, str], str] = {
    ("gemm", "emul ms"): "time of the numpy emulation",
    ("gemm", "emul GFLOP/s"): "rate of the numpy emulation",
    ("gemm", "emul GB/s"): "bandwidth of the numpy emulation",
    ("gemm", "ms"): "time of a CPU library kernel",
    ("gemm", "GFLOP/s"): "rate of a CPU library kernel",
    ("gemm", "GB/s"): "bandwidth of a CPU library kernel",
    ("gemm", "bound"): "against the measured ridge point",
    ("gemm", "fraction of roof"): "measured rate over the measured roof",
    ("gemm", "bandwidth GB/s"): "measured copy bandwidth (the datasheet rows are constant, masked alike)",
    ("gemm", "peak TFLOP/s"): "measured matmul peak",
    ("gemm", "ridge FLOP/B"): "measured peak over measured bandwidth",
    ("axpy", "path"): "the fp32 row runs the faster of numpy and torch, chosen by timing",
    ("axpy", "ms/iter"): "measured time",
    ("axpy", "GB/s"): "measured bandwidth",
    ("axpy", "speedup vs fp32"): "ratio of measured times",
    ("axpy", "fraction of copy"): "measured over measured",
}
"""(lab, column header): table columns whose cells are timings or derived from timings."""

TIMED_FIGURES: dict[tuple[str, str], str] = {
    ("gemm", "roofline"): "the measured ceilings and kernel points",
    ("axpy", "axpy_bandwidth"): "measured bandwidth per size",
}
"""(lab, figure key): figures whose series are timings (title and labels are still compared)."""

TIMED_TITLES: dict[tuple[str, str], tuple[str, str]] = {
    ("axpy", "axpy"): (r"\([^()]* ceiling\)",
                       "names the copy kernel of the ceiling: the fastest of four, chosen by timing"),
}
"""(lab, section key): (regex, reason): the part of a section title that names something chosen by timing."""

TIMED_NOTES: dict[str, tuple[str, str]] = {
    "eval": (r"Reference (computed|read from its cache) \([^()]*\)\.",
             "the float reference's time, and whether it came from the cache (run state)"),
}
"""lab: (regex, reason): the part of any section note of the lab that reports run state or a time."""

TIMED_SUMMARIES: dict[str, str] = {
    "axpy": "the summary quotes the measured speed ratio and copy ceiling",
}
"""Labs whose one-line summary quotes a timing."""


def timed_finding(key: str) -> bool:
    return any(fnmatch.fnmatchcase(key, pattern) for pattern in TIMED_FINDINGS)


def mask_document(lab: str, doc: dict[str, Any]) -> dict[str, Any]:
    """The lab's JSON document with provenance dropped and every timed value replaced by TIMED."""
    doc = dict(doc)
    doc.pop("provenance", None)
    doc["findings"] = {k: (TIMED if timed_finding(k) else v) for k, v in doc.get("findings", {}).items()}
    if lab in TIMED_SUMMARIES:
        doc["summary"] = TIMED
    sections = []
    for section in doc.get("sections", []):
        section = dict(section)
        if (lab, section.get("key")) in TIMED_TITLES:
            section["title"] = re.sub(TIMED_TITLES[lab, section["key"]][0], TIMED, section["title"])
        if lab in TIMED_NOTES and "note" in section:
            section["note"] = re.sub(TIMED_NOTES[lab][0], TIMED, section["note"])
        columns = section.get("columns") or []
        timed = [i for i, name in enumerate(columns) if (lab, name) in TIMED_COLUMNS]
        if timed and "rows" in section:
            section["rows"] = [[TIMED if i in timed else cell for i, cell in enumerate(row)] for row in section["rows"]]
        sections.append(section)
    doc["sections"] = sections
    figures = []
    for figure in doc.get("figures", []):
        figure = dict(figure)
        if (lab, figure.get("key")) in TIMED_FIGURES:
            figure["series"] = [{**s, "x": TIMED, "y": TIMED} for s in figure.get("series", [])]
            # reference lines drawn at measured values (the copy ceiling): their place and label are timings too
            figure["hlines"] = [TIMED for _ in figure.get("hlines", [])]
        figures.append(figure)
    doc["figures"] = figures
    return doc


GOLDEN_SCHEMES = ["int8:row", "int4:g128", "nf4:g64", "mxfp8", "mxfp4", "nvfp4", "dsv3_weight", "e4m3"]
"""Schemes whose `quant save` file (codes and scales, byte for byte) is part of the golden data."""

GOLDEN_EXTRA_FORMATS = ["binary8p3", "binary8p4se", "binary6p3", "binary4p2uf", "e3m4", "e2m5"]
"""Formats outside the registry whose code tables are golden data too (P3109 and custom layouts)."""

COMMANDS: dict[str, list[str]] = {
    "formats": ["formats"],
    "formats_p3109": ["formats", "p3109"],
    "formats_custom": ["formats", "e6m9", "e3m4", "binary8p3", "binary6p3se"],
    "explain_0.1_all": ["explain", "0.1", "-f", "all"],
    "explain_code_e4m3": ["explain", "0x7e", "-f", "e4m3"],
    "explain_sat": ["explain", "1e6", "-f", "e5m2", "--overflow", "saturate", "--rounding", "toward_zero"],
    "limits_value": ["limits", "--quick", "--value", "65519", "--formats", "fp16,bf16,e4m3,e5m2"],
    "quant_demo": ["quant", "demo", "--cols", "256"],
    "quant_drill": ["quant", "drill"],
    "quant_compare": ["quant", "compare", "{weights}"],
    "quant_compare_st": ["quant", "compare", "{weights_st}", "-s", "int4:g32,nvfp4,mxfp6_e3m2,int8:tensor"],
    "lossscale_census": ["lossscale", "census"],
    "lossscale_bill": ["lossscale", "bill"],
    "lossscale_train": ["lossscale", "train", "--steps", "150"],
    "capacity": ["capacity"],
    "capacity_h200_deepseek": ["capacity", "-m", "deepseek_v3", "-g", "h200,mi300x", "--tp", "8"],
    "advise": ["advise"],
    "advise_custom": ["advise", "--role", "activations", "--range-decades", "5", "--rel-error", "0.01"],
    "audit": ["audit", "{saved_int4}", "-s", "int4:g128,nvfp4"],
}
"""Standalone commands (beside `run --quick`) whose output is deterministic; each runs with --json."""


def make_inputs(folder: Path) -> dict[str, str]:
    """Deterministic input files for the commands that read one."""
    import numpy as np

    rng = np.random.default_rng(1234)
    weights = (rng.standard_normal((64, 256)) * 0.02).astype(np.float32)
    weights[3, 5] = 1.5  # an outlier
    np.save(folder / "weights.npy", weights)
    from safetensors.numpy import save_file

    save_file({"layer.0.weight": weights, "layer.0.bias": weights[0].copy(),
               "layer.1.weight": (rng.standard_normal((128, 64)) * 0.05).astype(np.float16)},
              str(folder / "weights.safetensors"))
    return {"weights": str(folder / "weights.npy"), "weights_st": str(folder / "weights.safetensors"),
            "saved_int4": str(folder / "saved_int4_g128.safetensors")}


def safetensors_digest(path: Path) -> dict[str, Any]:
    """A tagged safetensors file as canonical JSON: its metadata (sorted: the library writes the header's
    maps in no fixed order, so the file's bytes differ between identical runs) and, per tensor, dtype,
    shape and the SHA-256 of its raw bytes (the codes and scales). Read from the file layout itself
    (8-byte little-endian header length, JSON header, data), so every dtype is covered."""
    import hashlib

    raw = path.read_bytes()
    size = int.from_bytes(raw[:8], "little")
    header = json.loads(raw[8:8 + size])
    data = raw[8 + size:]
    metadata = header.pop("__metadata__", {})
    tensors = {}
    for name in sorted(header):
        entry = header[name]
        begin, stop = entry["data_offsets"]
        tensors[name] = {"dtype": entry["dtype"], "shape": entry["shape"],
                         "sha256": hashlib.sha256(data[begin:stop]).hexdigest()}
    return {"metadata": {k: metadata[k] for k in sorted(metadata)}, "tensors": tensors}


def invoke(args: list[str]) -> str:
    from click.testing import CliRunner

    from precisionlab.cli.main import cli

    result = CliRunner().invoke(cli, args, catch_exceptions=False)
    if result.exit_code != 0:
        raise SystemExit(f"precisionlab {' '.join(args)} exited {result.exit_code}:\n{result.output}")
    return result.stdout


def dumps(data: object) -> str:
    return json.dumps(data, indent=1, sort_keys=False, allow_nan=False) + "\n"


def write_snapshot(out: Path, with_eval: bool) -> None:
    from precisionlab.formats.registry import list_formats
    from precisionlab.labs import all_labs

    if out.exists():
        shutil.rmtree(out)
    (out / "labs").mkdir(parents=True)
    (out / "commands").mkdir()
    (out / "golden").mkdir()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        inputs = make_inputs(work)
        names = [lab.name for lab in all_labs() if with_eval or lab.name != "eval"]
        invoke(["run", "--quick", "--out", str(work / "run"), "--only", ",".join(names)])
        report = json.loads((work / "run" / "results.json").read_text())
        for doc in report["labs"]:
            (out / "labs" / f"{doc['lab']}.json").write_text(dumps(mask_document(doc["lab"], doc)))
        for scheme in GOLDEN_SCHEMES:
            target = work / f"saved_{scheme.replace(':', '_')}.safetensors"
            invoke(["quant", "save", inputs["weights_st"], "-s", scheme, "-o", str(target)])
            (out / "golden" / f"quant_save_{target.stem[6:]}.json").write_text(dumps(safetensors_digest(target)))
        invoke(["quant", "save", inputs["weights_st"], "-s", "int4:g128", "-o", inputs["saved_int4"]])
        for name, args in COMMANDS.items():
            args = [a.format(**inputs) for a in args]
            text = invoke([*args, "--json"])
            try:
                doc = json.loads(text)
            except json.JSONDecodeError as exc:
                raise SystemExit(f"precisionlab {' '.join(args)} --json printed no JSON: {text[:300]!r}") from exc
            lab = doc.get("lab", name)
            # paths of the temporary inputs would differ between runs: name them by their file name
            (out / "commands" / f"{name}.json").write_text(dumps(mask_document(lab, doc)).replace(tmp, "<tmp>"))
        names = [fmt.name for fmt in list_formats() if fmt.bits <= 8] + GOLDEN_EXTRA_FORMATS
        for name in names:
            codes = work / f"codes_{name}"
            invoke(["formats", "--codes", name, "--csv", str(codes)])
            for csv in sorted(codes.glob("*.csv")):
                shutil.copy(csv, out / "golden" / csv.name)
            text = invoke(["formats", "--codes", name, "--json"])
            (out / "golden" / f"codes_{name}.json").write_text(dumps(mask_document("formats", json.loads(text))))
    (out / "MANIFEST.txt").write_text("".join(f"{p.relative_to(out)}\n" for p in sorted(out.rglob("*")) if p.is_file()))


def compare(a: Path, b: Path) -> int:
    """Print every file that differs or is missing on one side; 0 when the two snapshots are byte-identical."""
    files_a = {p.relative_to(a) for p in a.rglob("*") if p.is_file()}
    files_b = {p.relative_to(b) for p in b.rglob("*") if p.is_file()}
    problems = 0
    for rel in sorted(files_a ^ files_b):
        print(f"only in {a if rel in files_a else b}: {rel}")
        problems += 1
    for rel in sorted(files_a & files_b):
        if not filecmp.cmp(a / rel, b / rel, shallow=False):
            print(f"differs: {rel}")
            problems += 1
    total = len(files_a | files_b)
    print(f"{total - problems} of {total} files byte-identical" + ("" if problems else " (all)"))
    return 1 if problems else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out", nargs="?", type=Path, help="folder to write the snapshot into (replaced whole)")
    parser.add_argument("--compare", type=Path, default=None, help="a snapshot to compare the new one with")
    parser.add_argument("--compare-only", nargs=2, type=Path, metavar=("A", "B"), help="compare two snapshots")
    parser.add_argument("--with-eval", action="store_true", help="include the eval lab (minutes: loads a model)")
    args = parser.parse_args(argv)
    if args.compare_only:
        return compare(*args.compare_only)
    if args.out is None:
        parser.error("give the folder to write the snapshot into")
    write_snapshot(args.out, args.with_eval)
    print(f"wrote {args.out}")
    return compare(args.compare, args.out) if args.compare is not None else 0


if __name__ == "__main__":
    sys.exit(main())
