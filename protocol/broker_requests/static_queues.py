"""FENCE_STATIC_QUEUE (5122, ours): a re-map asks the master of a static topic queue's group to
stop taking sends to it and to report where it ends, or (``release``) to drop that fence
(docs/static-topics.md, "Re-mapping"). Pure: no sockets, no clock.

Request header: ``topic``, ``queueId``, and either ``release`` = true, or ``masterEpoch`` (the
epoch the controller saw the broker master at) and ``fenceMillis``? (how long the fence holds
without a committed seal: 1..600,000, 30,000 when left out). SUCCESS of a fence answers
``maxOffset`` (the queue's end, which no later send can move) and ``masterEpoch``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import ClassVar, Final

from protocol.codes import RequestCode
from protocol.fields import FieldError, opt_int, req_int, req_str
from protocol.remoting import Header, Scalar

__all__ = ["DEFAULT_FENCE_MS", "MAX_FENCE_MS", "FenceStaticQueue", "QueueFenced"]

MAX_FENCE_MS: Final = 600_000
DEFAULT_FENCE_MS: Final = 30_000


@dataclass(frozen=True, slots=True, kw_only=True)
class FenceStaticQueue:
    """FENCE_STATIC_QUEUE: fence queue ``queue_id`` of ``topic`` for ``fence_ms`` if this broker
    is its master at ``master_epoch``; with ``release``, drop the fence instead (the other
    fields are then not sent)."""

    code: ClassVar[RequestCode] = RequestCode.FENCE_STATIC_QUEUE

    topic: str
    queue_id: int
    master_epoch: int = 0
    fence_ms: int = DEFAULT_FENCE_MS
    release: bool = False

    def encode(self) -> tuple[Header, bytes | None]:
        header: Header = {"topic": self.topic, "queueId": self.queue_id}
        if self.release:
            header["release"] = True
        else:
            header["masterEpoch"] = self.master_epoch
            header["fenceMillis"] = self.fence_ms
        return header, None

    @classmethod
    def parse(cls, header: Mapping[str, Scalar], body: bytes | None = None) -> FenceStaticQueue:
        topic = req_str(header, "topic")
        queue_id = req_int(header, "queueId")
        if header.get("release") is True:
            return cls(topic=topic, queue_id=queue_id, release=True)
        epoch = req_int(header, "masterEpoch")
        fence_ms = opt_int(header, "fenceMillis", DEFAULT_FENCE_MS)
        if not 0 < fence_ms <= MAX_FENCE_MS:
            raise FieldError(f"fenceMillis must be in 1..{MAX_FENCE_MS}")
        return cls(topic=topic, queue_id=queue_id, master_epoch=epoch, fence_ms=fence_ms)


@dataclass(frozen=True, slots=True, kw_only=True)
class QueueFenced:
    """A fence's SUCCESS: the queue's max offset, acknowledged by every SyncStateSet member,
    and the epoch it was fenced at."""

    max_offset: int
    master_epoch: int

    def encode(self) -> tuple[Header, bytes | None]:
        return {"maxOffset": self.max_offset, "masterEpoch": self.master_epoch}, None

    @classmethod
    def parse(cls, header: Mapping[str, Scalar], body: bytes | None = None) -> QueueFenced:
        return cls(
            max_offset=req_int(header, "maxOffset"), master_epoch=req_int(header, "masterEpoch")
        )
