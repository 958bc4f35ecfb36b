"""``python -m app.cli``: the ``taskgate`` command."""

from app.cli import main

main()
