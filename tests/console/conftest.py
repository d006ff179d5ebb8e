"""The browser of the console's browser test modules: one headless Chromium per module, on
the module's ``env`` (a :class:`tests.console.browser.ConsoleEnv`)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.console.browser import ConsoleEnv, chromium


@pytest.fixture(scope="module")
def browser(env: ConsoleEnv) -> Iterator[Any]:
    yield from chromium(env.shots)
