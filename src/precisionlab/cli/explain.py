"""`precisionlab explain VALUE`: what a format does to one value (or what a code means)."""

from __future__ import annotations

from pathlib import Path

import click

from precisionlab.cli.common import emit, lab_output_options, overflow_option, rounding_option
from precisionlab.labs.explain import explain


def _is_negative_number(arg: str) -> bool:
    """'-3.5', '-inf', '-nan', '-1e5' (and '-0x7e', for its error message) are values, not options."""
    if not arg.startswith("-") or arg.startswith("--"):
        return False
    if arg.lower().startswith("-0x"):
        return True
    try:
        float(arg)
    except ValueError:
        return False
    return True


class ValueCommand(click.Command):
    """Parses a negative VALUE as the argument: click would read '-inf' as the flags -i -n -f."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        # Only negative numbers move behind "--"; an unknown option stays an option, so a misspelt
        # one is reported as such (not as an extra argument).
        if "--" not in args:
            takes_value = {opt for p in self.params if isinstance(p, click.Option) and not p.is_flag for opt in p.opts}
            rest: list[str] = []
            numbers: list[str] = []
            previous = ""
            for arg in args:
                (numbers if previous not in takes_value and _is_negative_number(arg) else rest).append(arg)
                previous = arg
            if numbers:
                args = [*rest, "--", *numbers]
        return super().parse_args(ctx, args)


@click.command("explain", cls=ValueCommand)
@click.argument("value")
@click.option("--format", "-f", "format_spec", default="bf16", show_default=True,
              help="Format name, custom e<E>m<M> (the output says when a name is read as a custom layout), "
                   "P3109 binary<K>p<P>[s|u][e|f], or 'all'.")
@rounding_option()
@overflow_option()
@lab_output_options
def COMMAND(value: str, format_spec: str, rounding: str, overflow: str | None, as_json: bool,
            out_dir: Path | None) -> None:
    """Show VALUE's sign/exponent/mantissa fields, code, neighbours, ulp and rounding error.

    VALUE may be a number (0.1, -3e5, inf, -inf) or a code in hex (0x7e) to decode. A decimal
    beyond float64's range (1e400) or below its smallest subnormal (1e-400) is refused, as
    `limits --value` refuses it: float64 would silently read it as inf or 0.
    """
    emit(explain(value, format_spec, rounding, overflow), as_json, out_dir)
