"""Which database failures answer 503 (unreachable) and which are bugs (500): a table."""

from __future__ import annotations

import asyncio
import socket

import asyncpg
import pytest

from app.db.errors import database_unreachable

exc = asyncpg.exceptions

UNREACHABLE = [
    ConnectionRefusedError(111, "Connection refused"),
    ConnectionResetError(104, "Connection reset by peer"),
    FileNotFoundError(2, "No such file or directory"),  # Unix socket of a stopped server
    socket.gaierror(-2, "Name or service not known"),
    TimeoutError(),
    asyncio.TimeoutError(),
    exc.ConnectionDoesNotExistError("connection was closed in the middle of operation"),
    exc.ConnectionFailureError("connection failure"),
    exc.ClientCannotConnectError("cannot connect"),
    exc.TooManyConnectionsError("sorry, too many clients already"),
    exc.CannotConnectNowError("the database system is starting up"),
    exc.AdminShutdownError("terminating connection due to administrator command"),
    exc.CrashShutdownError("terminating connection because of crash of another server process"),
    exc.QueryCanceledError("canceling statement due to statement timeout"),
    exc.OutOfMemoryError("out of memory"),
    exc.DiskFullError("could not extend file"),
    exc.IdleInTransactionSessionTimeoutError("idle-in-transaction timeout"),
    asyncpg.InterfaceError("pool is closed"),
    asyncpg.InterfaceError("pool is closing"),
    asyncpg.InterfaceError("cannot perform operation: connection is closed"),
    asyncpg.InternalClientError("cannot switch to state 12; another operation (2) is in progress"),
]

BUGS = [
    exc.UniqueViolationError("duplicate key value violates unique constraint"),
    exc.NumericValueOutOfRangeError("bigint out of range"),
    exc.DatetimeFieldOverflowError("interval out of range"),
    exc.CharacterNotInRepertoireError('invalid byte sequence for encoding "UTF8": 0x00'),
    exc.UntranslatableCharacterError("unsupported Unicode escape sequence"),
    exc.ProgramLimitExceededError("index row size 1000032 exceeds btree version 4 maximum 2704"),
    asyncpg.DataError("invalid input for query argument $1: 2**64 (value out of int64 range)"),
    exc.UndefinedColumnError('column "x" does not exist'),
    exc.PostgresSyntaxError("syntax error at or near"),
    exc.RaiseError("raised by a trigger"),
    exc.DeadlockDetectedError("deadlock detected"),
    asyncpg.InterfaceError("cannot perform operation: another operation is in progress"),
    asyncpg.InternalClientError("unexpected codec"),
    ValueError("identical_streak must be >= 1, got 0"),
    UnicodeEncodeError("utf-8", "\ud800", 0, 1, "surrogates not allowed"),
    RecursionError(),
    KeyError("x"),
]


@pytest.mark.parametrize("error", UNREACHABLE, ids=lambda e: f"{type(e).__name__}:{e}"[:60])
def test_unreachable_database_answers_503(error: BaseException) -> None:
    assert database_unreachable(error) is True


@pytest.mark.parametrize("error", BUGS, ids=lambda e: f"{type(e).__name__}:{e}"[:60])
def test_other_errors_are_bugs(error: BaseException) -> None:
    assert database_unreachable(error) is False
