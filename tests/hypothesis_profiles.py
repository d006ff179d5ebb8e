"""How many examples the property tests draw: ``make test`` (profile ``suite``, loaded by
tests/conftest.py unless ``--hypothesis-profile`` names another) a quarter of what a test asks
for, ``make soak`` (``--hypothesis-profile=soak``) ten times as many, so the soak covers what
the suite leaves out. A test that sets its own count writes ``max_examples=examples(n)``; one
that does not takes the profile's (25 in the suite, 1,000 in the soak, hypothesis' 100 under
``--hypothesis-profile=default``)."""

from __future__ import annotations

from hypothesis import settings

SUITE = "suite"
SOAK = "soak"

settings.register_profile(SUITE, max_examples=25)
settings.register_profile(SOAK, max_examples=1000)


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
