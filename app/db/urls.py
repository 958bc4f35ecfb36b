"""Database URLs as operators write them, in the form taskgate uses.

``postgresql://``, ``postgres://`` (libpq, Heroku, most hosting dashboards) and
``postgresql+asyncpg://`` (SQLAlchemy) all mean the same database; taskgate keeps the
SQLAlchemy asyncpg form internally. Pure functions.

Several hosts (a highly available PostgreSQL: docs/scaling.md, "High availability") are
written as libpq writes them, ``postgresql://user@host1:5432,host2:5432/db?target_session_attrs=read-write``
(what ``pg_autoctl show uri --formation default`` prints), or as SQLAlchemy does,
``postgresql+asyncpg://user@/db?host=host1:5432&host=host2:5432&target_session_attrs=read-write``.
:func:`normalize_database_url` turns the first into the second (SQLAlchemy parses only
that one: alembic, the tests) and :func:`asyncpg_dsn` turns either into the first
(asyncpg reads only the last ``host`` of a query string). Each new connection then tries
the hosts in order and keeps the first that accepts writes.
"""

from __future__ import annotations

from urllib.parse import parse_qsl, quote, unquote, urlencode, urlsplit

ACCEPTED_SCHEMES = ("postgresql", "postgres", "postgresql+asyncpg", "postgres+asyncpg")


def _split_netloc(netloc: str) -> tuple[str, str]:
    """``user:password@hosts`` → (``user:password@`` or ``""``, ``hosts``)."""
    userinfo, at, hosts = netloc.rpartition("@")
    return (userinfo + at, hosts) if at else ("", netloc)


def normalize_database_url(url: str) -> str:
    """``url`` with the scheme ``postgresql+asyncpg``; a comma-separated host list moves
    into ``host=`` query parameters, in order (``host:port`` each). Raises ``ValueError``
    (one line, without the password) for anything that is not a PostgreSQL URL."""
    scheme, sep, rest = url.strip().partition("://")
    if not sep or scheme.lower() not in ACCEPTED_SCHEMES:
        shown = f"{scheme}://" if sep else "a value without a scheme"
        raise ValueError(f"expects a postgresql:// or postgres:// URL "
                         f"(e.g. postgresql://user:password@host:5432/taskgate), got {shown}")
    if not rest:
        raise ValueError("expects a postgresql:// URL with a host or socket and a database name")
    netloc, slash, tail = rest.partition("/")
    userinfo, hosts = _split_netloc(netloc)
    if "," in hosts:
        path, question, query = tail.partition("?")
        listed = [("host", h.strip()) for h in hosts.split(",") if h.strip()]
        if any(not h for _, h in listed) or len(listed) < 2:
            raise ValueError("expects host:port,host:port in a multi-host postgresql:// URL")
        params = listed + parse_qsl(query, keep_blank_values=True)
        rest = f"{userinfo}/{path}?{urlencode(params, safe=':/')}"
    return f"postgresql+asyncpg://{rest}"


def asyncpg_dsn(database_url: str) -> str:
    """``postgresql+asyncpg://...`` (SQLAlchemy form) → ``postgresql://...`` (libpq form,
    what asyncpg parses); two or more ``host=`` query parameters become the URL's host
    list (``user@h1:p1,h2:p2/db``). Anything else is returned with only the scheme
    changed; a non-PostgreSQL URL unchanged."""
    scheme, sep, rest = database_url.partition("://")
    if not (sep and scheme.startswith("postgres")):
        return database_url
    netloc, slash, tail = rest.partition("/")
    path, question, query = tail.partition("?")
    params = parse_qsl(query, keep_blank_values=True)
    listed = [v for k, v in params if k == "host"]
    if len(listed) >= 2:
        userinfo, _ = _split_netloc(netloc)
        others = [(k, v) for k, v in params if k != "host"]
        hosts = ",".join(quote(h, safe=":[]") for h in listed)
        rest = f"{userinfo}{hosts}/{path}" + (f"?{urlencode(others)}" if others else "")
    return f"postgresql://{rest}"


def hosts(url: str) -> list[str]:
    """The ``host[:port]`` entries of a URL in either form, in order (``["localhost"]``
    when it names none)."""
    _, _, rest = url.partition("://")
    netloc, _, tail = rest.partition("/")
    _, listed = _split_netloc(netloc)
    from_query = [unquote(v) for k, v in parse_qsl(tail.partition("?")[2]) if k == "host"]
    found = [h for h in listed.split(",") if h] + from_query
    return found or ["localhost"]


def describe(url: str) -> str:
    """``host:port/database`` of a URL, for messages (never the user or password);
    ``host1:port1,host2:port2/database`` for several hosts."""
    try:
        parts = urlsplit(asyncpg_dsn(url))
        database = parts.path.lstrip("/") or "(default database)"
        where = hosts(asyncpg_dsn(url))
        if len(where) == 1 and "," not in parts.netloc:
            host = parts.hostname or where[0]
            port = f":{parts.port}" if parts.port else ""
            return f"{host}{port}/{database}"
    except ValueError:
        return "(unparsable URL)"
    return f"{','.join(where)}/{database}"
