"""Shared fixtures. Multi-process fixtures end every daemon they start by PID, pass or fail."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import structlog

import remoting.client as client_mod
from tests.support.procs import BrokerProc


@pytest.fixture(autouse=True)
def _fresh_structlog() -> Iterator[None]:
    """In-process CLIs (rmqctl through CliRunner) configure structlog globally; reset it so a
    later test's capture_logs sees every level."""
    yield
    structlog.reset_defaults()


@pytest.fixture(autouse=True)
def _fresh_process_client_settings() -> Iterator[None]:
    """In-process CLIs (rmqctl through CliRunner, the pipeline's options) set the remoting
    client's process-wide settings: the credentials and TLS context every new connection takes,
    and the TLS advice an error gives (rmqctl's flags instead of the SDK's ``tls`` argument).
    Put them back after each test so a later test sees the SDK's defaults."""
    saved = (client_mod._process_credentials, client_mod._process_tls, client_mod._tls_advice)
    yield
    client_mod._process_credentials, client_mod._process_tls, client_mod._tls_advice = saved


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
