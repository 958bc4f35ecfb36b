"""Alembic migrations for taskgate (installed with the package so `taskgate migrate` finds them)."""
