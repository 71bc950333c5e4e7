"""`precisionlab run`: every registered lab, one report (results.json, index.html, PNGs).

The report folder is written whole: it is built in a staging folder beside --out (created, and so
checked for writability, before the first lab runs) and swapped in at the end; an error or Ctrl-C
leaves the previous report as it was. An existing --out must be a previous report or empty.

`--include FILE.json` (repeatable; a directory: its <name>.json files) adds saved results (the JSON that
`ladder`, `ptq`, `eval` and every other command write with --out) as sections after the labs that ran. They
are read and checked before any lab runs, so a bad one costs nothing and the previous report stays. A
saved result of a lab that every-lab run would run (`precisionlab eval --out` writes the lab `eval`) takes
that lab's place: the lab is not run. Under --only, naming the same lab twice is refused instead.
"""

from __future__ import annotations

import contextlib
import time
from pathlib import Path

import click

from precisionlab.cli.common import (
    NonEmptyPath,
    activity,
    doing,
    progress,
    progress_line,
    provenance,
    stderr_is_terminal,
)
from precisionlab.labs import all_labs, select_labs


@click.command("run")
@click.option("--out", "out_dir", type=NonEmptyPath(file_okay=False, path_type=Path), default=Path("out"),
              show_default=True, help="Directory for results.json, index.html and the PNG plots (replaced whole).")
@click.option("--quick", is_flag=True, help="Use each lab's small, fast settings.")
@click.option("--only", default=None,
              help="Comma-separated lab names to run; a command's name runs all its labs (quant: demo and drill).")
@click.option("--csv", "csv_dir", type=NonEmptyPath(file_okay=False, path_type=Path), default=None,
              help="Also write every table of every lab as CSV into this directory (<lab>_<table>.csv).")
@click.option("--svg", is_flag=True, help="An SVG beside each PNG (the report links to it).")
@click.option("--include", "include", multiple=True, type=NonEmptyPath(path_type=Path),
              help="A saved lab result (<name>.json from a command's --out, e.g. out/ladder/ladder.json) or a "
                   "directory of them, added as sections after the labs that ran; repeatable, in the order given.")
def COMMAND(out_dir: Path, quick: bool, only: str | None, csv_dir: Path | None, svg: bool,
            include: tuple[Path, ...]) -> None:
    """Run every lab at its default size and write one report.

    Off a terminal (CI logs, pipes) one line per finished lab, with its time, goes to stderr, and a line at
    least every 5 s while a lab runs.
    """
    from precisionlab.report.folders import files_folder, report_folder
    from precisionlab.report.outputs import write_csv_files, write_report_files
    from precisionlab.report.saved import read_included

    labs = all_labs() if only is None else select_labs([name.strip() for name in only.split(",") if name.strip()])
    # before any lab runs; under --only a lab both run and included is a contradiction, otherwise the file wins
    included = read_included(include, running=[lab.name for lab in labs] if only is not None else (),
                             replaced=out_dir)
    in_place = {saved.result.name for saved in included} & {lab.name for lab in labs}
    labs = [lab for lab in labs if lab.name not in in_place]
    record = provenance()
    results, timings = [], []
    logged = not stderr_is_terminal()
    with contextlib.ExitStack() as folders:
        stage = folders.enter_context(report_folder(out_dir))  # fails here, before any lab, if unwritable
        csv_stage = folders.enter_context(files_folder(csv_dir)) if csv_dir is not None else None
        with progress(len(labs), "labs") as step:
            for number, lab in enumerate(labs, 1):
                step(f"running {lab.name}", advance=0)
                activity(f"running the {lab.name} lab ({number}/{len(labs)})")  # what the heartbeat names
                start = time.perf_counter()
                results.append(lab.run(**(lab.quick if quick else {})))
                timings.append(time.perf_counter() - start)
                if logged:
                    progress_line(f"ran {lab.name} in {timings[-1]:.1f} s ({number}/{len(labs)})")
                else:
                    step(f"ran {lab.name}")
        start = time.perf_counter()
        with doing(f"writing the report ({len(results) + len(included)} results, their figures)"):
            write_report_files(results, stage, record, svg, included)
            reported = [*results, *(saved.result for saved in included)]
            if csv_stage is not None:
                write_csv_files(reported, csv_stage)
        if logged:
            progress_line(f"wrote the report in {time.perf_counter() - start:.1f} s")
    tails = [f"{seconds:6.2f} s" for seconds in timings] + [
        f"included from {saved.path}" + (" (in place of running it)" if saved.result.name in in_place else "")
        for saved in included]
    for result, tail in zip(reported, tails, strict=True):
        click.echo(f"{result.name:<12} {len(result.sections):>2} tables {len(result.figures):>2} figures "
                   f"{len(result.findings):>4} findings  {tail}")
    for result in reported:
        for part in result.skipped:
            click.echo(f"skipped in {result.name}: {part.message()}")
    click.echo(f"wrote {out_dir / 'results.json'} and {out_dir / 'index.html'}")
    if csv_dir is not None:
        click.echo(f"wrote {sum(len(r.sections) for r in reported)} CSV tables to {csv_dir}")
