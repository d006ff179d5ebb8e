"""A hand-written hostile master: a remoting port that names its HA port, and an HA port that
answers every slave handshake with a history of its choosing (real sockets, no broker code).

It records what each slave did with the answer, so a test can wait until the slave acted:
``acked`` (the slave took the answer: it truncated to the consistent point and acknowledged
it, or acknowledged the transfer that followed) or ``closed`` (the slave hung up on it).
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass, field

import msgpack

from protocol.codes import RequestCode, ResponseCode
from protocol.ha import (
    SLAVE_ACK_SIZE,
    SLAVE_HANDSHAKE_SIZE,
    EpochEntry,
    MasterHandshake,
    MasterTransfer,
    encode_master_handshake,
    encode_master_transfer,
)
from protocol.remoting import Frame, response
from remoting.server import Connection, RemotingServer

INT32_MAX = 2**31 - 1


@dataclass
class FakeReply:
    """The handshake answer; with ``transfer_epoch`` an empty transfer of that epoch follows the
    slave's first ack (a new epoch starting at the master's max offset)."""

    master_epoch: int
    entries: tuple[EpochEntry, ...]
    max_offset: int
    transfer_epoch: int | None = None


@dataclass
class FakeMaster:
    reply: FakeReply
    host: str = "127.0.0.1"
    events: list[str] = field(default_factory=list)
    acks: list[int] = field(default_factory=list)
    _ha: asyncio.Server | None = None
    _remoting: RemotingServer | None = None
    _conns: set[asyncio.StreamWriter] = field(default_factory=set)
    ha_port: int = 0
    port: int = 0

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def handshakes(self) -> int:
        return self.events.count("handshake")

    def acted(self) -> bool:
        """Some slave took or refused the answer."""
        return "acked" in self.events or "closed" in self.events

    async def start(self, ha_port: int = 0, with_remoting: bool = True) -> FakeMaster:
        self._ha = await asyncio.start_server(self._serve, self.host, ha_port, reuse_address=True)
        self.ha_port = self._ha.sockets[0].getsockname()[1]
        if with_remoting:
            self._remoting = RemotingServer(name="fake-master")
            self._remoting.register(RequestCode.GET_BROKER_RUNTIME_INFO, self._runtime_info)
            self.port = await self._remoting.start(self.host, 0)
        return self

    async def close(self) -> None:
        if self._remoting is not None:
            await self._remoting.stop()
        if self._ha is not None:
            self._ha.close()
            for w in list(self._conns):
                w.transport.abort()
            await self._ha.wait_closed()

    def _runtime_info(self, conn: Connection, req: Frame) -> Frame:
        doc = {"haAddress": f"{self.host}:{self.ha_port}"}
        return response(req, ResponseCode.SUCCESS, None, msgpack.packb(doc))

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._conns.add(writer)
        r = self.reply
        try:
            await reader.readexactly(SLAVE_HANDSHAKE_SIZE)
            self.events.append("handshake")
            writer.write(
                encode_master_handshake(
                    MasterHandshake(
                        master_max_offset=r.max_offset,
                        master_epoch=r.master_epoch,
                        epoch_entries=r.entries,
                    )
                )
            )
            sent_transfer = r.transfer_epoch is None
            while True:
                ack = await reader.readexactly(SLAVE_ACK_SIZE)
                offset = int.from_bytes(ack[4:], "big")
                self.acks.append(offset)
                if not sent_transfer:
                    sent_transfer = True
                    assert r.transfer_epoch is not None
                    writer.write(
                        encode_master_transfer(
                            MasterTransfer(
                                offset=r.max_offset,
                                epoch=r.transfer_epoch,
                                epoch_start_offset=r.max_offset,
                                confirm_offset=r.max_offset,
                            )
                        )
                    )
                    continue
                self.events.append("acked")
        except (asyncio.IncompleteReadError, ConnectionError):
            self.events.append("closed")
        finally:
            self._conns.discard(writer)
            with contextlib.suppress(Exception):
                writer.close()
