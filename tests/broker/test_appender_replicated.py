"""Appender.append_replicated copies a received chunk (a view of the connection's buffer) once:
the store appends those bytes and every listener (the timer) gets the same object, instead of
each copying the view again."""

from __future__ import annotations

from pathlib import Path

from broker.appender import Appender
from broker.long_polling import PullWaiters
from broker.metrics import BrokerMetrics
from tests.storage.support import commitlog_bytes, messages, open_store


def test_a_replicated_chunk_is_copied_once_for_the_store_and_the_listeners(
    tmp_path: Path,
) -> None:
    master = open_store(tmp_path / "master")
    slave = open_store(tmp_path / "slave")
    try:
        master.put("TopicTest", 0, messages(20), 1_700_000_000_000)
        received = bytearray(commitlog_bytes(master))  # as the connection's buffer holds it
        appender = Appender(slave, PullWaiters(), BrokerMetrics("c", "broker-a"))
        seen: list[tuple[int, bytes | memoryview]] = []
        appender.replicated_listeners.append(lambda offset, data: seen.append((offset, data)))
        appender.replicated_listeners.append(lambda offset, data: seen.append((offset, data)))
        end = appender.append_replicated(0, memoryview(received).toreadonly())
        assert end == master.max_offset == slave.max_offset
        assert commitlog_bytes(slave) == received
        (_, first), (_, second) = seen
        assert type(first) is bytes and first == received
        assert second is first
    finally:
        master.close()
        slave.close()
