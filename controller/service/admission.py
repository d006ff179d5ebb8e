"""Load shedding: a cap on the decisions whose events are in the Raft log but not yet applied.

Past ``max_inflight_proposals`` decisions (or ``max_inflight_proposal_bytes`` bytes of their
encoded events) in flight, a write is answered SYSTEM_BUSY (2) at once instead of being queued
behind the others: the leader's loop keeps time for heartbeats and the followers' appends, so a
flood of writes costs the flood its latency, not the group its leader. Clients and brokers retry
SYSTEM_BUSY after a back-off (:class:`remoting.failover.AddressFailover`).

A decision is admitted whole (all its events), so shedding never leaves half of one applied.
One decision larger than the byte cap is admitted when nothing else is in flight. The
controller's own decisions (the scan's master elections) are never shed: a failover must not
wait behind a flood of writes.
"""

from __future__ import annotations

from collections.abc import Awaitable

from controller.metrics import ControllerMetrics
from controller.service.requests import AsyncHandler, Refused, count, refusal
from protocol.codes import ResponseCode
from protocol.remoting import Frame
from remoting.server import Connection, Handler


class ProposalBudget:
    def __init__(
        self, max_count: int, max_bytes: int, metrics: ControllerMetrics | None = None
    ) -> None:
        self.max_count = max_count
        self.max_bytes = max_bytes
        self.metrics = metrics
        self.count = 0
        self.bytes = 0

    @property
    def full(self) -> bool:
        return self.count >= self.max_count

    def busy(self) -> Refused:
        """The SYSTEM_BUSY refusal (counted as shed)."""
        if self.metrics is not None:
            self.metrics.proposals_shed.inc()
        return Refused(
            ResponseCode.SYSTEM_BUSY,
            f"controller busy: {self.count} proposals ({self.bytes} bytes) in flight, at "
            f"most {self.max_count} ({self.max_bytes} bytes); retry after a back-off",
        )

    def acquire(self, size: int, *, shed: bool = True) -> None:
        """Admit a decision of ``size`` bytes, or raise Refused(SYSTEM_BUSY) (only if ``shed``)."""
        if shed and (self.full or (self.count and self.bytes + size > self.max_bytes)):
            raise self.busy()
        self.count += 1
        self.bytes += size
        self._export()

    def release(self, size: int) -> None:
        self.count -= 1
        self.bytes -= size
        self._export()

    def _export(self) -> None:
        if self.metrics is not None:
            self.metrics.proposals_in_flight.set(self.count)


def shedding(handler: AsyncHandler, budget: ProposalBudget) -> Handler:
    """``handler`` (a write, already :func:`~controller.service.requests.guarded`), answered
    SYSTEM_BUSY at once while the budget is full: a plain frame, no task and no decoding, so a
    flood of writes costs the leader's loop as little as possible."""
    metrics = budget.metrics

    def run(conn: Connection, req: Frame) -> Frame | Awaitable[Frame]:
        if not budget.full:
            return handler(conn, req)
        resp = refusal(req, budget.busy())
        count(metrics, req, resp)
        return resp

    return run
