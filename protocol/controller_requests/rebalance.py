"""Traffic and re-balancing on the controllers (docs/protocol.md, "Controller requests";
docs/static-topics.md, "Placement and re-balancing by traffic").

Requests (header fields, no body; ``?`` marks a field that may be left out)::

    GET_BROKER_TRAFFIC 5123   nothing
    GET_REBALANCE_PLAN 5124   threshold? (msg/s, a number >= 0 or its text; absent: the
                              controller's rebalance_threshold)

Each answers a document in the body. A threshold that is not a number >= 0 raises
:class:`~protocol.controller_requests.base.InvalidRequest` (CONTROLLER_INVALID_REQUEST).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import ClassVar

from protocol.codes import ControllerCode
from protocol.controller_requests.base import InvalidRequest
from protocol.no_fields import NoFields
from protocol.remoting import Header, Scalar

__all__ = ["RebalancePlanQuery", "TrafficQuery"]


@dataclass(frozen=True, slots=True, kw_only=True)
class TrafficQuery(NoFields):
    """GET_BROKER_TRAFFIC: every group's traffic as the active controller heard it."""

    code: ClassVar[ControllerCode] = ControllerCode.GET_BROKER_TRAFFIC


@dataclass(frozen=True, slots=True, kw_only=True)
class RebalancePlanQuery:
    """GET_REBALANCE_PLAN: the moves that would even out the groups' traffic (changes
    nothing)."""

    code: ClassVar[ControllerCode] = ControllerCode.GET_REBALANCE_PLAN

    threshold: float | None = None
    """msg/s; None: the controller's configured one."""

    def encode(self) -> tuple[Header, bytes | None]:
        return ({} if self.threshold is None else {"threshold": self.threshold}), None

    @classmethod
    def parse(cls, header: Mapping[str, Scalar], body: bytes | None = None) -> RebalancePlanQuery:
        raw = header.get("threshold")
        if raw is None:
            return cls()
        if not isinstance(raw, int | float | str) or isinstance(raw, bool):
            raise InvalidRequest("threshold must be a number")
        try:
            threshold = float(raw)
        except ValueError:
            threshold = -1.0
        if not threshold >= 0:  # also NaN
            raise InvalidRequest(f"threshold must be a number >= 0, not {raw!r}")
        return cls(threshold=threshold)
