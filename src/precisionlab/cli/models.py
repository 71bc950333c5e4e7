"""`precisionlab models`: the packaged models, whether they are installed, and where their files are.

    precisionlab models                        name, package, installed, kind, path (one line each)
    precisionlab models --json                 the same as JSON
    precisionlab models --where smollm2-135m   the path alone, e.g. for `precisionlab audit "$(...)"`

Found with importlib.util.find_spec (models.packaged), which locates the packages without importing them;
neither torch nor transformers is needed.
"""

from __future__ import annotations

import json

import click


@click.command("models")
@click.option("--where", "where", metavar="NAME", default=None,
              help="Print the installed file or directory of this packaged model and nothing else.")
@click.option("--json", "as_json", is_flag=True, help="Print the list as JSON.")
def COMMAND(where: str | None, as_json: bool) -> None:
    """The packaged models (eval, ptq and ladder take their names) and the paths of their files."""
    from precisionlab.models.packaged import PACKAGED, packaged_path

    if where is not None:
        if where not in PACKAGED:
            raise ValueError(f"--where: unknown packaged model {where!r}; choose one of {', '.join(PACKAGED)}")
        path = packaged_path(where)
        if path is None:
            raise ValueError(f"{where} is not installed: {PACKAGED[where].install}")
        click.echo(str(path))
        return
    rows = []
    for name, entry in PACKAGED.items():
        path = packaged_path(name)
        rows.append({"name": name, "package": entry.package, "installed": path is not None, "kind": entry.kind,
                     "path": str(path) if path is not None else None, "install": entry.install,
                     "description": entry.description})
    if as_json:
        click.echo(json.dumps(rows, indent=2))
        return
    for row in rows:
        click.echo(f"{row['name']}  ({row['kind']}, package {row['package']}): {row['description']}")
        click.echo(f"  {row['path']}" if row["installed"] else f"  not installed: {row['install']}")
