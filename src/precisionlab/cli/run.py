"""`precisionlab run`: every registered lab, one report (results.json, index.html, PNGs)."""

from __future__ import annotations

import time
from pathlib import Path

import click

from precisionlab.cli.common import NonEmptyPath, progress_bar
from precisionlab.labs import all_labs, select_labs


@click.command("run")
@click.option("--out", "out_dir", type=NonEmptyPath(file_okay=False, path_type=Path), default=Path("out"),
              show_default=True, help="Directory for results.json, index.html and the PNG plots.")
@click.option("--quick", is_flag=True, help="Use each lab's small, fast settings.")
@click.option("--only", default=None,
              help="Comma-separated lab names to run; a command's name runs all its labs (quant: demo and drill).")
def COMMAND(out_dir: Path, quick: bool, only: str | None) -> None:
    """Run every lab at its default size and write one report."""
    from precisionlab.report.outputs import write_run

    labs = all_labs() if only is None else select_labs([name.strip() for name in only.split(",") if name.strip()])
    results, timings = [], []
    with progress_bar(len(labs), "labs") as step:
        for lab in labs:
            step(f"running {lab.name}", advance=0)
            start = time.perf_counter()
            results.append(lab.run(**(lab.quick if quick else {})))
            timings.append(time.perf_counter() - start)
            step(f"ran {lab.name}")
    write_run(results, out_dir)
    for result, seconds in zip(results, timings, strict=True):
        click.echo(f"{result.name:<12} {len(result.sections):>2} tables {len(result.figures):>2} figures "
                   f"{len(result.findings):>4} findings  {seconds:6.2f} s")
    for result in results:
        for part in result.skipped:
            click.echo(f"skipped in {result.name}: {part.message()}")
    click.echo(f"wrote {out_dir / 'results.json'} and {out_dir / 'index.html'}")
