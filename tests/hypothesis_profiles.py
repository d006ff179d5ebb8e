"""How many examples the property tests draw: ``make test`` (profile ``suite``, loaded by
tests/conftest.py unless ``--hypothesis-profile`` names another) a quarter of what a test asks
for, ``make soak`` (``--hypothesis-profile=soak``) ten times as many, so the soak covers what
the suite leaves out. A test that sets its own count writes ``max_examples=examples(n)``; one
that does not takes the profile's (25 in the suite, 1,000 in the soak, hypothesis' 100 under
``--hypothesis-profile=default``)."""

from __future__ import annotations

from hypothesis import HealthCheck, settings

SUITE = "suite"
SOAK = "soak"

LOADED_HOST = settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])
"""Timing is never what a property test checks: on a loaded 2-core CI host (four workers, the
cluster tests' daemons beside them) one example may take over hypothesis' 200 ms deadline and
drawing the inputs over its one-second health check (a run at load 13-17 failed
test_typed_requests' SendBatchRequest round trip so: 'Input generation is slow: only 9 valid
inputs after 1.05 seconds')."""

settings.register_profile(SUITE, LOADED_HOST, max_examples=25)
settings.register_profile(SOAK, LOADED_HOST, max_examples=1000)


def examples(count: int) -> int:
    """``count`` examples as the profile in force scales hypothesis' default: in ``suite`` a
    quarter (but not under 10, nor more than ``count``), in ``soak`` ten times as many, else
    ``count``. Read when the test module is imported (after pytest_configure loads the
    profile)."""
    profile = settings.get_current_profile_name()
    if profile == SUITE:
        return max(min(count, 10), count // 4)
    if profile == SOAK:
        return count * 10
    return count
