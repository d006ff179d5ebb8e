"""Acks and changes of invisible time for any front: ACK_MESSAGE, BATCH_ACK_MESSAGE and
CHANGE_MESSAGE_INVISIBLETIME's processor (:mod:`broker.processors.pop`) and the gRPC endpoint's
AckMessage and ChangeInvisibleDuration (in-process while this broker is the master) call these.

Each asks the write gate, decodes the receipt handle (it must be the group's), and calls the POP
service; a refusal is a :class:`HandleRefused` with the answer's code and remark (a bad handle
RECEIPT_HANDLE_INVALID, one no longer in flight RECEIPT_HANDLE_EXPIRED), and nothing is written
then. The caller answers once the returned append is as durable as a send.
"""

from __future__ import annotations

from dataclasses import dataclass

from broker.pop.inflight import PopRefused, Refusal
from broker.pop.service import PopService
from broker.write_gate import WriteRefused
from protocol.codes import ResponseCode
from protocol.pop import HandleError, ReceiptHandle
from protocol.refusal import RequestRefused
from storage.errors import StoreError
from storage.store import PutResult

__all__ = ["BatchAcked", "HandleRefused", "ack_batch", "ack_one", "change_invisible"]


class HandleRefused(RequestRefused):
    """An ack or change refused: ``code`` and ``remark`` go into the answer."""


@dataclass(frozen=True, slots=True)
class BatchAcked:
    """A batch ack's outcome: one code per handle, in order (SUCCESS: acked, or acked
    already), why the others were refused (``#<index>: <reason>``, ``; ``-joined), and the
    one ack record to await (None: nothing written)."""

    codes: tuple[int, ...]
    remark: str
    result: PutResult | None


def _writable(service: PopService) -> None:
    try:
        service.host.gate.check_writable()
    except WriteRefused as refused:
        raise HandleRefused(refused.code, refused.remark) from None


def _handle(service: PopService, group: str, text: str) -> ReceiptHandle:
    _writable(service)
    try:
        handle = service.decode(text)
    except HandleError as exc:
        raise HandleRefused(ResponseCode.RECEIPT_HANDLE_INVALID, str(exc)) from None
    if handle.group != group:
        raise HandleRefused(
            ResponseCode.RECEIPT_HANDLE_INVALID,
            f"receipt handle belongs to consumer group {handle.group}, not {group}",
        )
    return handle


def refusal_code(reason: Refusal) -> int:
    if reason is Refusal.OTHER_GROUP:
        return ResponseCode.RECEIPT_HANDLE_INVALID
    return ResponseCode.RECEIPT_HANDLE_EXPIRED


def ack_one(service: PopService, group: str, text: str) -> PutResult | None:
    """Ack the delivery ``text`` names; None when it was acked already."""
    handle = _handle(service, group, text)
    try:
        return service.ack(handle, group, service.host.now_ms())
    except PopRefused as exc:
        raise HandleRefused(refusal_code(exc.reason), str(exc)) from None
    except StoreError as exc:
        raise HandleRefused(ResponseCode.SYSTEM_ERROR, f"ack not recorded: {exc}") from None


def ack_batch(service: PopService, group: str, texts: tuple[str, ...] | list[str]) -> BatchAcked:
    """Ack the deliveries ``texts`` name with one ack record; each handle refused on its own
    (a bad handle, another group's, one no longer in flight)."""
    _writable(service)
    codes: list[int] = [ResponseCode.SUCCESS] * len(texts)
    remarks: list[str] = []
    handles: list[ReceiptHandle] = []
    where: list[int] = []
    for i, text in enumerate(texts):
        try:
            handle = service.decode(text)
        except HandleError as exc:
            codes[i] = ResponseCode.RECEIPT_HANDLE_INVALID
            remarks.append(f"#{i}: {exc}")
            continue
        if handle.group != group:
            codes[i] = ResponseCode.RECEIPT_HANDLE_INVALID
            remarks.append(f"#{i}: receipt handle belongs to consumer group {handle.group}")
            continue
        handles.append(handle)
        where.append(i)
    try:
        outcome, result = service.ack_many(handles, group, service.host.now_ms())
    except StoreError as exc:
        raise HandleRefused(ResponseCode.SYSTEM_ERROR, f"acks not recorded: {exc}") from None
    for i, refused in zip(where, outcome, strict=True):
        if refused is not None:
            codes[i] = refusal_code(refused.reason)
            remarks.append(f"#{i}: {refused}")
    return BatchAcked(tuple(codes), "; ".join(remarks)[:4096], result)


def change_invisible(
    service: PopService, group: str, text: str, invisible_ms: int
) -> tuple[str, PutResult]:
    """Hide the delivery ``text`` names for ``invisible_ms`` from now: its new handle and the
    append to await."""
    handle = _handle(service, group, text)
    try:
        return service.change(handle, group, invisible_ms, service.host.now_ms())
    except PopRefused as exc:
        raise HandleRefused(refusal_code(exc.reason), str(exc)) from None
    except StoreError as exc:
        raise HandleRefused(ResponseCode.SYSTEM_ERROR, f"change not recorded: {exc}") from None
