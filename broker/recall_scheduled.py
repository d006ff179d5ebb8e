"""Recalling a scheduled message for any front: RECALL_MESSAGE's processor and the gRPC
endpoint's RecallMessage (in-process while this broker is the master) call
:func:`recall_scheduled`.

The write gate first, then the timer service's recall (:meth:`broker.timer.service.TimerService.recall`:
a scheduled message of that topic still pending gets a recall record and leaves the wheel); every
refusal is a :class:`~broker.timer.recall.RecallError` with the answer's code and remark. The
caller answers once the recall record is as durable as a send.
"""

from __future__ import annotations

import structlog

from broker.timer.recall import RecallError
from broker.timer.service import TimerService
from broker.write_gate import WriteGate, WriteRefused
from protocol.codes import ResponseCode
from storage.errors import DiskFullError, StoreError
from storage.store import PutResult

__all__ = ["recall_scheduled"]

log = structlog.get_logger(__name__)


def recall_scheduled(gate: WriteGate, timer: TimerService, topic: str, msg_id: str) -> PutResult:
    """Recall the scheduled message ``msg_id`` of ``topic``; raises :class:`RecallError`."""
    try:
        gate.check_writable()
        result = timer.recall(topic, msg_id)
    except WriteRefused as refused:
        raise RecallError(refused.code, refused.remark) from None
    except DiskFullError as exc:
        raise RecallError(ResponseCode.DISK_FULL, f"disk full: {exc}") from None
    except StoreError as exc:
        log.error("recall failed", topic=topic, msg_id=msg_id, error=str(exc))
        raise RecallError(ResponseCode.SYSTEM_ERROR, str(exc)) from None
    log.info("scheduled message recalled", topic=topic, msg_id=msg_id)
    return result
