"""Entry point: the `precisionlab` command group; commands are discovered from this package."""

from __future__ import annotations

import importlib
import pkgutil
from typing import Any

import click

from precisionlab import __version__

_NOT_COMMANDS = {"main", "common"}


class FriendlyGroup(click.Group):
    """A group whose commands report user errors as one line and exit with code 2."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except click.UsageError as exc:
            # click would print three lines (usage, hint, error); keep it to one.
            where = (exc.ctx or ctx).command_path
            click.echo(f"error: {exc.format_message()} (see `{where} --help`)", err=True)
            ctx.exit(2)
        except (click.ClickException, click.exceptions.Exit, click.Abort):
            raise
        except (ValueError, TypeError, OSError, KeyError) as exc:
            message = exc.args[0] if isinstance(exc, KeyError) and exc.args else exc
            click.echo(f"error: {message}", err=True)
            ctx.exit(2)
        except MemoryError as exc:
            # sizes are bounded where they are checked, but a large input file or a small machine can
            # still run out: say so in one line rather than print numpy's traceback.
            detail = f" ({exc})" if str(exc) else ""
            click.echo(f"error: not enough memory{detail}; try smaller sizes", err=True)
            ctx.exit(2)


def _discover(group: click.Group) -> None:
    package = importlib.import_module("precisionlab.cli")
    for info in sorted(pkgutil.iter_modules(package.__path__), key=lambda i: i.name):
        if info.name in _NOT_COMMANDS or info.name.startswith("_"):
            continue
        module = importlib.import_module(f"precisionlab.cli.{info.name}")
        command = getattr(module, "COMMAND", None)
        if isinstance(command, click.Command):
            group.add_command(command)


@click.group(cls=FriendlyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="precisionlab")
def cli() -> None:
    """precisionlab: exact number formats, honest quantization, measured numerical hazards."""


_discover(cli)


def main() -> None:
    cli(prog_name="precisionlab")


if __name__ == "__main__":
    main()
