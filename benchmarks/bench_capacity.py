"""How long the capacity and advise commands take, against the CLI's own start-up cost.

    python3 benchmarks/bench_capacity.py [--repeat 5]

Measures, best of --repeat:
  in process : labs.capacity.run() and labs.advise.run() (the arithmetic and table building),
               and one max_batch() / decode_step() call (the inner arithmetic);
  end to end : `precisionlab capacity --json`, `precisionlab advise --json` and, as the peer,
               `precisionlab formats --json` (interpreter + import + click start-up + a tiny lab),
and prints each end-to-end time as a ratio to the peer. Nothing is asserted.
"""

from __future__ import annotations

import argparse
import platform
import subprocess
import sys
from collections.abc import Callable

from _timing import best_of


def cli(*args: str) -> Callable[[], object]:
    command = [sys.executable, "-m", "precisionlab.cli.main", *args]
    return lambda: subprocess.run(command, check=True, capture_output=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()

    from precisionlab.capacity import decode_step, get_model, max_batch
    from precisionlab.hardware import get_accelerator
    from precisionlab.labs import advise, capacity

    model, h100 = get_model("llama3_8b"), get_accelerator("h100")
    inner = {
        "max_batch() once": lambda: max_batch(model, h100, "bf16", "fp8", 32768),
        "decode_step() once": lambda: decode_step(model, h100, "int4", "fp8", 8192, 32),
        "capacity.run()": lambda: capacity.run(),
        "capacity.run(deepseek_v3, tp 8)": lambda: capacity.run(model="deepseek_v3", gpu="h200", tp=8),
        "advise.run()": lambda: advise.run(),
    }
    print(f"machine: {platform.machine()} {platform.processor() or ''} python {platform.python_version()}")
    print(f"in process (best of {args.repeat})")
    for label, fn in inner.items():
        print(f"  {label:<34} {1e3 * best_of(fn, args.repeat):9.3f} ms")

    peer = best_of(cli("formats", "--json"), args.repeat)
    print(f"end to end, subprocess (best of {args.repeat})")
    print(f"  {'precisionlab formats --json (peer)':<34} {peer:9.3f} s   1.00x")
    for label, argv in (("precisionlab capacity --json", ("capacity", "--json")),
                        ("precisionlab advise --json", ("advise", "--json")),
                        ("precisionlab capacity --out DIR", ("capacity", "--out", "/tmp/bench_capacity_out"))):
        seconds = best_of(cli(*argv), args.repeat)
        print(f"  {label:<34} {seconds:9.3f} s  {seconds / peer:5.2f}x")


if __name__ == "__main__":
    main()
