"""Shared fixtures: one real PostgreSQL, one scripted upstream and one gateway
process per test session (and an upstream per module where a module counts what it
saw, a gateway on a database of its own per module whose pages list every task); each
test makes its own tasks. Page tests get one headless Chromium per test (``driver``)."""

from __future__ import annotations

from typing import AsyncIterator, Iterator

import asyncpg
import pytest

from app.db.pool import create_pool
from app.settings import Settings
from app.testing.upstream import UpstreamServer
from tests.browser import chromium
from tests.support import Admin, GatewayProcess, fresh_database


@pytest.fixture(scope="session")
def database_url() -> Iterator[str]:
    with fresh_database() as url:
        yield url


@pytest.fixture
async def pool(database_url: str) -> AsyncIterator[asyncpg.Pool]:
    """The gateway's own pool (:func:`app.db.pool.create_pool`) on the test database."""
    pool = await create_pool(database_url, Settings(database_url=database_url))
    yield pool
    await pool.close()


@pytest.fixture(scope="session")
def upstream() -> Iterator[UpstreamServer]:
    with UpstreamServer() as server:
        yield server


@pytest.fixture(scope="module")
def priced_upstream() -> Iterator[UpstreamServer]:
    """A scripted upstream of the module's own: what it records is that module's alone
    (tests that count requests upstream, with a priced model: :func:`tests.support.priced_config`)."""
    with UpstreamServer() as server:
        yield server


@pytest.fixture(autouse=True)
def _reset_upstream(request: pytest.FixtureRequest) -> None:
    """Every test starts with its upstreams on the default script, their records empty."""
    for name in ("upstream", "priced_upstream"):
        if name in request.fixturenames:
            request.getfixturevalue(name).reset()


@pytest.fixture(scope="session")
def gateway(database_url: str, upstream: UpstreamServer) -> Iterator[GatewayProcess]:
    with GatewayProcess(database_url, upstream.base_url) as gw:
        yield gw


@pytest.fixture(scope="session")
def admin(gateway: GatewayProcess) -> Admin:
    return Admin(gateway.url)


@pytest.fixture(scope="module")
def page_gateway(upstream: UpstreamServer) -> Iterator[GatewayProcess]:
    """A gateway on a database of the module's own, for the dashboard's pages: they list
    tasks and budgets by id (100 a page) and the period's top spenders and totals, which
    other modules' rows would crowd out or change."""
    with fresh_database() as url, GatewayProcess(url, upstream.base_url) as gw:
        yield gw


@pytest.fixture(scope="module")
def page_admin(page_gateway: GatewayProcess) -> Admin:
    return Admin(page_gateway.url)


@pytest.fixture
def driver() -> Iterator[object]:
    """Headless Chromium on a fresh profile for this test (:func:`tests.browser.chromium`;
    the test is skipped when Debian's chromium and chromium-driver are absent)."""
    with chromium() as browser:
        yield browser


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):  # type: ignore[no-untyped-def]
    """On failure, attach the tail of the gateway's log to the report."""
    outcome = yield
    report = outcome.get_result()
    funcargs = getattr(item, "funcargs", {})
    gw = funcargs.get("gateway", funcargs.get("page_gateway"))
    if report.failed and gw is not None:
        report.sections.append(("gateway log (tail)", gw.output()[-4000:]))
