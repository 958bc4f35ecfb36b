"""Headless Chromium for page tests: Debian's ``chromium`` and ``chromium-driver``
(installed by ``.ci/run``), driven by selenium with the system chromedriver (selenium's
own driver download is never used: no network here)."""

from __future__ import annotations

import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import pytest

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-dev-shm-usage", "--window-size=1360,1000")


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
