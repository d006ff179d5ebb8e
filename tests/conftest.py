"""Shared fixtures. Multi-process fixtures end every daemon they start by PID, pass or fail."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import structlog

from tests.support.procs import BrokerProc


@pytest.fixture(autouse=True)
def _fresh_structlog() -> Iterator[None]:
    """In-process CLIs (rmqctl through CliRunner) configure structlog globally; reset it so a
    later test's capture_logs sees every level."""
    yield
    structlog.reset_defaults()


@pytest.fixture
def broker_factory(tmp_path: Path) -> Iterator[type[BrokerProc]]:
    """Start brokers with ``broker_factory(tmp_path, extra=[...]).start_and_wait()``; all are
    stopped by PID at teardown."""
    started: list[BrokerProc] = []

    class Tracked(BrokerProc):
        def start(self) -> BrokerProc:  # type: ignore[override]
            started.append(self)
            super().start()
            return self

    yield Tracked
    for proc in reversed(started):
        proc.stop()


@pytest.fixture
def broker(broker_factory: type[BrokerProc], tmp_path: Path) -> BrokerProc:
    """One running lone broker (development mode) on an ephemeral port."""
    return broker_factory(tmp_path).start_and_wait()
