"""Hostile and unlucky peers for whole-cluster tests: a fake slave on a master's HA port, and a
TCP proxy in front of a controller that can lose the answer to one AlterSyncStateSet.

Both speak the real wire formats (protocol.ha, protocol.remoting) over real sockets.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import time
from collections.abc import Callable

import msgpack

from protocol.codes import RequestCode, ResponseCode
from protocol.ha import (
    MasterHandshake,
    MasterStreamDecoder,
    MasterTransfer,
    SlaveAck,
    SlaveHandshake,
    encode_slave_ack,
    encode_slave_handshake,
)
from protocol.remoting import KIND_RESPONSE, Frame, FrameDecoder, encode_frame


class FakeSlave:
    """Connects to a master's HA port claiming ``broker_id`` at ``address``, and acknowledges
    everything: at once the master's max offset (bytes it never received), then the end of
    every transfer. It stores nothing."""

    def __init__(self, ha_host: str, ha_port: int, broker_id: int, address: str) -> None:
        self.ha_host = ha_host
        self.ha_port = ha_port
        self.broker_id = broker_id
        self.address = address
        self.handshaken = asyncio.Event()
        self.closed = asyncio.Event()
        self.acks = 0
        self._task: asyncio.Task[None] | None = None
        self._writer: asyncio.StreamWriter | None = None

    def start(self) -> FakeSlave:
        self._task = asyncio.get_running_loop().create_task(self._run())
        return self

    async def stop(self) -> None:
        if self._writer is not None:
            self._writer.close()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task

    async def _run(self) -> None:
        try:
            reader, writer = await asyncio.open_connection(self.ha_host, self.ha_port)
            self._writer = writer
            writer.write(
                encode_slave_handshake(
                    SlaveHandshake(broker_id=self.broker_id, address=self.address)
                )
            )
            decoder = MasterStreamDecoder()
            while data := await reader.read(1 << 16):
                for msg in decoder.feed(data):
                    if isinstance(msg, MasterHandshake):
                        self.handshaken.set()
                        self._ack(writer, msg.master_max_offset)
                    elif isinstance(msg, MasterTransfer):
                        self._ack(writer, msg.offset + len(msg.body))
                await writer.drain()
        except (OSError, ValueError):
            pass
        finally:
            self.closed.set()

    def _ack(self, writer: asyncio.StreamWriter, offset: int) -> None:
        writer.write(encode_slave_ack(SlaveAck(max_offset=offset)))
        self.acks += 1


async def probe_ha_port(
    host: str, port: int, first: bytes, then: Callable[[MasterHandshake], bytes] | None = None
) -> tuple[list[MasterHandshake | MasterTransfer], bool]:
    """Write ``first`` to a master's HA port; once its handshake reply comes, write
    ``then(reply)``. Reads until the master closes the connection or 10 s pass: what it sent,
    and whether it closed."""
    reader, writer = await asyncio.open_connection(host, port)
    got: list[MasterHandshake | MasterTransfer] = []
    decoder = MasterStreamDecoder()
    try:
        writer.write(first)
        async with asyncio.timeout(10):
            while data := await reader.read(1 << 16):
                for msg in decoder.feed(data):
                    got.append(msg)
                    if isinstance(msg, MasterHandshake) and then is not None:
                        writer.write(then(msg))
        return got, True
    except ConnectionResetError:
        return got, True
    except TimeoutError:
        return got, False
    finally:
        writer.close()


class ControllerProxies:
    """One TCP proxy per controller, forwarding remoting frames both ways. Redirects name the
    proxies (``leaderAddress`` rewritten), so a broker given the proxies' addresses reaches the
    controllers only through them.

    :meth:`lose_next_expansion_answer` arms them: the next AlterSyncStateSet that grows the set
    is forwarded, and when the controller answers SUCCESS (it committed), the answer is dropped,
    ``on_lost(controller_address)`` runs (e.g. kill that controller) and the broker's
    connection is closed. From then on, while :attr:`drop_polls` is set, the answers to
    GET_REPLICA_INFO are dropped too: the broker cannot learn the committed set by polling and
    must get it right from the answers to its own proposals.
    """

    def __init__(self, controller_addresses: list[str], host: str = "127.0.0.1") -> None:
        self.targets = controller_addresses
        self.host = host
        self.addresses: list[str] = []
        self._to_proxy: dict[str, str] = {}
        self._servers: list[asyncio.Server] = []
        self._on_lost: Callable[[str], None] | None = None
        self.lost = asyncio.Event()
        self.lost_answer: Frame | None = None
        self._conns: set[asyncio.StreamWriter] = set()
        self.drop_polls = True
        self.ended: list[str] = []
        """Why each proxied connection ended before :meth:`close`, for failure messages."""
        self._closing = False

    async def start(self) -> ControllerProxies:
        for target in self.targets:
            server = await asyncio.start_server(
                functools.partial(self._serve, target=target), self.host, 0
            )
            port = server.sockets[0].getsockname()[1]
            address = f"{self.host}:{port}"
            self._servers.append(server)
            self.addresses.append(address)
            self._to_proxy[target] = address
        return self

    async def close(self) -> None:
        self._closing = True
        for server in self._servers:
            server.close()
        for w in list(self._conns):
            w.close()
        for server in self._servers:
            with contextlib.suppress(Exception):
                await server.wait_closed()

    def lose_next_expansion_answer(self, on_lost: Callable[[str], None]) -> None:
        self._on_lost = on_lost

    async def _serve(
        self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter, *, target: str
    ) -> None:
        host, port = target.rsplit(":", 1)
        try:
            up_r, up_w = await asyncio.open_connection(host, int(port))
        except OSError:
            client_w.close()
            return
        self._conns |= {client_w, up_w}
        doomed: set[int] = set()  # opaques of expansions whose answer is to be lost
        polls: set[int] = set()  # opaques of GET_REPLICA_INFO requests

        async def upstream() -> None:
            decoder = FrameDecoder()
            while data := await client_r.read(1 << 16):
                for frame in decoder.feed(data):
                    if (
                        self._on_lost is not None
                        and frame.code == RequestCode.CONTROLLER_ALTER_SYNC_STATE_SET
                        and frame.is_request
                        and len(msgpack.unpackb(frame.body or b"\x80").get("syncStateSet", [])) > 1
                    ):
                        doomed.add(frame.opaque)
                    if frame.code == RequestCode.CONTROLLER_GET_REPLICA_INFO and frame.is_request:
                        polls.add(frame.opaque)
                    up_w.write(encode_frame(frame))
                await up_w.drain()

        async def downstream() -> None:
            decoder = FrameDecoder()
            while data := await up_r.read(1 << 16):
                for frame in decoder.feed(data):
                    if frame.kind == KIND_RESPONSE and frame.opaque in doomed:
                        doomed.discard(frame.opaque)
                        if frame.code == ResponseCode.SUCCESS and self._on_lost is not None:
                            on_lost, self._on_lost = self._on_lost, None
                            self.lost_answer = frame
                            on_lost(target)
                            self.lost.set()
                            client_w.close()
                            return
                    if frame.kind == KIND_RESPONSE and frame.opaque in polls:
                        polls.discard(frame.opaque)
                        if self.lost.is_set() and self.drop_polls:
                            continue
                    leader = frame.header.get("leaderAddress")
                    if isinstance(leader, str) and leader in self._to_proxy:
                        frame.header["leaderAddress"] = self._to_proxy[leader]
                    client_w.write(encode_frame(frame))
                await client_w.drain()

        tasks = [asyncio.ensure_future(upstream()), asyncio.ensure_future(downstream())]
        try:
            done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
            for t in done if not self._closing else ():
                side = "broker->controller" if t is tasks[0] else "controller->broker"
                exc = t.exception()
                why = "EOF" if exc is None else repr(exc)
                self.ended.append(f"{time.time():.3f} {target} {side}: {why}")
        except (Exception, asyncio.CancelledError):
            pass  # the proxy is closing
        finally:
            for t in tasks:
                t.cancel()
            for w in (client_w, up_w):
                w.close()
                self._conns.discard(w)
            await asyncio.gather(*tasks, return_exceptions=True)
