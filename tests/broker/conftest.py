"""Fixtures of the broker tests that share one broker across a module (a module-scoped
``broker``): each test's own topic and consumer group on it, so neither the order of the tests
nor another test's messages or members matter."""

from __future__ import annotations

import pytest


@pytest.fixture
def topic(request: pytest.FixtureRequest) -> str:
    """The test's own topic: its name without ``test_``."""
    name: str = request.node.name
    return name.removeprefix("test_")


@pytest.fixture
def group(topic: str) -> str:
    """The test's own consumer group: ``G-<its topic>``."""
    return f"G-{topic}"
