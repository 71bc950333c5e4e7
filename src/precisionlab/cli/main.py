"""Entry point: the `precisionlab` command group; commands are discovered from this package.

Exit codes: 0 success, 2 bad input (one line `error: ...`), 1 an internal error (a bug: type,
message and how to get the traceback), 130 interrupted (Ctrl-C: one line, nothing half-written).
`precisionlab --debug CMD` or PRECISIONLAB_DEBUG=1 prints tracebacks. Every command, including
the ones added later, gets this handling from FriendlyGroup (see docs/cli.md).
"""

from __future__ import annotations

import atexit
import contextlib
import difflib
import importlib
import os
import pkgutil
import sys
import threading
import time
import traceback
from typing import Any

import click

from precisionlab import __version__
from precisionlab.cli.common import ARGV
from precisionlab.cli.progress import heartbeat
from precisionlab.peers import install_hint

_NOT_COMMANDS = {"main", "common", "progress"}


DEBUG_ENV = "PRECISIONLAB_DEBUG"
"""Environment variable: set to 1 to print the traceback of any error (same as --debug)."""

USER_ERRORS = (ValueError, OSError)
"""What bad input raises: a ValueError (bad values, unknown names, corrupt files) or an OSError
(a missing or unreadable file). These become one line `error: ...` and exit 2."""

BUG_HINT = ("this is a bug in precisionlab, not a problem with your input; please report it with the command you "
            "ran and the traceback (rerun with --debug or PRECISIONLAB_DEBUG=1)")


INTERRUPTED = 130
"""Exit code after Ctrl-C (128 + SIGINT), as shells report it."""
BROKEN_PIPE = 141
"""Exit code when the reader of stdout went away (`precisionlab ... | head`): 128 + SIGPIPE, silently."""


def os_error_message(exc: OSError) -> str:
    """One line for a file problem: `no such file: PATH` for a missing one, else the reason and the path."""
    if isinstance(exc, FileNotFoundError) and exc.filename:
        return f"no such file: {exc.filename}"
    if exc.filename and exc.strerror:
        return f"{exc.strerror.lower()}: {exc.filename}"
    if exc.strerror:
        return exc.strerror
    return str(exc)


def option_names(command: click.Command) -> list[str]:
    return [opt for param in command.params if isinstance(param, click.Option)
            for opt in [*param.opts, *param.secondary_opts]]


def misspelt_option(exc: click.NoSuchOption) -> str:
    """`no such option --formt (did you mean --format?)`, matched on the names without their dashes."""
    command = exc.ctx.command if exc.ctx is not None else None
    names = [n for n in option_names(command) if n.startswith("--")] if command is not None else []
    bare = {n.lstrip("-"): n for n in names}
    close = difflib.get_close_matches(exc.option_name.lstrip("-"), list(bare), n=2, cutoff=0.7)
    hint = f" (did you mean {' or '.join(bare[c] for c in close)}?)" if close else ""
    return f"no such option {exc.option_name}{hint}"


def bad_parameter(exc: click.BadParameter) -> str:
    """`--size: must be a positive integer, got 0`: the option as typed, then what is wrong with it; once, when
    the message already begins with it (`--from out.json: not a saved result`), and without the quotes click
    puts around a hint (`'--from'`)."""
    param = exc.param
    if isinstance(param, click.Option) and param.opts:
        name = max(param.opts, key=len)
    elif param is not None:
        name = param.human_readable_name
    else:
        name = str(exc.param_hint or "value").strip("'\"")
    message = exc.message
    if message.startswith((f"{name} ", f"{name}:")):
        return message
    return f"{name}: {message}"


def usage_lines(ctx: click.Context) -> list[str]:
    """The usage line of a group and its subcommands, for a group called without one."""
    command = ctx.command
    lines = [ctx.get_usage()]
    if isinstance(command, click.Group):
        lines.append(f"commands: {', '.join(command.list_commands(ctx))} (see `{ctx.command_path} --help`)")
    return lines


def command_name(ctx: click.Context) -> str:
    """The command being run (`axpy`, `quant demo`), for the heartbeat's lines; `precisionlab` before one."""
    typed = ctx.meta.get(ARGV)
    words = [word for word in (typed if isinstance(typed, list) else []) if not word.startswith("-")]
    if not words:
        return "precisionlab"
    command = ctx.command.get_command(ctx, words[0]) if isinstance(ctx.command, click.Group) else None
    if isinstance(command, click.Group) and len(words) > 1 and words[1] in command.list_commands(ctx):
        return f"{words[0]} {words[1]}"
    return words[0]


def debug_enabled(ctx: click.Context) -> bool:
    flag = bool(ctx.find_root().params.get("debug"))
    return flag or os.environ.get(DEBUG_ENV, "").strip().lower() in ("1", "true", "yes", "on")


class FriendlyGroup(click.Group):
    """A group whose commands report user errors as one line and exit 2, and internal errors
    (anything else: TypeError, KeyError, AttributeError, ...) as a bug report and exit 1;
    --debug (or PRECISIONLAB_DEBUG=1) prints the traceback of either. Off a terminal each command runs under
    its heartbeat (cli.progress.Heartbeat): never silent for longer than HEARTBEAT_S on stderr."""

    def make_context(self, info_name: str | None, args: list[str], parent: click.Context | None = None,
                     **extra: Any) -> click.Context:
        typed = list(args)  # parsing consumes the list: keep the command as typed, for the provenance
        ctx = super().make_context(info_name, args, parent=parent, **extra)
        if parent is None:
            ctx.meta[ARGV] = typed
        return ctx

    @staticmethod
    def _usage_error(ctx: click.Context, exc: click.UsageError) -> None:
        """One line (click would print three: usage, hint, error), lowercase like every other error."""
        where = (exc.ctx or ctx).command_path
        message = exc.format_message().strip()
        if message[:1].isupper() and not message[1:2].isupper():
            message = message[:1].lower() + message[1:]
        click.echo(f"error: {message} (see `{where} --help`)", err=True)
        ctx.exit(2)

    def invoke(self, ctx: click.Context) -> Any:
        try:
            began = _PROCESS_START.pop() if _PROCESS_START else None
            with heartbeat(command_name(ctx), began=began):  # off a terminal: a line at least every HEARTBEAT_S s
                return super().invoke(ctx)
        except click.exceptions.NoArgsIsHelpError as exc:
            # a group called without its subcommand: its usage and subcommands, not the whole help
            for line in usage_lines(exc.ctx or ctx):
                click.echo(line, err=True)
            ctx.exit(2)
        except click.NoSuchOption as exc:
            click.echo(f"error: {misspelt_option(exc)} (see `{(exc.ctx or ctx).command_path} --help`)", err=True)
            ctx.exit(2)
        except click.BadParameter as exc:
            if isinstance(exc, click.MissingParameter):
                self._usage_error(ctx, exc)
            where = (exc.ctx or ctx).command_path
            click.echo(f"error: {bad_parameter(exc)} (see `{where} --help`)", err=True)
            ctx.exit(2)
        except click.UsageError as exc:
            self._usage_error(ctx, exc)
        except (click.ClickException, click.exceptions.Exit, click.Abort):
            raise
        except KeyboardInterrupt:
            # staging folders were removed on the way out: nothing was half-written
            click.echo("interrupted", err=True)
            ctx.exit(INTERRUPTED)
        except BrokenPipeError:
            _silence_stdout()
            ctx.exit(BROKEN_PIPE)
        except USER_ERRORS as exc:
            if debug_enabled(ctx):
                traceback.print_exc()
            message = os_error_message(exc) if isinstance(exc, OSError) else str(exc)
            click.echo(f"error: {message}", err=True)
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


def _silence_stdout() -> None:
    """After EPIPE, point stdout at /dev/null so the interpreter's final flush does not fail again."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass


def _discover(group: click.Group) -> None:
    package = importlib.import_module("precisionlab.cli")
    for info in sorted(pkgutil.iter_modules(package.__path__), key=lambda i: i.name):
        if info.name in _NOT_COMMANDS or info.name.startswith("_"):
            continue
        module = importlib.import_module(f"precisionlab.cli.{info.name}")
        command = getattr(module, "COMMAND", None)
        if isinstance(command, click.Command):
            group.add_command(command)


@click.group("precisionlab", cls=FriendlyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="precisionlab")
@click.option("--debug", is_flag=True,
              help=f"Print the full traceback of any error (also: {DEBUG_ENV}=1).")
def cli(debug: bool) -> None:
    """precisionlab: exact number formats, honest quantization, measured numerical hazards.

    Bad input exits with code 2 and one line `error: ...`; an internal error (a bug) exits with 1;
    Ctrl-C exits with 130 and leaves no half-written file.
    """


_discover(cli)


_PROCESS_START: list[float] = []
"""Set by main(): when the process started (time.perf_counter's clock), so the heartbeat's first line counts the
interpreter's start and the imports (3 s under load) as silence too."""


def process_age() -> float:
    """Seconds since this process started: /proc/self/stat's start time against /proc/uptime (Linux); 0 elsewhere."""
    try:
        with open("/proc/self/stat", encoding="ascii") as handle:
            fields = handle.read().rsplit(")", 1)[1].split()
        with open("/proc/uptime", encoding="ascii") as handle:
            uptime = float(handle.read().split()[0])
        started = int(fields[19]) / os.sysconf("SC_CLK_TCK")  # field 22 of stat, the 20th after the name
    except (OSError, ValueError, IndexError, AttributeError):
        return 0.0
    return max(0.0, uptime - started)


def main() -> None:
    _PROCESS_START.append(time.perf_counter() - process_age())
    try:
        cli(prog_name="precisionlab")
    except SystemExit as exc:
        leave(exc.code)
    leave(0)  # (click exits itself: a command that returns is code 0)


HEAVY_PEERS = ("torch", "transformers")
"""Peers whose teardown at interpreter exit is slow: after a model command, 7-19 s between the last line and the
end of the process at a load average of 10-12 (measured, docs/cli.md), with nothing printed."""


def leave(code: str | int | None) -> None:
    """End the process with `code` (SystemExit's: None, an int, or a message). When a heavy peer was imported, do
    what the interpreter does at exit (join the threads and stop the thread pools, run the atexit handlers, flush
    stdout and stderr) and then skip its teardown of the modules (os._exit), which only frees memory the system
    takes back at once; otherwise exit as usual."""
    if not any(name in sys.modules for name in HEAVY_PEERS):
        sys.exit(code)
    if code is None:
        status = 0
    elif isinstance(code, int):
        status = code
    else:
        print(code, file=sys.stderr)
        status = 1
    threading._shutdown()  # type: ignore[attr-defined]  # the interpreter's first exit step: threads, pools
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):  # a reader that went away (`| head`), a closed stream
            stream.flush()
    os._exit(status)


if __name__ == "__main__":
    main()
