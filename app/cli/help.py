"""Help pages that show each command's whole summary line (click cuts them to the
terminal width minus the names, ending in ``...``)."""

from __future__ import annotations

import click


class FullHelpGroup(click.Group):
    """A :class:`click.Group` whose command list wraps each summary instead of cutting it."""

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows = []
        for name in self.list_commands(ctx):
            cmd = self.get_command(ctx, name)
            if cmd is None or cmd.hidden:
                continue
            rows.append((name, cmd.get_short_help_str(limit=10_000)))
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)
