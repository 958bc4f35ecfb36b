"""Which database failures mean "PostgreSQL cannot be reached" (503) and which are bugs (500).

The gateway fails closed with 503 ``gateway_unavailable`` only while the database is
actually out of reach: the connection is refused, reset or times out, the server is
starting up, shutting down or out of connections, no host of a multi-host URL accepts
writes (a failover in progress), the server turned read-only (``25006``: a demoted
primary), or the pool is closed. Any other
database error (a constraint, a value out of a column's range, a syntax error) means
taskgate sent something it should not have: a bug, answered 500 with a request id.
"""

from __future__ import annotations

import asyncpg

#: SQLSTATE classes that mean the server cannot serve us now: 08 connection exception,
#: 53 insufficient resources (too many connections, out of memory, disk full),
#: 58 system error (I/O error).
UNREACHABLE_SQLSTATE_CLASSES = frozenset({"08", "53", "58"})
#: Single SQLSTATEs of the same kind: 57P01 admin shutdown, 57P02 crash shutdown,
#: 57P03 cannot connect now (starting up / in recovery), 57P05 idle session timeout,
#: 57014 query canceled (statement timeout), 25P03 idle-in-transaction timeout,
#: 25006 read-only transaction (a write reached a standby, or a primary being demoted).
UNREACHABLE_SQLSTATES = frozenset({"57P01", "57P02", "57P03", "57P05", "57014", "25P03", "25006"})
#: Of those, the ones that say this server is gone or no longer the primary.
_GONE_SQLSTATES = frozenset({"57P01", "57P02", "57P03", "25006"})
#: asyncpg ``InterfaceError`` messages raised when a connection or pool is gone.
#: ("released back to the pool": asyncpg took back a checked-out connection the server
#: closed, a failover, and refuses further calls on it.)
_GONE_MARKERS = ("connection is closed", "pool is closed", "pool is closing",
                 "connection was closed", "pool is not initialized", "released back to the pool")


def database_unreachable(exc: BaseException) -> bool:
    """``True`` when ``exc`` (raised by a database call) means the database cannot be
    reached or cannot serve now; ``False`` when it is an error in what was asked of it.

    Unreachable: ``OSError`` (refused, reset, no such host or socket), ``TimeoutError``
    (``asyncio.TimeoutError`` included: connect and command timeouts), PostgreSQL errors
    in :data:`UNREACHABLE_SQLSTATE_CLASSES` or :data:`UNREACHABLE_SQLSTATES`, and
    asyncpg's "connection/pool is closed" interface errors. Pure; never raises.
    """
    if isinstance(exc, (OSError, TimeoutError)):
        return True
    if isinstance(exc, asyncpg.PostgresError):
        state = getattr(exc, "sqlstate", None) or ""
        return state[:2] in UNREACHABLE_SQLSTATE_CLASSES or state in UNREACHABLE_SQLSTATES
    if isinstance(exc, asyncpg.TargetServerAttributeNotMatched):
        return True  # no host of a multi-host URL takes writes now: a failover in progress
    if isinstance(exc, asyncpg.InternalClientError):
        # asyncpg's protocol state on a connection the server dropped mid-query
        # ("cannot switch to state 12; another operation is in progress"): seen when
        # PostgreSQL is killed under load; the connection is unusable, not our query.
        return "cannot switch to state" in str(exc)
    if isinstance(exc, asyncpg.InterfaceError):
        message = str(exc).lower()
        return any(marker in message for marker in _GONE_MARKERS)
    return False


def rolled_back(exc: BaseException) -> bool:
    """``True`` when ``exc`` is PostgreSQL's class 40 (transaction rollback: a deadlock
    victim ``40P01``, a serialization failure ``40001``): the statement or transaction
    was rolled back whole, nothing of it committed, so sending it again is safe (a
    settlement round that loses a deadlock to a multi-row insert taking task locks in
    another order). Not an unreachable database (no 503). Pure; never raises."""
    return isinstance(exc, asyncpg.PostgresError) and (getattr(exc, "sqlstate", None) or "")[:2] == "40"


def write_again(exc: BaseException) -> bool:
    """``True`` when a write that raised ``exc`` is to be sent again later rather than
    given up: the database could not be reached (:func:`database_unreachable`) or rolled
    the write back whole (:func:`rolled_back`). The backlog's rule. Pure; never raises."""
    return database_unreachable(exc) or rolled_back(exc)


def server_gone(exc: BaseException) -> bool:
    """``True`` when ``exc`` says the server a connection reached is gone or no longer
    takes writes (refused or reset, shut down, crashed, starting up, read-only, the
    connection closed under a query): the pool's other connections to it are useless
    too. Not for timeouts (an overloaded server is still there). Pure; never raises."""
    if isinstance(exc, TimeoutError):
        return False
    if isinstance(exc, (OSError, asyncpg.ConnectionDoesNotExistError, asyncpg.TargetServerAttributeNotMatched)):
        return True
    if isinstance(exc, asyncpg.PostgresError):
        state = getattr(exc, "sqlstate", None) or ""
        return state[:2] == "08" or state in _GONE_SQLSTATES
    return database_unreachable(exc) and isinstance(exc, asyncpg.InterfaceError)
