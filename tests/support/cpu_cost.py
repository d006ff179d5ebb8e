"""What each test costs in CPU, to see where a CPU-bound suite's time goes.

On 2 cores with 4 workers the suite keeps both cores busy, so its wall time follows the CPU
seconds its tests burn, not their wall seconds. Each test's CPU is read around its run from
``getrusage``: the worker's own (``RUSAGE_SELF``) plus its ended children's (``RUSAGE_CHILDREN``:
every daemon, CLI or browser the test started and waited for, with their own waited-for
children). It goes into the test's report as the user property ``cpu_s`` (and so into
``var/test-report.xml``), and the session ends with the 25 tests that cost the most.

A daemon that a module- or session-scoped fixture starts is counted in the test after which the
fixture ends it; a process no one waits for is not counted (Spark's JVM: pyspark lets it exit on
its own), and one reaped late (by ``subprocess``' clean-up at a later start) is counted where
it is reaped.
"""

from __future__ import annotations

import resource
from collections.abc import Generator

import pytest

PROPERTY = "cpu_s"
SHOWN = 25


def cpu_seconds() -> float:
    """User + system CPU of this process and of its ended (waited-for) children."""
    total = 0.0
    for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN):
        usage = resource.getrusage(who)
        total += usage.ru_utime + usage.ru_stime
    return total


class CpuCost:
    """Measures on the process that runs the tests; the process that reports (xdist's
    controller, or the only one) prints the costliest."""

    def __init__(self) -> None:
        self.costs: dict[str, float] = {}
        self._started: dict[str, float] = {}

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_setup(self, item: pytest.Item) -> None:
        self._started[item.nodeid] = cpu_seconds()

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(
        self, item: pytest.Item, call: pytest.CallInfo[None]
    ) -> Generator[None, pytest.TestReport, pytest.TestReport]:
        report = yield
        start = self._started.pop(item.nodeid, None) if call.when == "teardown" else None
        if start is not None:
            report.user_properties.append((PROPERTY, f"{cpu_seconds() - start:.2f}"))
        return report

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        for name, value in report.user_properties:
            if name == PROPERTY:
                self.costs[report.nodeid] = self.costs.get(report.nodeid, 0.0) + float(str(value))

    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter) -> None:
        if not self.costs:
            return
        total = sum(self.costs.values())
        terminalreporter.write_sep("=", f"{SHOWN} costliest tests in CPU (total {total:.0f} s)")
        for nodeid, cost in sorted(self.costs.items(), key=lambda kv: -kv[1])[:SHOWN]:
            terminalreporter.write_line(f"{cost:7.2f}s cpu  {nodeid}")
