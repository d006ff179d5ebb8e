"""Our response codes as RocketMQ's: the codes below 1000 are RocketMQ's own numbers; ours
above map to the RocketMQ code a classic client acts on the same way (retry elsewhere, give up)."""

from __future__ import annotations

from typing import Final

from protocol.codes import ResponseCode as Ours
from protocol.rocketmq_remoting.codes import ResponseCode as Classic

__all__ = ["classic_code"]

_MAPPED: Final[dict[int, int]] = {
    Ours.DISK_FULL: Classic.SERVICE_NOT_AVAILABLE,
    Ours.NOT_MASTER: Classic.SERVICE_NOT_AVAILABLE,
    Ours.MASTER_FENCED: Classic.SERVICE_NOT_AVAILABLE,
    Ours.IN_SYNC_REPLICAS_NOT_ENOUGH: Classic.SERVICE_NOT_AVAILABLE,
    Ours.TOO_MANY_IN_FLIGHT: Classic.SYSTEM_BUSY,
    Ours.BAD_REQUEST: Classic.SYSTEM_ERROR,
    Ours.QUEUE_NOT_EXIST: Classic.SYSTEM_ERROR,
    Ours.MESSAGE_CORRUPT: Classic.SYSTEM_ERROR,
    Ours.MESSAGE_NOT_FOUND: Classic.QUERY_NOT_FOUND,
}


def classic_code(code: int) -> int:
    """The RocketMQ response code that says what our ``code`` says."""
    if code < 1000:
        return code
    return int(_MAPPED.get(code, Classic.SYSTEM_ERROR))
