"""torch's default thread count against one thread for the eval passes, on the machine as it is now.

    python3 benchmarks/bench_eval_threads.py [--model smollm2-135m] [--choice 20] [--ppl 4] [--rounds 3]

The reference passes of `precisionlab eval` (eval.runner.reference_pass) on a slice of the built-in
sets, timed in interleaved rounds: each round runs every thread count once, in turn, so a burst of
load from other work on a shared machine hits them alike. The outputs of the thread counts are
checked equal first (log-likelihoods within 1e-4: a different reduction order changes the last
bits). Prints per round the seconds of each count and the load average (`os.getloadavg`) before it,
then the median of each and the ratio against one thread. Times are printed, never asserted.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import statistics
import time


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--choice", type=int, default=20, help="choice examples per pass (0: none)")
    parser.add_argument("--ppl", type=int, default=4, help="perplexity documents per pass (0: none)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--counts", default=None, help="thread counts, comma-separated (default: torch's, 1)")
    args = parser.parse_args()

    import numpy as np
    import torch

    from precisionlab.eval import data
    from precisionlab.eval.runner import reference_pass
    from precisionlab.eval.tasks import TaskSpec, builtin_task
    from precisionlab.models import load_model

    default = torch.get_num_threads()
    counts = [int(c) for c in args.counts.split(",")] if args.counts else sorted({default, 1}, reverse=True)
    loaded = load_model(args.model)
    print(f"{loaded.name}: loaded in {loaded.load_seconds:.1f} s{' (from the cache)' if loaded.from_cache else ''}; "
          f"torch's default threads {default}, interop {torch.get_num_interop_threads()}, CPUs "
          f"{len(os.sched_getaffinity(0))}")
    sizes = data.task_sizes(1.0)
    tasks: list[TaskSpec] = []
    for name, n, full in (("choice", args.choice, sizes.choice_examples), ("ppl", args.ppl, sizes.ppl_documents)):
        if n:
            spec = builtin_task(name)
            tasks.append(dataclasses.replace(spec, items=spec.items[:n]))
            print(f"task {name}: {n} of its {full} default examples")

    def run(count: int) -> tuple[float, list[dict[str, np.ndarray]]]:
        torch.set_num_threads(count)
        start = time.perf_counter()
        outputs = [reference_pass(loaded, spec, lambda _n: None) for spec in tasks]
        return time.perf_counter() - start, outputs

    first = {count: run(count)[1] for count in counts}  # warm-up, and the outputs to compare
    for count in counts[1:]:
        for a, b in zip(first[counts[0]], first[count], strict=True):
            for key in a:
                if not np.allclose(a[key], b[key], rtol=0, atol=1e-4):
                    print(f"warning: {key} differs between {counts[0]} and {count} threads")
    samples: dict[int, list[float]] = {count: [] for count in counts}
    for r in range(args.rounds):
        for count in counts:
            load = os.getloadavg()
            seconds, _ = run(count)
            samples[count].append(seconds)
            print(f"round {r + 1}: {count} thread(s) {seconds:7.2f} s   load average before "
                  f"{load[0]:.2f} {load[1]:.2f} {load[2]:.2f}", flush=True)
    one = statistics.median(samples[1]) if 1 in samples else None
    for count in counts:
        median = statistics.median(samples[count])
        ratio = f", {median / one:.2f}x one thread's time" if one else ""
        print(f"{count} thread(s): median {median:.2f} s{ratio}")
    print(f"load average at the end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
