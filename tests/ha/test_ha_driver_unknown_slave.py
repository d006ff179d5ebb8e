"""A slave the master does not know yet (it registered with the controllers after the master's
last poll) is held, not refused: the master asks for the controllers' fresh list and decides on
it. HAService over real sockets (127.0.0.1, port 0); the refresher stands in for the
ReplicasManager's poll."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

import pytest

from broker.ha import master_server
from protocol.ha import (
    MasterHandshake,
    MasterStreamDecoder,
    MasterTransfer,
    SlaveAck,
    SlaveHandshake,
    encode_slave_ack,
    encode_slave_handshake,
)
from tests.ha.test_ha_driver_support import Node
from tests.support.wait import wait_until_async

SLAVE = 2
SLAVE_ADDRESS = "127.0.0.1:10902"


async def handshake_then_read(
    master: Node, *, ack_too: bool
) -> tuple[list[MasterHandshake | MasterTransfer], bool]:
    """Connect as broker 2 and send its handshake (and an ack from 0 in the same write): what
    the master sent until it sent its whole log or closed the connection (at most 3 s), and
    whether it closed it."""
    host, port = master.ha.address.rsplit(":", 1)
    reader, writer = await asyncio.open_connection(host, int(port))
    out = encode_slave_handshake(SlaveHandshake(broker_id=SLAVE, address=SLAVE_ADDRESS))
    if ack_too:
        out += encode_slave_ack(SlaveAck(max_offset=0))
    writer.write(out)
    got: list[MasterHandshake | MasterTransfer] = []
    decoder = MasterStreamDecoder()
    try:
        async with asyncio.timeout(3):
            while data := await reader.read(1 << 16):
                got.extend(decoder.feed(data))
                sent = sum(len(m.body) for m in got if isinstance(m, MasterTransfer))
                if sent and sent >= master.store.max_offset:
                    return got, False
        return got, True
    except ConnectionResetError:
        return got, True
    except TimeoutError:
        return got, False
    finally:
        writer.close()


async def master_knowing_only_itself(tmp_path: Path) -> Node:
    a = await Node.start(tmp_path / "a", 1)
    await a.master(1)
    a.ha.set_registered_replicas({1: a.address})
    a.put(5)
    return a


async def test_a_slave_registered_since_the_last_poll_is_admitted_with_what_it_sent(
    tmp_path: Path,
) -> None:
    a = await master_knowing_only_itself(tmp_path)
    asked: list[int] = []

    def refresh(done: Callable[[], None]) -> None:
        asked.append(1)

        def answer() -> None:  # the controllers' answer, a moment later, lists the slave
            a.ha.set_registered_replicas({1: a.address, SLAVE: SLAVE_ADDRESS})
            done()

        asyncio.get_running_loop().call_later(0.05, answer)

    a.ha.set_replicas_refresher(refresh)
    try:
        got, _ = await handshake_then_read(a, ack_too=True)
        assert asked == [1]
        # The handshake reply, then the log from 0: the ack sent while it was held counted.
        assert isinstance(got[0], MasterHandshake)
        sent = sum(len(m.body) for m in got[1:] if isinstance(m, MasterTransfer))
        assert sent == a.store.max_offset > 0
        assert sum(a.ha.refused_counts().values()) == 0
    finally:
        await a.close()


async def test_a_slave_the_fresh_list_does_not_name_is_refused_once_and_counted(
    tmp_path: Path,
) -> None:
    a = await master_knowing_only_itself(tmp_path)
    asked: list[int] = []

    def refresh(done: Callable[[], None]) -> None:
        asked.append(1)
        asyncio.get_running_loop().call_soon(done)  # the same list again

    a.ha.set_replicas_refresher(refresh)
    try:
        got, closed = await handshake_then_read(a, ack_too=True)
        assert closed and not got
        assert asked == [1]
        assert a.ha.refused_counts()["not_a_replica"] == 1
    finally:
        await a.close()


async def test_without_an_answer_the_hold_ends_at_its_bound(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(master_server, "_REFRESH_BOUND_S", 0.2)
    a = await master_knowing_only_itself(tmp_path)
    a.ha.set_replicas_refresher(lambda done: None)  # controllers unreachable: never answered
    try:
        got, closed = await handshake_then_read(a, ack_too=False)
        assert closed and not got
        assert a.ha.refused_counts()["not_a_replica"] == 1
    finally:
        await a.close()


async def test_a_held_peer_that_floods_is_closed_as_malformed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(master_server, "_REFRESH_BOUND_S", 5.0)
    a = await master_knowing_only_itself(tmp_path)
    a.ha.set_replicas_refresher(lambda done: None)
    host, port = a.ha.address.rsplit(":", 1)
    _reader, writer = await asyncio.open_connection(host, int(port))
    try:
        writer.write(encode_slave_handshake(SlaveHandshake(broker_id=SLAVE, address=SLAVE_ADDRESS)))
        await writer.drain()
        with pytest.raises((ConnectionResetError, BrokenPipeError)):
            for _ in range(64):
                writer.write(encode_slave_ack(SlaveAck(max_offset=0)) * 1024)
                await writer.drain()
                await asyncio.sleep(0.01)
        await wait_until_async(
            lambda: a.ha.refused_counts()["malformed"] == 1, "the flood refused", 5, interval=0.02
        )
    finally:
        writer.close()
        await a.close()
