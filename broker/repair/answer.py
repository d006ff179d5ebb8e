"""REPAIR_RECORD's processor: another replica of the group asks for the CommitLog bytes at an
offset (``protocol.broker_requests.repair``). Answered only from this replica's own copy, when it
is whole records that pass their CRC, and when this replica's epoch entry at the offset is the
asker's epoch and covers the whole range (then the bytes are the ones that epoch's master wrote).

SKIP_CORRUPT_MESSAGE's too: an operator gives up a message this replica cannot read
(``StoreRepair.skip_corrupt``); one it reads intact is not skipped (RECORD_READABLE).
"""

from __future__ import annotations

from collections.abc import Callable

from broker.ha.service import HAService
from protocol.broker_requests.repair import (
    RepairedRecord,
    RepairRecord,
    SkipCorruptMessage,
    intact_records,
)
from protocol.codes import RequestCode, ResponseCode
from protocol.fields import FieldError
from protocol.remoting import Frame, response
from remoting.server import Connection, RemotingServer, error_response
from storage.errors import StoreError
from storage.store_repair import RecordReadable, StoreRepair

__all__ = ["RepairProcessor"]


class RepairProcessor:
    def __init__(self, repairs: StoreRepair, ha: Callable[[], HAService | None]) -> None:
        self._repairs = repairs
        self._ha = ha

    def register(self, server: RemotingServer) -> None:
        server.register(RequestCode.REPAIR_RECORD, self.answer)
        server.register(RequestCode.SKIP_CORRUPT_MESSAGE, self.skip)

    def skip(self, conn: Connection, req: Frame) -> Frame:
        try:
            ask = SkipCorruptMessage.parse(req.header, req.body)
        except FieldError as exc:
            return error_response(req, ResponseCode.BAD_REQUEST, str(exc))
        try:
            physical = self._repairs.skip_corrupt(ask.topic, ask.queue_id, ask.queue_offset)
        except RecordReadable as exc:
            return error_response(req, ResponseCode.RECORD_READABLE, str(exc))
        except StoreError as exc:
            return error_response(req, ResponseCode.QUEUE_NOT_EXIST, str(exc))
        return response(req, ResponseCode.SUCCESS, {"physicalOffset": physical})

    def answer(self, conn: Connection, req: Frame) -> Frame:
        try:
            ask = RepairRecord.parse(req.header, req.body)
        except FieldError as exc:
            return error_response(req, ResponseCode.BAD_REQUEST, str(exc))
        ha = self._ha()
        offset, end = ask.offset, ask.offset + ask.size
        if ha is None:
            return error_response(
                req, ResponseCode.EPOCH_NOT_COVERING, "this broker runs without controllers"
            )
        span = ha.epoch_at(offset)
        if span is None:
            return error_response(
                req, ResponseCode.EPOCH_NOT_COVERING, f"no epoch entry here holds offset {offset}"
            )
        if span.epoch != ask.epoch or end > span.end_offset:
            return error_response(
                req,
                ResponseCode.EPOCH_NOT_COVERING,
                f"offsets {offset}..{end} are not within epoch {ask.epoch} here (epoch "
                f"{span.epoch} holds {span.start_offset}..{span.end_offset})",
            )
        try:
            raw = self._repairs.record_bytes(offset, ask.size)
        except StoreError as exc:
            return error_response(req, ResponseCode.RECORD_NOT_INTACT, str(exc))
        problem = intact_records(raw, offset)
        if problem is not None:
            return error_response(
                req,
                ResponseCode.RECORD_NOT_INTACT,
                f"this replica's copy is damaged too: {problem}",
            )
        found = RepairedRecord(
            epoch=span.epoch, epoch_start=span.start_offset, epoch_end=span.end_offset, raw=raw
        )
        return response(req, ResponseCode.SUCCESS, *found.encode())
