"""An evaluation's candidates scored in this process against N worker processes (eval.workers), on the machine as
it is now.

    python3 benchmarks/bench_eval_workers.py [--model smollm2-135m] [--schemes int8:row,int4:g128]
        [--tasks ppl,choice] [--size 0.1] [--workers 2] [--threads 1] [--rounds 1]

The reference is computed once first (into a temporary cache), then each round runs `runner.evaluate` in turn with
workers=1 and workers=N, so a burst of load from other work on a shared machine hits both alike. A pool is started
fresh in every run: its workers' start (importing torch and transformers) and model load count, as they do in
`precisionlab eval --workers N`. The runs' findings are checked equal first (bit for bit, all but whether the
reference came from the cache). Prints per run the wall time and the load average before it (`os.getloadavg`),
the CPU time of this process and its children, then the medians, the ratio and the peak resident memory of
this process and of the largest worker. Times are printed, never asserted.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--schemes", default="int8:row,int4:g128")
    parser.add_argument("--tasks", default="ppl,choice")
    parser.add_argument("--size", type=float, default=0.1)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--threads", type=int, default=1, help="torch threads of every process")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--resamples", type=int, default=1000)
    args = parser.parse_args()

    import torch

    from precisionlab.eval import runner
    from precisionlab.eval.candidates import parse_candidates
    from precisionlab.eval.tasks import resolve_tasks
    from precisionlab.labs.eval import result_from_run
    from precisionlab.models import load_model

    torch.set_num_threads(args.threads)
    loaded = load_model(args.model)
    candidates = parse_candidates([args.schemes])
    specs = resolve_tasks(args.tasks.split(","), loaded.kind, size=args.size)
    print(f"{loaded.name}: loaded in {loaded.load_seconds:.1f} s; {len(candidates)} candidates on "
          f"{', '.join(f'{s.name} ({len(s.items)})' for s in specs)}; torch threads {args.threads}; CPUs "
          f"{len(os.sched_getaffinity(0))}", flush=True)

    def findings(run: Any) -> dict[str, Any]:
        return {k: v for k, v in result_from_run(run, {}).findings.items() if not k.endswith(".reference.cached")}

    with tempfile.TemporaryDirectory() as cache:
        def evaluate(workers: int) -> tuple[float, float, Any]:
            wall, cpu = time.perf_counter(), _cpu()
            run = runner.evaluate(loaded, candidates, specs, 1.0, cache_dir=Path(cache), n_resamples=args.resamples,
                                  threads=args.threads, workers=workers, model_spec=args.model)
            return time.perf_counter() - wall, _cpu() - cpu, run

        seconds, _, reference = evaluate(1)
        print(f"reference and a first serial run: {seconds:.1f} s", flush=True)
        samples: dict[int, list[float]] = {1: [], args.workers: []}
        for r in range(args.rounds):
            for workers in (1, args.workers):
                load = os.getloadavg()
                seconds, cpu, run = evaluate(workers)
                if findings(run) != findings(reference):
                    raise SystemExit(f"error: the findings of {workers} worker(s) differ from the serial run's")
                samples[workers].append(seconds)
                print(f"round {r + 1}: {workers} worker(s) {seconds:7.1f} s wall, {cpu:7.1f} s CPU (with children)"
                      f"   load average before {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}", flush=True)
    one = statistics.median(samples[1])
    many = statistics.median(samples[args.workers])
    print(f"findings equal (bit for bit); median 1 worker {one:.1f} s, {args.workers} workers {many:.1f} s: "
          f"{args.workers} workers take {many / one:.2f}x the serial time")
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6
    workers_peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1e6
    print(f"peak resident memory: this process {peak:.2f} GB, the largest worker {workers_peak:.2f} GB")
    print(f"load average at the end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


def _cpu() -> float:
    """User + system CPU seconds of this process and its finished children."""
    times = os.times()
    return times.user + times.system + times.children_user + times.children_system


if __name__ == "__main__":
    main()
