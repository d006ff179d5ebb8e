"""Shared fixtures. Multi-process fixtures end every daemon they start by PID, pass or fail.

The suite runs on parallel workers (pytest-xdist, ``--dist loadgroup``: pyproject's addopts).
Tests that must not be split across workers share an ``xdist_group``: a module's own mark (the
fixed ports of ``make run``: tests/cluster/test_local_cluster.py), or one given here at
collection: every test of the Spark session on one worker (its JVM starts once), and the tests of
a module with a module-scoped fixture on one worker (the fixture, often a cluster, starts once).
The groups reach xdist's scheduler through tests/support/xdist_groups.py (pytest 9.2 lost
loadgroup's own way).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import structlog
from hypothesis import settings

import remoting.client as client_mod
from tests.hypothesis_profiles import SUITE
from tests.support.bytecode import cache_bytecode
from tests.support.cpu_cost import CpuCost
from tests.support.procs import BrokerProc

SPARK_GROUP = "spark"
"""The xdist group of every test that uses the session's ``spark`` (tests/pipeline/conftest.py)."""


def pytest_configure(config: pytest.Config) -> None:
    cache_bytecode(config.rootpath)
    config.pluginmanager.register(CpuCost(), "rmq-cpu-cost")
    if not config.getoption("--hypothesis-profile", None):
        settings.load_profile(SUITE)  # tests/hypothesis_profiles.py
    if config.pluginmanager.hasplugin("xdist") and config.getoption("numprocesses", None):
        from tests.support.xdist_groups import XdistGroups

        config.pluginmanager.register(XdistGroups(), "rmq-xdist-groups")


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook reads the groups
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Give each test that shares an expensive fixture with others an xdist group (module doc):
    ``spark`` for the session's SparkSession, else its module's path for a module-scoped
    fixture. A test that has a group of its own keeps it."""
    for item in items:
        if item.get_closest_marker("xdist_group") is not None:
            continue
        info = getattr(item, "_fixtureinfo", None)
        if info is None:
            continue
        if "spark" in info.names_closure:
            item.add_marker(pytest.mark.xdist_group(SPARK_GROUP))
            continue
        scopes = {defs[-1].scope for defs in info.name2fixturedefs.values() if defs}
        if scopes & {"module", "package"}:
            item.add_marker(pytest.mark.xdist_group(item.nodeid.split("::", 1)[0]))
    if hasattr(config, "workerinput"):
        from tests.support.xdist_groups import write_groups

        write_groups(config, items)


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
