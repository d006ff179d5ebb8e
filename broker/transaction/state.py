"""The open transactions of one broker group: a pure state machine (no clock, no I/O; time is
an input).

The broker feeds it the half records and op records (protocol.transaction) in CommitLog order.
A half opens a transaction; a commit, rollback or discard op resolves it; a check op counts a
check-back and moves the next one. A replica that applies the same records holds the same
state, so a new master checks back and commits exactly what its predecessor left open.
"""

from __future__ import annotations

import heapq
from collections import OrderedDict
from dataclasses import dataclass

from protocol.transaction import Op, OpKind

__all__ = ["RECENT_RESOLVED", "Half", "TransactionState"]

RECENT_RESOLVED = 100_000
"""How many resolved transactions the state remembers, to answer a repeated commit or rollback
as done (an older one answers "not found"; its half is not open, so nothing is written)."""


@dataclass(slots=True)
class Half:
    """An open transaction: its half record and how often it was checked back."""

    offset: int
    """The half record's CommitLog offset."""
    transaction_id: str
    group: str
    store_ms: int
    checks: int = 0
    last_check_ms: int = 0
    last_op: int = -1
    """The CommitLog offset of the last op applied: an op at or before it is a replay."""


class TransactionState:
    """Open transactions, what resolved the others, and which are due for a check-back."""

    def __init__(
        self,
        first_check_ms: int = 6_000,
        interval_ms: int = 60_000,
        remember: int = RECENT_RESOLVED,
    ) -> None:
        self.first_check_ms = first_check_ms
        self.interval_ms = interval_ms
        self._remember = remember
        self._open: dict[int, Half] = {}
        self._resolved: OrderedDict[int, tuple[OpKind, str, str]] = OrderedDict()
        """half offset -> (COMMIT, ROLLBACK or DISCARD; producer group; transaction id), the
        last ``remember`` resolved."""
        self._heap: list[tuple[int, int]] = []
        """(check time, half offset); an entry before the half's next check time is stale."""
        self._by_id: dict[str, int] = {}
        """transaction id -> its latest half's offset."""
        self.last_commit: tuple[int, int] | None = None
        """(op record offset, half offset) of the last commit applied: the one commit whose
        visible copy a crash may have cut off (docs/transactions.md)."""

    # -- records -------------------------------------------------------------------------------
    def half(self, half: Half) -> None:
        if half.offset in self._open or half.offset in self._resolved:
            return
        self._open[half.offset] = half
        self._by_id[half.transaction_id] = half.offset
        heapq.heappush(self._heap, (self.next_check(half), half.offset))

    def op(self, op_offset: int, op: Op) -> bool:
        """Apply an op record; False when it changes nothing (its half is resolved already,
        or unknown: retention deleted it)."""
        half = self._open.get(op.half_offset)
        if half is None:
            if op.kind is OpKind.COMMIT and self.resolution(op.half_offset) is OpKind.COMMIT:
                self.last_commit = (op_offset, op.half_offset)  # a repair's commit op again
            return False
        if op_offset <= half.last_op:
            return False  # applied already (the same log read twice)
        half.last_op = op_offset
        if op.kind is OpKind.CHECK:
            half.checks += 1
            half.last_check_ms = op.time_ms
            heapq.heappush(self._heap, (self.next_check(half), half.offset))
            return True
        del self._open[op.half_offset]
        resolved = self._resolved
        resolved[op.half_offset] = (op.kind, half.group, half.transaction_id)
        while len(resolved) > self._remember:
            offset, (_kind, _group, txn_id) = resolved.popitem(last=False)
            if self._by_id.get(txn_id) == offset:
                del self._by_id[txn_id]
        if op.kind is OpKind.COMMIT:
            self.last_commit = (op_offset, op.half_offset)
        return True

    # -- questions -----------------------------------------------------------------------------
    def find(self, half_offset: int | None, transaction_id: str) -> int | None:
        """The half a request names: by offset when given (its id must match, when the half is
        open), else by transaction id. None: no such transaction."""
        if half_offset is None or half_offset < 0:
            return self._by_id.get(transaction_id)
        half = self._open.get(half_offset)
        if half is not None:
            return half_offset if half.transaction_id == transaction_id else None
        if half_offset in self._resolved and self._by_id.get(transaction_id) == half_offset:
            return half_offset
        return None

    def open_half(self, half_offset: int) -> Half | None:
        return self._open.get(half_offset)

    def resolution(self, half_offset: int) -> OpKind | None:
        done = self._resolved.get(half_offset)
        return done[0] if done is not None else None

    def group_of(self, half_offset: int) -> str | None:
        """The producer group of a transaction, open or resolved."""
        half = self._open.get(half_offset)
        if half is not None:
            return half.group
        done = self._resolved.get(half_offset)
        return done[1] if done is not None else None

    def due(self, now_ms: int, limit: int | None = None) -> list[Half]:
        """Open halves whose next check-back time is at or before ``now_ms``, earliest first
        (``first_check_ms`` after the half was stored, then ``interval_ms`` after each check).
        Each is handed out once: the caller applies a check or discard op, or :meth:`later`."""
        out: list[Half] = []
        seen: set[int] = set()
        heap = self._heap
        while heap and heap[0][0] <= now_ms and (limit is None or len(out) < limit):
            at, offset = heapq.heappop(heap)
            half = self._open.get(offset)
            if half is None or offset in seen or at < self.next_check(half):
                continue  # resolved, or checked since: a stale entry
            seen.add(offset)
            out.append(half)
        return out

    def later(self, half: Half, at_ms: int) -> None:
        """Check ``half`` again at ``at_ms`` (a check round that could not write its op)."""
        if half.offset in self._open:
            heapq.heappush(self._heap, (max(at_ms, self.next_check(half)), half.offset))

    def next_check(self, half: Half) -> int:
        if half.checks == 0:
            return half.store_ms + self.first_check_ms
        return half.last_check_ms + self.interval_ms

    def open_count(self) -> int:
        return len(self._open)

    def open_offsets(self) -> list[int]:
        return sorted(self._open)

    def snapshot(
        self,
    ) -> tuple[tuple[tuple[int, str, str, int, int], ...], tuple[tuple[int, str], ...]]:
        """Everything the records decided, for comparing replicas."""
        opened = tuple(
            (h.offset, h.transaction_id, h.group, h.checks, h.last_check_ms)
            for h in sorted(self._open.values(), key=lambda h: h.offset)
        )
        resolved = tuple((off, done[0].value) for off, done in sorted(self._resolved.items()))
        return opened, resolved
