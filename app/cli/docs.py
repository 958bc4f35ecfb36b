"""``taskgate docs [PAGE]``: the README and every page of ``docs/`` in the terminal
(rendered by rich's Markdown), so a pip install has them too.

The pages ship inside the package (``app/docs``: in a checkout a link to the repository's
``docs/``, in a wheel the files themselves; ``[tool.setuptools.package-data]``); the README
is the package's own description (its metadata), or the file beside ``docs/`` in a checkout.
"""

from __future__ import annotations

from importlib import metadata
from pathlib import Path

import click
from rich.console import Console
from rich.markdown import Markdown
from rich.table import Table

from app.cli.render import out

DOCS = Path(__file__).resolve().parent.parent / "docs"


def pages() -> dict[str, Path]:
    """Page name (``cli``, ``budgets``, …) → file; ``index`` is docs/README.md."""
    if not DOCS.is_dir():
        return {}
    return {("index" if p.stem == "README" else p.stem): p for p in sorted(DOCS.glob("*.md"))}


def readme() -> str:
    """The README: beside ``docs/`` in a checkout, else the package's description."""
    checkout = DOCS.parent / "README.md"
    if checkout.is_file():
        return checkout.read_text(encoding="utf-8")
    try:
        return str(metadata.metadata("taskgate").get_payload())  # type: ignore[attr-defined]
    except metadata.PackageNotFoundError:  # pragma: no cover - running from a bare source tree
        return ""


def title(text: str) -> str:
    """The first heading of a Markdown page."""
    return next((line.lstrip("#").strip() for line in text.splitlines() if line.startswith("#")), "")


@click.command("docs", short_help="Read the README and the docs pages in the terminal.")
@click.argument("page", required=False)
def docs(page: str | None) -> None:
    """Without PAGE, list the pages; with one (readme, index, cli, budgets, …), show it."""
    found = pages()
    if page is None:
        table = Table("page", "title", box=None, header_style="bold")
        table.add_row("readme", title(readme()) + ": the ten-minute tour")
        for name, path in found.items():
            table.add_row(name, title(path.read_text(encoding="utf-8")))
        out.print(table)
        out.print("\ntaskgate docs PAGE shows one (taskgate docs cli: the commands).")
        return
    name = page.lower().removesuffix(".md")
    if name == "readme":
        text = readme()
    elif name in found:
        text = found[name].read_text(encoding="utf-8")
    else:
        raise click.ClickException(f"no page {page!r}; taskgate docs lists them ({', '.join(['readme', *found])})")
    console = out if out.is_terminal else Console(highlight=False, width=100)
    if console.is_terminal:
        with console.pager(styles=True):
            console.print(Markdown(text))
    else:
        console.print(Markdown(text))
