"""``python -m app.testing.upstream``: serve the mock upstream until interrupted."""

from .server import main

main()
