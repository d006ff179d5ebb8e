"""The slave's HA client against scripted masters: silence is noticed while chunks are handled
inline (no task wake-up per chunk), heartbeats keep the connection, a store error met inline ends
the session and the next one catches up, and a new epoch met mid-stream is recorded before its
bytes."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest
import structlog.testing

from daemon.tasks import cancel_and_wait
from protocol.ha import (
    EpochEntry,
    MasterHandshake,
    MasterTransfer,
    SlaveAck,
    SlaveHandshake,
    SlaveStreamDecoder,
    encode_master_handshake,
    encode_master_transfer,
    encode_slave_ack,
)
from tests.ha.test_ha_driver_support import FAST, Node, in_step
from tests.storage.support import commitlog_bytes
from tests.support.procs import dead_address
from tests.support.wait import stays_async, wait_until_async

QUICK = dataclasses.replace(FAST, connection_idle_timeout_ms=300, reconnect_min_ms=10)

Script = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


class ScriptedMaster:
    """An HA port that answers every slave handshake for an empty epoch-1 log, then runs
    ``after`` (e.g. go silent, or heartbeat)."""

    def __init__(self, after: Script) -> None:
        self.after = after
        self.sessions = 0
        self.server: asyncio.Server | None = None
        self.tasks: set[asyncio.Task[None]] = set()

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.sessions += 1
        task = asyncio.current_task()
        assert task is not None
        self.tasks.add(task)
        decoder = SlaveStreamDecoder()
        got: list[object] = []
        try:
            while not got:
                data = await reader.read(1024)
                if not data:
                    return
                got += decoder.feed(data)
            assert isinstance(got[0], SlaveHandshake)
            reply = MasterHandshake(
                master_max_offset=0,
                master_epoch=1,
                epoch_entries=(EpochEntry(epoch=1, start_offset=0),),
            )
            writer.write(encode_master_handshake(reply))
            while not any(isinstance(m, SlaveAck) for m in got):
                data = await reader.read(1024)
                if not data:
                    return
                got += decoder.feed(data)
            self.tasks.add(asyncio.ensure_future(self.drain_acks(reader)))
            await self.after(reader, writer)
        except (ConnectionError, asyncio.CancelledError):
            pass
        finally:
            writer.close()

    @staticmethod
    async def drain_acks(reader: asyncio.StreamReader) -> None:
        while await reader.read(1024):
            pass

    async def start(self) -> str:
        self.server = await asyncio.start_server(self.serve, "127.0.0.1", 0)
        port = self.server.sockets[0].getsockname()[1]
        return f"127.0.0.1:{port}"

    async def stop(self) -> None:
        if self.server is not None:
            self.server.close()
        await cancel_and_wait(self.tasks)


@pytest.fixture
async def slave(tmp_path: Path) -> AsyncIterator[Node]:
    node = await Node.start(tmp_path / "slave", 2, QUICK)
    try:
        yield node
    finally:
        await node.close()


async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    await asyncio.sleep(3600)


async def heartbeats(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    while True:
        await asyncio.sleep(0.05)
        writer.write(
            encode_master_transfer(
                MasterTransfer(offset=0, epoch=1, epoch_start_offset=0, confirm_offset=0)
            )
        )
        await writer.drain()


async def test_a_silent_master_is_left_after_the_idle_timeout(slave: Node) -> None:
    master = ScriptedMaster(silent)
    address = await master.start()
    try:
        await slave.ha.become_slave(address, 1, 2, slave.address)
        await wait_until_async(lambda: master.sessions >= 2, "a second session", 5)
        client = slave.ha.slave_client
        assert client is not None
        assert client.last_error is not None and "heard nothing" in client.last_error
    finally:
        await master.stop()


async def test_heartbeats_handled_inline_keep_the_connection(slave: Node) -> None:
    master = ScriptedMaster(heartbeats)
    address = await master.start()
    try:
        await slave.ha.become_slave(address, 1, 2, slave.address)
        client = slave.ha.slave_client
        assert client is not None
        await wait_until_async(lambda: client.bytes_received > 36 * 10, "heartbeats flowing")
        await stays_async(  # over three idle timeouts, all inline
            lambda: master.sessions == 1 and client.last_error is None,
            1.0,
            "one session and no error",
            on_failure=lambda: f"sessions {master.sessions}, last error {client.last_error!r}",
        )
    finally:
        await master.stop()


async def test_a_store_error_met_inline_reconnects_and_catches_up(tmp_path: Path) -> None:
    a = await Node.start(tmp_path / "a", 1, QUICK)
    b = await Node.start(tmp_path / "b", 2, QUICK)
    try:
        await a.master(1)
        await b.slave_of(a, 1)
        a.put(20)
        await wait_until_async(lambda: in_step(a, b), "b in step")
        client = b.ha.slave_client
        assert client is not None
        sessions = client.handshakes
        real = b.store.append_raw
        failures = []

        def failing_once(offset: int, data: bytes | memoryview) -> int:
            if not failures:
                failures.append(offset)
                raise OSError("disk hiccup")
            return real(offset, data)

        # The slave client's append seam (the store's append_raw when the broker gives none;
        # a compiled MessageStore takes no attribute set on it).
        client._append = failing_once
        a.put(20, tag=1)
        await wait_until_async(lambda: client.handshakes > sessions, "a new session")
        assert client.last_error is not None and "disk hiccup" in client.last_error
        await wait_until_async(lambda: in_step(a, b), "b in step again")
        assert commitlog_bytes(b.store) == commitlog_bytes(a.store)
    finally:
        await b.close()
        await a.close()


async def test_a_new_epoch_met_mid_stream_is_recorded_before_its_bytes(tmp_path: Path) -> None:
    small = dataclasses.replace(QUICK, max_batch_bytes=4096)
    a = await Node.start(tmp_path / "a", 1, small)
    c = await Node.start(tmp_path / "c", 3, small)
    try:
        await a.master(1)
        a.put(40)
        await a.master(2)  # a new epoch: bytes from here on belong to epoch 2
        a.put(40, tag=2)
        await a.master(3)
        a.put(40, tag=3)
        await c.slave_of(a, 3)
        await wait_until_async(lambda: in_step(a, c), "c caught up over three epochs")
        assert c.epochs.entries() == a.epochs.entries()
        assert [e.epoch for e in c.epochs.entries()] == [1, 2, 3]
        assert commitlog_bytes(c.store) == commitlog_bytes(a.store)
        a.put(10, tag=4)  # and streaming goes on inline afterwards
        await wait_until_async(lambda: in_step(a, c), "c in step")
    finally:
        await c.close()
        await a.close()


async def hang_up(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Close the stream at once, as a master that stops or steps down does."""


def ended(logs: list[dict[str, object]]) -> list[tuple[object, str]]:
    """(level, reason) of every "HA connection to the master ended" line."""
    return [
        (e["log_level"], str(e["reason"]))
        for e in logs
        if e["event"] == "HA connection to the master ended; reconnecting"
    ]


async def test_a_stream_the_master_closed_is_info_and_a_refused_reconnect_a_warning(
    slave: Node,
) -> None:
    """Stopping a group logs no warning for the master closing its stream (make run's Ctrl-C);
    a master that stays away does."""
    master = ScriptedMaster(hang_up)
    address = await master.start()
    with structlog.testing.capture_logs() as logs:
        try:
            await slave.ha.become_slave(address, 1, 2, slave.address)
            await wait_until_async(lambda: master.sessions >= 1 and ended(logs), "a hang-up", 5)
            await master.stop()
            assert master.server is not None
            await master.server.wait_closed()
            await wait_until_async(lambda: len(ended(logs)) >= 2, "a refused reconnect", 5)
        finally:
            await master.stop()
    (level, reason), *rest = ended(logs)
    assert (level, reason) == ("info", "connection closed by the master")
    assert any(lvl == "warning" and "cannot connect" in why for lvl, why in rest), rest


async def test_a_first_attempt_at_a_new_master_is_info_and_the_second_a_warning(
    slave: Node,
) -> None:
    """A master just elected refuses slaves until it has switched roles: the first failed
    attempt is retried at once and is no warning; a second one in a row is."""
    dead = dead_address()
    with structlog.testing.capture_logs() as logs:
        await slave.ha.become_slave(dead, 1, 2, slave.address)
        await wait_until_async(lambda: len(ended(logs)) >= 2, "two failed attempts", 5)
    assert [level for level, _ in ended(logs)[:2]] == ["info", "warning"]


class CountingMaster(ScriptedMaster):
    """Counts the bytes of the acks the slave sends after its first one."""

    def __init__(self, after: Script) -> None:
        super().__init__(after)
        self.ack_bytes = 0

    async def drain_acks(self, reader: asyncio.StreamReader) -> None:  # type: ignore[override]
        while data := await reader.read(1024):
            self.ack_bytes += len(data)


def empty_transfers(count: int, gap_s: float) -> Script:
    """``count`` transfers with no body (confirm pushes), each in its own write ``gap_s`` apart,
    then silence."""

    async def script(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        for _ in range(count):
            writer.write(
                encode_master_transfer(
                    MasterTransfer(offset=0, epoch=1, epoch_start_offset=0, confirm_offset=0)
                )
            )
            await writer.drain()
            await asyncio.sleep(gap_s)
        await asyncio.sleep(3600)

    return script


async def test_confirm_pushes_in_a_burst_are_not_acked_again(tmp_path: Path) -> None:
    # A heartbeat interval of 60 s: every repeat within 30 s of the last ack is left out.
    cfg = dataclasses.replace(QUICK, heartbeat_interval_ms=60_000, connection_idle_timeout_ms=5_000)
    node = await Node.start(tmp_path / "slave", 2, cfg)
    master = CountingMaster(empty_transfers(40, 0.002))
    address = await master.start()
    try:
        await node.ha.become_slave(address, 1, 2, node.address)
        client = node.ha.slave_client
        assert client is not None
        size = len(
            encode_master_transfer(
                MasterTransfer(offset=0, epoch=1, epoch_start_offset=0, confirm_offset=0)
            )
        )
        await wait_until_async(lambda: client.bytes_received >= 40 * size, "40 pushes received")
        assert master.sessions == 1
        # Each push repeats what the handshake's ack said: nothing more was written (an ack
        # per push before).
        assert master.ack_bytes == 0
    finally:
        await master.stop()
        await node.close()


async def test_an_idle_slave_still_acks_a_heartbeat_after_half_an_interval(
    slave: Node,
) -> None:
    # QUICK: 50 ms heartbeats, so a repeat is written again 25 ms after the last ack.
    master = CountingMaster(empty_transfers(5, 0.1))
    address = await master.start()
    try:
        await slave.ha.become_slave(address, 1, 2, slave.address)
        one = len(encode_slave_ack(SlaveAck(max_offset=0)))
        await wait_until_async(
            lambda: master.ack_bytes >= 4 * one, "the heartbeats after the first acked", 10
        )
    finally:
        await master.stop()
