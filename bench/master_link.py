"""A bench's connection to its broker group's master, kept as a production client keeps it
(:class:`MasterLink`).

A master refuses writes for a while by design: one whose heartbeats went unanswered for
``broker_heartbeat_timeout_ms`` (a stall of its process or of the active controller's, which a
loaded machine gives) is fenced until a heartbeat is answered again, and after a failover the
old one answers NOT_MASTER. A send refused with an answer the SDK retries
(``client.routing_retry.RETRIABLE_CODES``: fenced, not master, busy, ...) is sent again once the
controllers name the group's master (the same broker once its lease is renewed, or a new one:
connected to then), until :data:`RETRY_DEADLINE` after its first refusal; any other answer ends
the bench. The link counts the sends it retried and the refusals by code, for the bench to
print beside its figures. Most of those answers come before anything was stored; a flush or
replica timeout (FLUSH_DISK_TIMEOUT, FLUSH_SLAVE_TIMEOUT) comes after, so its message may end up
stored twice, as with the SDK: the refusals' codes say so.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter

from client.bootstrap import Bootstrap
from client.routing_retry import RETRIABLE_CODES
from protocol.codes import ResponseCode
from protocol.remoting import Frame, Header
from remoting.client import RemotingClient
from tests.cluster.support import sync_state

RETRY_DEADLINE = 30.0
"""Seconds a refused send is retried for, from its first refusal (a failover takes about the
brokers' 1 s heartbeat timeout; a fenced master is writable again at its next answered
heartbeat)."""

PAUSE = 0.05
"""Seconds before a send refused by the master the controllers still name is sent to it again:
about a quarter of the brokers' 200 ms heartbeat period."""


class MasterLink:
    """The connection to ``group``'s master (``conn``), reconnected (signed as ``conn`` is) when
    the controllers at ``boot`` name another one after a refusal."""

    def __init__(self, boot: Bootstrap, conn: RemotingClient, group: str = "broker-a") -> None:
        self.boot = boot
        self.group = group
        self.conn = conn
        self.retried = 0
        """Sends refused at least once and then sent again (each counted once)."""
        self.refusals: Counter[str] = Counter()
        """The retriable refusals by code name."""
        self._old: list[RemotingClient] = []  # replaced; answers may still come on them
        self._lock = asyncio.Lock()
        self._looked_up = 0.0  # when the master was last looked up after a refusal

    def reset(self) -> tuple[int, Counter[str]]:
        """The counts so far, zeroed for the next phase."""
        counts = self.retried, self.refusals
        self.retried, self.refusals = 0, Counter()
        return counts

    async def retry(
        self,
        refused: Frame,
        conn: RemotingClient,
        code: int,
        header: Header,
        body: bytes | None,
        timeout: float,
        failed: str,
    ) -> Frame:
        """The SUCCESS answer to a request that ``conn`` answered with ``refused``, sent again
        after each retriable refusal; a non-retriable refusal, or one :data:`RETRY_DEADLINE`
        after the first, ends the bench (``failed`` says what failed)."""
        deadline = time.monotonic() + RETRY_DEADLINE
        resp = refused
        self.retried += 1
        while True:
            if resp.code not in RETRIABLE_CODES:
                raise SystemExit(f"{failed}: {resp.code} {resp.header}")
            self.refusals[ResponseCode(resp.code).name] += 1
            if time.monotonic() > deadline:
                raise SystemExit(
                    f"{failed} for {RETRY_DEADLINE:g} s of retries: {resp.code} {resp.header}"
                )
            conn = await self._master_again(conn, deadline)
            resp = await conn.request(code, header, body, timeout)
            if resp.code == ResponseCode.SUCCESS:
                return resp

    async def _master_again(self, refused_on: RemotingClient, deadline: float) -> RemotingClient:
        """The connection to the master the controllers name now; after :data:`PAUSE` when
        that is still the one that refused (its lease is renewed by its next answered
        heartbeat)."""
        async with self._lock:  # one lookup and one reconnect for all the sends refused
            now = time.monotonic()
            if self.conn is refused_on and now - self._looked_up > PAUSE:
                self._looked_up = now
                master = await self._master(deadline)
                if master != refused_on.address:
                    self.conn = await RemotingClient.connect(master, signer=refused_on.signer)
                    self._old.append(refused_on)
        if self.conn is refused_on:
            await asyncio.sleep(PAUSE)
        return self.conn

    async def _master(self, deadline: float) -> str:
        """The group's master as the controllers name it, once they name one."""
        while True:
            doc = await sync_state(self.boot, self.group)
            master = doc.get("masterAddress") if doc else None
            if isinstance(master, str) and master:
                return master
            if time.monotonic() > deadline:
                raise SystemExit(f"the controllers named no master of {self.group} in time")
            await asyncio.sleep(0.05)

    def close(self) -> None:
        for conn in (*self._old, self.conn):
            conn.close()
