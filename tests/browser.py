"""Headless Chromium for page tests: Debian's ``chromium`` and ``chromium-driver``
(installed by ``.ci/run``), driven by selenium with the system chromedriver (selenium's
own driver download is never used: no network here). The ``driver`` fixture
(``tests/conftest.py``) is one :func:`chromium` per test, and ``page_gateway`` the
gateway the pages are read from; the helpers below read a page as the tests do."""

from __future__ import annotations

import re
import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterator, TypeVar
from urllib.parse import urlsplit

import pytest

if TYPE_CHECKING:
    from selenium.webdriver.remote.webdriver import WebDriver
    from selenium.webdriver.remote.webelement import WebElement

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-dev-shm-usage", "--window-size=1360,1000")
WAIT_S = 15
NULLISH = re.compile(r"\b(null|undefined|NaN)\b")  # never on a page: a value the page failed to render
T = TypeVar("T")


@contextmanager
def chromium() -> Iterator["object"]:
    """A selenium ``webdriver.Chrome`` on a fresh profile; skips when Chromium is absent."""
    if not (Path(CHROMIUM).exists() and Path(CHROMEDRIVER).exists()):
        pytest.skip("Debian chromium and chromium-driver are not installed (.ci/run installs them)")
    from selenium import webdriver

    profile = tempfile.mkdtemp(prefix="taskgate-chromium-")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in (*FLAGS, f"--user-data-dir={profile}"):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})  # console_errors() reads them
    driver = webdriver.Chrome(options=options, service=webdriver.ChromeService(executable_path=CHROMEDRIVER))
    try:
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)


def console_errors(driver: "object") -> list[str]:
    """The page's console messages at level SEVERE since the last call: uncaught
    exceptions and failed loads (a 404 favicon, a missing script) alike."""
    return [e["message"] for e in driver.get_log("browser") if e["level"] == "SEVERE"]  # type: ignore[attr-defined]


def wait(driver: WebDriver, predicate: Callable[[WebDriver], T], what: str) -> T:
    """``predicate(driver)``'s first truthy value within :data:`WAIT_S` seconds (polled
    every 50 ms), else a ``TimeoutException`` naming ``what``."""
    from selenium.common.exceptions import StaleElementReferenceException
    from selenium.webdriver.support.ui import WebDriverWait

    # the page re-renders every few seconds: an element read mid-render is read again
    return WebDriverWait(driver, WAIT_S, poll_frequency=0.05,
                         ignored_exceptions=(StaleElementReferenceException,)).until(predicate, message=what)


def css(driver: WebDriver, selector: str) -> WebElement:
    """The first element matching the CSS ``selector`` (``NoSuchElementException`` if none)."""
    from selenium.webdriver.common.by import By

    return driver.find_element(By.CSS_SELECTOR, selector)


def css_all(driver: WebDriver, selector: str) -> list[WebElement]:
    """Every element matching the CSS ``selector``, in document order (empty if none)."""
    from selenium.webdriver.common.by import By

    return driver.find_elements(By.CSS_SELECTOR, selector)


def only_local_resources(driver: WebDriver, base_url: str) -> None:
    """Asserts that the page loaded resources, every one of them from ``base_url``'s host."""
    urls = driver.execute_script("return performance.getEntriesByType('resource').map(e => e.name)")
    assert urls, "the page loaded no resources at all?"
    assert {urlsplit(u).netloc for u in urls} == {urlsplit(base_url).netloc}, urls


def login(driver: WebDriver, url: str, token: str) -> None:
    """Opens the dashboard's task list at ``url`` and submits ``token`` in its login form."""
    driver.get(url + "/ui/#/tasks")
    field = wait(driver, lambda d: css(d, "#login #token"), "the login form")
    field.send_keys(token)
    css(driver, "#login button").click()
