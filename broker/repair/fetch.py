"""The asking side of a repair: a record this broker cannot read is fetched from another replica.

:meth:`RecordRepair.start` is what a read calls when the store answers CORRUPT, and what the scrub's
loop calls for every damage the store knows of (``Scrubber``: found at start-up by recovery, by a
read, by the scrub) as soon as a replica is there to ask: it starts (or joins) the repair of that
record and gives its future, or None when no repair is worth trying now (no replica to ask, or
every replica refused it less than :data:`RETRY_AFTER_S` ago). The
repair asks each replica in turn with REPAIR_RECORD (the in-sync ones first on a master; the
master first on a slave), checks every answer again (epoch, range, size, every record's CRC and
offset: ``RepairedRecord.problem``) and writes the first good one over the damaged bytes in
place (``StoreRepair.repair``), durably. Counted (:attr:`RecordRepair.counts`), logged once per
record with the offset and the replica; an answer refused is logged as a warning naming the
replica and why, and the next is asked.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

import structlog

from broker.ha.service import HAService
from broker.role import RoleState
from protocol.broker_requests.repair import MAX_REPAIR_BYTES, RepairedRecord, RepairRecord
from protocol.codes import ResponseCode, code_name
from protocol.fields import FieldError
from remoting.client import ConnectionPool
from remoting.errors import RemotingError
from storage.errors import StoreError
from storage.store_repair import StoreRepair

__all__ = ["REPAIR_KINDS", "RETRY_AFTER_S", "RecordRepair", "Repaired"]

log = structlog.get_logger(__name__)

RETRY_AFTER_S: Final = 10.0
"""A record no replica could repair is not asked for again before this (reads answer CORRUPT)."""
REQUEST_TIMEOUT_S: Final = 3.0

REPAIR_KINDS: Final = ("repaired", "unrepairable", "answers_refused")
"""repaired: records written back from a replica; unrepairable: repairs no replica could make;
answers_refused: replicas' answers the checks refused (bad bytes, another epoch)."""


@dataclass(frozen=True, slots=True)
class Repaired:
    """How a repair ended: ``ok`` (written back from ``source``), else ``tried`` says what was."""

    ok: bool
    source: str
    tried: str


class RecordRepair:
    """Loop thread only."""

    def __init__(
        self,
        repairs: StoreRepair,
        ha: Callable[[], HAService | None],
        role: Callable[[], RoleState],
        pool: Callable[[], ConnectionPool],
    ) -> None:
        self._repairs = repairs
        self._ha = ha
        self._role = role
        self._pool = pool
        self._running: dict[int, asyncio.Future[Repaired]] = {}
        self._failed: dict[int, tuple[float, Repaired]] = {}
        self.counts: dict[str, int] = dict.fromkeys(REPAIR_KINDS, 0)

    def start(self, offset: int) -> asyncio.Future[Repaired] | None:
        """Start or join the repair of the unreadable record at CommitLog ``offset``; None
        when none is worth trying now (see the module docstring)."""
        running = self._running.get(offset)
        if running is not None:
            return running
        if self._ha() is None:
            return None
        failed = self._failed.get(offset)
        if failed is not None and time.monotonic() - failed[0] < RETRY_AFTER_S:
            return None
        size = self._repairs.unreadable_size(offset)
        if size is None or size <= 0:
            return None
        if size > MAX_REPAIR_BYTES:  # no request fetches it: no replica can repair it
            tried = f"{size} bytes, more than one repair request fetches ({MAX_REPAIR_BYTES})"
            self._gave_up(offset, size, Repaired(False, "", tried))
            return None
        task = asyncio.ensure_future(self.repair(offset, size))
        self._running[offset] = task
        task.add_done_callback(lambda _t: self._running.pop(offset, None))
        return task

    def can_ask(self) -> bool:
        """Is another replica of the group known to ask (a repair started now has one)?"""
        ha = self._ha()
        return ha is not None and bool(self._peers(ha))

    def explain(self, offset: int) -> str:
        """What the last repair of ``offset`` tried, when it failed ("" otherwise)."""
        failed = self._failed.get(offset)
        if failed is None:
            return ""
        return f"no intact copy on another replica ({failed[1].tried})"

    async def repair(self, offset: int, size: int) -> Repaired:
        """Fetch the ``size`` bytes at ``offset`` from a replica and write them back."""
        outcome = await self._fetch(offset, size)
        if outcome.ok:
            self._failed.pop(offset, None)
            self.counts["repaired"] += 1
        else:
            self._gave_up(offset, size, outcome)
        return outcome

    def _gave_up(self, offset: int, size: int, outcome: Repaired) -> None:
        """No replica could repair the ``size`` bytes at ``offset``: counted, the store told
        (the broker reports it to elections), logged (an error the first time, then at info:
        it is retried every :data:`RETRY_AFTER_S`)."""
        again = offset in self._failed
        self._failed[offset] = (time.monotonic(), outcome)
        self.counts["unrepairable"] += 1
        self._repairs.repair_refused(offset)
        (log.info if again else log.error)(
            f"commitlog record at offset {offset} ({size} bytes) could not be repaired: "
            f"{outcome.tried}",
            offset=offset,
            size=size,
        )

    def _peers(self, ha: HAService) -> list[tuple[int, str]]:
        role = self._role()
        me = role.broker_id
        replicas = {i: a for i, a in ha.registered_replicas.items() if i != me and a}
        if role.is_master:
            first = ha.in_sync_members()
        else:
            first = frozenset(i for i, a in replicas.items() if a == role.master_address)
        ordered = sorted(replicas.items(), key=lambda item: (item[0] not in first, item[0]))
        if not role.is_master and role.master_address and not first:
            ordered.insert(0, (-1, role.master_address))  # a master not listed (yet)
        return ordered

    async def _fetch(self, offset: int, size: int) -> Repaired:
        ha = self._ha()
        if ha is None:
            return Repaired(False, "", "no replica to ask (a broker without controllers)")
        span = ha.epoch_at(offset)
        if span is None:
            return Repaired(False, "", f"no epoch entry of this broker holds offset {offset}")
        ask = RepairRecord(offset=offset, size=size, epoch=span.epoch)
        peers = self._peers(ha)
        if not peers:
            return Repaired(False, "", "no other replica of the group is known")
        tried: list[str] = []
        for broker_id, address in peers:
            who = f"broker {broker_id} at {address}" if broker_id >= 0 else f"master {address}"
            try:
                conn = await self._pool().get(address)
                resp = await conn.request(ask.code, *ask.encode(), timeout=REQUEST_TIMEOUT_S)
            except (RemotingError, OSError) as exc:
                tried.append(f"{who}: unreachable ({exc})")
                continue
            if resp.code != ResponseCode.SUCCESS:
                tried.append(f"{who}: {code_name(resp.code)} {resp.remark}".rstrip())
                continue
            try:
                answer = RepairedRecord.parse(resp.header, resp.body)
            except FieldError as exc:
                problem: str | None = f"malformed answer: {exc}"
            else:
                problem = answer.problem(ask)
            if problem is not None:
                self.counts["answers_refused"] += 1
                tried.append(f"{who}: answer refused, {problem}")
                log.warning(
                    f"repair of commitlog offset {offset}: {who}'s answer refused: {problem}",
                    offset=offset,
                    replica=address,
                )
                continue
            try:
                durable = self._repairs.repair(offset, answer.raw)
                await asyncio.get_running_loop().run_in_executor(None, durable)
            except (StoreError, OSError) as exc:
                tried.append(f"writing back failed: {exc}")
                break
            log.warning(
                f"commitlog record at offset {offset} ({size} bytes) repaired from {who}",
                offset=offset,
                size=size,
                replica=address,
                replica_broker_id=broker_id,
            )
            return Repaired(True, who, "; ".join(tried))
        return Repaired(False, "", "; ".join(tried))
