"""Entry point: the `precisionlab` command group; commands are discovered from this package.

Exit codes: 0 success, 2 bad input (one line `error: ...`), 1 an internal error (a bug: type,
message and how to get the traceback). `precisionlab --debug CMD` or PRECISIONLAB_DEBUG=1 prints tracebacks.
"""

from __future__ import annotations

import importlib
import os
import pkgutil
import traceback
from typing import Any

import click

from precisionlab import __version__
from precisionlab.peers import install_hint

_NOT_COMMANDS = {"main", "common"}


DEBUG_ENV = "PRECISIONLAB_DEBUG"
"""Environment variable: set to 1 to print the traceback of any error (same as --debug)."""

USER_ERRORS = (ValueError, OSError)
"""What bad input raises: a ValueError (bad values, unknown names, corrupt files) or an OSError
(a missing or unreadable file). These become one line `error: ...` and exit 2."""

BUG_HINT = ("this is a bug in precisionlab, not a problem with your input; please report it with the command you "
            "ran and the traceback (rerun with --debug or PRECISIONLAB_DEBUG=1)")


def debug_enabled(ctx: click.Context) -> bool:
    flag = bool(ctx.find_root().params.get("debug"))
    return flag or os.environ.get(DEBUG_ENV, "").strip().lower() in ("1", "true", "yes", "on")


class FriendlyGroup(click.Group):
    """A group whose commands report user errors as one line and exit 2, and internal errors
    (anything else: TypeError, KeyError, AttributeError, ...) as a bug report and exit 1;
    --debug (or PRECISIONLAB_DEBUG=1) prints the traceback of either."""

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
        except USER_ERRORS as exc:
            if debug_enabled(ctx):
                traceback.print_exc()
            click.echo(f"error: {exc}", err=True)
            ctx.exit(2)
        except MemoryError as exc:
            # sizes are bounded where they are checked, but a large input file or a small machine can
            # still run out: say so in one line rather than print numpy's traceback.
            if debug_enabled(ctx):
                traceback.print_exc()
            detail = f" ({exc})" if str(exc) else ""
            click.echo(f"error: not enough memory{detail}; try smaller sizes", err=True)
            ctx.exit(2)
        except Exception as exc:
            if debug_enabled(ctx):
                traceback.print_exc()
            click.echo(f"internal error: {type(exc).__name__}: {exc}", err=True)
            if isinstance(exc, ModuleNotFoundError) and exc.name:
                # an optional peer imported where it must not be: say what would work around it
                peer = exc.name.split(".")[0]
                click.echo(f"  a missing module escaped; installing it may work around it: {install_hint(peer)}",
                           err=True)
            click.echo(f"  {BUG_HINT}", err=True)
            ctx.exit(1)


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
@click.option("--debug", is_flag=True,
              help=f"Print the full traceback of any error (also: {DEBUG_ENV}=1).")
def cli(debug: bool) -> None:
    """precisionlab: exact number formats, honest quantization, measured numerical hazards.

    Bad input exits with code 2 and one line `error: ...`; an internal error (a bug) exits with 1.
    """


_discover(cli)


def main() -> None:
    cli(prog_name="precisionlab")


if __name__ == "__main__":
    main()
