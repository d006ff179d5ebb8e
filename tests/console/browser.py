"""A real headless browser for the console's tests: Debian's ``chromium`` driven through
``chromium-driver`` by Selenium. Where they are not installed the tests skip saying so; under
CI=true they fail instead (.ci/run installs them)."""

from __future__ import annotations

import os
import shutil
import sys
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.support.procs import Daemon, free_port

CHROMIUM = ("chromium", "chromium-browser")
DRIVER = "chromedriver"


def require_chromium() -> tuple[str, str]:
    """(browser, driver) paths; skips, or fails under CI=true, when either is missing."""
    browser = next((p for p in map(shutil.which, CHROMIUM) if p), None)
    driver = shutil.which(DRIVER)
    if browser is None or driver is None:
        missing = " and ".join(
            name
            for name, found in (("chromium", browser), ("chromium-driver", driver))
            if not found
        )
        why = (
            f"the browser tests need Debian's {missing} (apt-get install chromium chromium-driver)"
        )
        if os.environ.get("CI") == "true":
            pytest.fail(f"{why}; .ci/run installs them", pytrace=False)
        pytest.skip(why)
    return browser, driver


def chromium(shots: Path) -> Iterator[object]:
    """A headless Chromium (a Selenium WebDriver), quit after; ``shots`` is where screenshots
    go."""
    browser, driver_path = require_chromium()
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = browser
    for arg in (
        "--headless=new",
        "--no-sandbox",  # CI runs as root in a container
        "--disable-dev-shm-usage",
        "--disable-gpu",
        "--window-size=1400,1000",
        f"--user-data-dir={shots / 'chromium-profile'}",
    ):
        options.add_argument(arg)
    service = Service(driver_path, log_output=str(shots / "chromedriver.log"))
    driver = webdriver.Chrome(options=options, service=service)
    driver.set_page_load_timeout(60)
    try:
        yield driver
    finally:
        driver.quit()


@dataclass
class ConsoleEnv:
    """A module's cluster, its rmq-console process, the console's URL and where screenshots
    go (the ``env`` fixture of a browser test module; tests/console/conftest.py's ``browser``
    takes its ``shots``)."""

    cluster: Any
    console: Daemon
    url: str
    shots: Path


def console_process(tmp: Path, *args: str) -> tuple[Daemon, int]:
    """rmq-console with ``args`` on a free port, logging JSON to ``tmp/console.log`` (not
    started); the port."""
    port = free_port()
    argv = [
        sys.executable, "-m", "console", *args,
        "--listen", f"127.0.0.1:{port}", "--log-format", "json",
    ]  # fmt: skip
    return Daemon("console", argv, tmp / "console.log"), port


def text_of(browser: Any, css: str) -> str:
    """The text of the first element ``css`` selects ("" when there is none, or it was just
    replaced by the page's own update)."""
    from selenium.common.exceptions import NoSuchElementException, StaleElementReferenceException

    try:
        return str(browser.find_element("css selector", css).text)
    except (NoSuchElementException, StaleElementReferenceException):
        return ""


def fetch(url: str) -> tuple[int, str]:
    """The status and the page at ``url`` (an error status too)."""
    try:
        with urllib.request.urlopen(url, timeout=30) as answer:
            return int(answer.status), str(answer.read().decode())
    except urllib.error.HTTPError as exc:
        return exc.code, str(exc.read().decode())


def post_form(url: str, fields: dict[str, str], cookie: str = "") -> tuple[int, str]:
    """A POST of ``fields`` to ``url`` as a script would send it (no browser; ``cookie`` its
    Cookie header): the status and the page."""
    req = urllib.request.Request(
        url,
        data=urllib.parse.urlencode(fields).encode(),
        headers={"Cookie": cookie} if cookie else {},
        method="POST",
    )
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()
