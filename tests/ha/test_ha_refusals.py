"""Refusals of hostile HA peers: the reason each broken rule is counted under, and a log that a
peer reconnecting in a loop cannot flood (pure; the time is an input)."""

from __future__ import annotations

import struct

from broker.ha.actions import CloseConnection
from broker.ha.master_conn import MasterConnection
from broker.ha.refusals import REASONS, RefusalLog
from tests.ha.test_ha_connections import hs, log_state


def test_a_broken_message_after_the_handshake_is_malformed() -> None:
    m = MasterConnection()
    m.receive_data(hs(), log_state())
    (close,) = m.receive_data(struct.pack(">iq", 7, 0), log_state())
    assert isinstance(close, CloseConnection) and close.refusal == "malformed"


def test_every_reason_is_counted_from_zero() -> None:
    refusals = RefusalLog()
    assert refusals.counts == dict.fromkeys(REASONS, 0)
    refusals.record("not_a_replica", "10.0.0.9", 0)
    assert refusals.counts["not_a_replica"] == 1 and sum(refusals.counts.values()) == 1


def test_one_line_per_reason_and_host_per_window_saying_how_many_were_not_logged() -> None:
    refusals = RefusalLog(window_ms=60_000)
    assert refusals.record("no_handshake", "10.0.0.9", 0) == 0  # the first: logged
    assert [refusals.record("no_handshake", "10.0.0.9", t) for t in range(1, 500)] == [None] * 499
    # Another reason or another host is logged on its own.
    assert refusals.record("not_a_replica", "10.0.0.9", 10) == 0
    assert refusals.record("no_handshake", "10.0.0.8", 10) == 0
    # A window later: logged again, with the 499 that were not.
    assert refusals.record("no_handshake", "10.0.0.9", 60_000) == 499
    assert refusals.record("no_handshake", "10.0.0.9", 60_001) is None
    assert refusals.counts["no_handshake"] == 503  # every one counted, both hosts


def test_the_hosts_remembered_are_bounded() -> None:
    refusals = RefusalLog()
    for i in range(5000):
        assert refusals.record("no_handshake", f"10.1.{i // 256}.{i % 256}", 0) == 0
    assert len(refusals._last) <= 1024
    assert refusals.counts["no_handshake"] == 5000
