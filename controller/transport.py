"""Raft peer transport over the remoting protocol, on each controller's one port.

Outbound: one :class:`PeerLink` per peer, each a :class:`~remoting.client.RemotingClient` that
reconnects with back-off, fed by a bounded queue. Every Raft message is a oneway RAFT_MESSAGE
frame whose body is :func:`protocol.raft.encode` of it; everything queued in one loop iteration
leaves in one write. Raft tolerates loss, so the transport never blocks the driver: a full queue
drops its oldest messages, a peer that cannot be reached has its queue dropped, and both are
reported (``on_unreachable``) so the leader probes that peer instead of streaming to it.

Inbound: :meth:`PeerTransport.handle_frame` is the RemotingServer handler of RAFT_MESSAGE; it
decodes the body and hands the message to ``on_message`` (the driver's inbox). A body the codec
rejects (malformed, or a term or index past 2^63-1) closes the connection it came on; the core
then drops messages from nodes that are not members (see ``RaftNode.step``).
"""

from __future__ import annotations

import asyncio
import collections
import itertools
from collections.abc import Callable
from typing import cast

import structlog

from controller.raft import Message, NodeId
from daemon.tasks import cancel_and_wait, sleep_or_wake
from protocol import raft as raft_codec
from protocol.codes import ControllerCode
from protocol.remoting import DEFAULT_MAX_FRAME_BYTES, FLAG_ONEWAY, Frame, ProtocolError, request
from protocol.request_auth import Credentials, RequestSigner
from remoting.client import RemotingClient, signer_for, wall_ms
from remoting.errors import ConnectError
from remoting.server import Connection

log = structlog.get_logger(__name__)

CONNECT_TIMEOUT = 1.0
BACKOFF_MIN = 0.05
BACKOFF_MAX = 1.0


class PeerClient(RemotingClient):
    """A RemotingClient whose writer can wait for the socket's write buffer to drain."""

    async def wait_writable(self) -> None:
        if not self._writable.is_set():
            await self._writable.wait()


class PeerLink:
    """The outbound side towards one peer: a bounded queue and a task that writes it out."""

    def __init__(
        self,
        peer: NodeId,
        address: str,
        *,
        max_queue: int,
        max_frame_bytes: int,
        on_unreachable: Callable[[NodeId], None],
        on_dropped: Callable[[NodeId, int], None],
        signer: RequestSigner | None = None,
        on_refused: Callable[[NodeId], None] | None = None,
    ) -> None:
        self.peer = peer
        self._on_refused = on_refused
        self._signer = signer
        self.address = address
        self._max_queue = max_queue
        self._max_frame_bytes = max_frame_bytes
        self._on_unreachable = on_unreachable
        self._on_dropped = on_dropped
        self._queue: collections.deque[bytes] = collections.deque()
        self._ready = asyncio.Event()
        self._retry = asyncio.Event()
        """Set when the peer was heard from: a reconnect waiting out its back-off tries now."""
        self._client: PeerClient | None = None
        self._opaque = itertools.count(1)
        self._task: asyncio.Task[None] | None = None
        self.connected = False
        self._stopping = False

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name=f"raft-peer-{self.peer}")

    async def stop(self) -> None:
        self._stopping = True
        self._ready.set()
        if self._task is not None:
            await cancel_and_wait([self._task])
            self._task = None
        if self._client is not None:
            self._client.close()
            self._client = None

    def send(self, body: bytes) -> None:
        if len(self._queue) >= self._max_queue:
            dropped = 0
            while len(self._queue) >= self._max_queue // 2:
                self._queue.popleft()
                dropped += 1
            self._on_dropped(self.peer, dropped)
            self._on_unreachable(self.peer)
        self._queue.append(body)
        self._ready.set()

    def heard(self) -> None:
        """A message from the peer arrived (on its own connection to us): its process is up, so
        a reconnect waiting out its back-off tries at once. Without this, a peer that had been
        down for a second was reached again only when the back-off (up to ``BACKOFF_MAX``)
        ended: a restarted controller's (pre-)votes were answered that much later, and a
        failover right after a restart waited for it (issue 34)."""
        if not self.connected:
            self._retry.set()

    async def _back_off(self, seconds: float) -> None:
        """Sleep ``seconds`` before the next connect, or until :meth:`heard`."""
        self._retry.clear()
        await sleep_or_wake(self._retry, seconds)

    def _drop_queue(self) -> None:
        if self._queue:
            self._on_dropped(self.peer, len(self._queue))
            self._queue.clear()

    async def _run(self) -> None:
        backoff = BACKOFF_MIN
        # The flag, not only cancel(): a library below may swallow a cancel (3.11's
        # asyncio.wait_for did; ruff's TID251 keeps it out of the product).
        while not self._stopping:
            client = self._client
            if client is None or client.is_closed:
                self.connected = False
                try:
                    client = cast(
                        PeerClient,
                        await PeerClient.connect(
                            self.address, CONNECT_TIMEOUT, self._max_frame_bytes
                        ),
                    )
                except (ConnectError, OSError, ValueError) as exc:
                    self._drop_queue()
                    self._on_unreachable(self.peer)
                    if self._on_refused is not None and _refused(exc):
                        self._on_refused(self.peer)
                    log.debug("raft peer unreachable", peer=self.peer, error=str(exc))
                    await self._back_off(backoff)
                    backoff = min(backoff * 2, BACKOFF_MAX)
                    continue
                self._client = client
                self.connected = True
                if self._stopping:
                    break
                backoff = BACKOFF_MIN
            if not self._queue:
                self._ready.clear()
                waiter = asyncio.ensure_future(self._ready.wait())
                closed = asyncio.ensure_future(client.closed_event.wait())
                try:
                    await asyncio.wait((waiter, closed), return_when=asyncio.FIRST_COMPLETED)
                finally:
                    waiter.cancel()
                    closed.cancel()
                continue
            await client.wait_writable()
            if client.is_closed:
                self._drop_queue()
                self._on_unreachable(self.peer)
                continue
            signer = self._signer
            while self._queue:
                body = self._queue.popleft()
                header = None
                if signer is not None:  # auth on: signed as the cluster
                    code = ControllerCode.RAFT_MESSAGE
                    header = signer.sign(code, FLAG_ONEWAY, None, body, wall_ms())
                client.send_frame(
                    request(
                        ControllerCode.RAFT_MESSAGE, next(self._opaque), header, body, oneway=True
                    )
                )
            # Let the batched write go out before looking at the queue again.
            await asyncio.sleep(0)


def _refused(exc: BaseException) -> bool:
    """Whether a failed connect was refused (nothing listens at the address: the peer's process
    is gone), not timed out or otherwise failed (the peer may be alive and slow)."""
    return isinstance(exc, ConnectionRefusedError) or isinstance(
        exc.__cause__, ConnectionRefusedError
    )


class PeerTransport:
    """Every outbound link of one node, and the inbound handler."""

    def __init__(
        self,
        node_id: NodeId,
        *,
        on_message: Callable[[Message], None],
        on_unreachable: Callable[[NodeId], None],
        max_queue: int = 4096,
        max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES,
        on_dropped: Callable[[NodeId, int], None] | None = None,
        credentials: Credentials | None = None,
        on_refused: Callable[[NodeId], None] | None = None,
    ) -> None:
        """``on_unreachable``: a send to the peer failed or was dropped; ``on_refused``, also:
        the connection to it was refused (its process is gone)."""
        self.node_id = node_id
        self._on_refused = on_refused
        self._signer = signer_for(credentials)
        self._on_message = on_message
        self._on_unreachable = on_unreachable
        self._on_dropped = on_dropped or (lambda _peer, _n: None)
        self._max_queue = max_queue
        self._max_frame_bytes = max_frame_bytes
        self._links: dict[NodeId, PeerLink] = {}
        self._retiring: set[asyncio.Future[None]] = set()
        self._started = False

    @property
    def addresses(self) -> dict[NodeId, str]:
        return {peer: link.address for peer, link in self._links.items()}

    def set_address(self, peer: NodeId, address: str) -> None:
        """Send to ``peer`` at ``address`` from now on (a new link when the address changed)."""
        if peer == self.node_id:
            return
        link = self._links.get(peer)
        if link is not None and link.address == address:
            return
        if link is not None:
            self._retire(link)
        link = PeerLink(
            peer,
            address,
            max_queue=self._max_queue,
            max_frame_bytes=self._max_frame_bytes,
            on_unreachable=self._on_unreachable,
            on_dropped=self._on_dropped,
            signer=self._signer,
            on_refused=self._on_refused,
        )
        self._links[peer] = link
        if self._started:
            link.start()

    def remove(self, peer: NodeId) -> None:
        link = self._links.pop(peer, None)
        if link is not None:
            self._retire(link)

    def _retire(self, link: PeerLink) -> None:
        task = asyncio.ensure_future(link.stop())
        self._retiring.add(task)
        task.add_done_callback(self._retiring.discard)

    def start(self) -> None:
        self._started = True
        for link in self._links.values():
            link.start()

    async def stop(self) -> None:
        self._started = False
        links = list(self._links.values())
        self._links.clear()
        await asyncio.gather(
            *(link.stop() for link in links), *self._retiring, return_exceptions=True
        )

    def send(self, messages: tuple[Message, ...] | list[Message]) -> None:
        for m in messages:
            link = self._links.get(m.dst)
            if link is None:
                self._on_unreachable(m.dst)
                continue
            link.send(raft_codec.encode(m))

    def handle_frame(self, conn: Connection, frame: Frame) -> None:
        """RemotingServer handler of RAFT_MESSAGE (oneway: never answers)."""
        if not frame.body:
            return None
        try:
            message = raft_codec.decode(frame.body)
        except ProtocolError as exc:
            # Malformed or out of range (a term past 2^63-1): never handed to the core. A peer
            # that sends one is broken or hostile; its connection goes, the daemon stays.
            log.warning("closing connection: bad raft message", peer=conn.peer, reason=str(exc))
            conn.close()
            return None
        if message.dst != self.node_id:
            return None
        link = self._links.get(message.src)
        if link is not None:
            link.heard()
        self._on_message(message)
        return None
