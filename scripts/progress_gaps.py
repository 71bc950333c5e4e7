"""Time the silences of a command off a terminal: run it with stderr (and stdout) to a pipe, stamp every line
as it arrives, and print the longest gaps between lines with the line that ended each one.

    python scripts/progress_gaps.py -- precisionlab axpy
    python scripts/progress_gaps.py --top 5 --log gaps.txt -- precisionlab eval --model smollm2-135m

The gap before the first line counts from the start of the process (the imports included); the last gap ends
when the process exits. The 1-minute load average is printed before and after (under load every gap grows),
and the command's CPU time (user + system): the wall time it would take on an idle core.
docs/cli.md's rule: off a terminal, no command is silent for more than 5 s (a heartbeat line at least that often).
"""

from __future__ import annotations

import argparse
import os
import resource
import selectors
import subprocess
import sys
import time


def watch(command: list[str], log: str | None = None) -> tuple[list[tuple[float, str, str]], int, float]:
    """Run `command`; return (time since start, stream, line) per line, the exit code and the total time."""
    start = time.perf_counter()
    env = {**os.environ, "COLUMNS": os.environ.get("COLUMNS", "200")}
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    selector = selectors.DefaultSelector()
    assert process.stdout is not None and process.stderr is not None
    selector.register(process.stdout, selectors.EVENT_READ, "out")
    selector.register(process.stderr, selectors.EVENT_READ, "err")
    lines: list[tuple[float, str, str]] = []
    pending = {"out": b"", "err": b""}
    handle = open(log, "w", encoding="utf-8") if log else None  # noqa: SIM115 (closed below)
    open_streams = 2
    while open_streams:
        for key, _ in selector.select():
            chunk = os.read(key.fileobj.fileno(), 65536)  # type: ignore[union-attr]
            if not chunk:
                selector.unregister(key.fileobj)
                open_streams -= 1
                continue
            now = time.perf_counter() - start
            pending[key.data] += chunk
            *whole, pending[key.data] = pending[key.data].split(b"\n")
            for raw in whole:
                text = raw.decode("utf-8", "replace")
                lines.append((now, key.data, text))
                if handle is not None:
                    handle.write(f"{now:8.1f} {key.data} {text}\n")
                    handle.flush()
    code = process.wait()
    total = time.perf_counter() - start
    if handle is not None:
        handle.close()
    return lines, code, total


def gaps(lines: list[tuple[float, str, str]], total: float) -> list[tuple[float, float, str]]:
    """(gap, time it ended, the line that ended it) for every line and for the exit."""
    out = []
    previous = 0.0
    for at, stream, text in lines:
        out.append((at - previous, at, f"[{stream}] {text}"))
        previous = at
    out.append((total - previous, total, "(exit)"))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--top", type=int, default=8, help="How many of the longest gaps to print.")
    parser.add_argument("--log", default=None, help="Also write every stamped line to this file.")
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("give the command after --")
    before = os.getloadavg()[0]
    lines, code, total = watch(command, args.log)
    after = os.getloadavg()[0]
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    found = gaps(lines, total)
    print(f"{' '.join(command)}: exit {code}, {total:.1f} s, CPU {used.ru_utime + used.ru_stime:.1f} s, "
          f"{len(lines)} lines, load average {before:.1f} -> {after:.1f}")
    for gap, at, text in sorted(found, reverse=True)[:args.top]:
        print(f"  {gap:6.1f} s silent, ending at {at:7.1f} s with {text[:110]}")
    sys.exit(0)


if __name__ == "__main__":
    main()
