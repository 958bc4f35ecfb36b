"""``python -m app.cli``: the ``taskgate`` command."""

from app.cli import main

if __name__ == "__main__":  # not when a spawned helper process imports it (app/proxy/json_offload.py)
    main()
