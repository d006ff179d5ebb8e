"""Producer ids for idempotent producers (docs/idempotence.md, docs/protocol.md).

Request (header fields, no body; ``?`` may be left out)::

    CONTROLLER_GET_PRODUCER_ID 5180   producerId? (an id this producer had before, kept in
                                      its producer_id_file: taken up again at a new epoch),
                                      ownerToken? (bytes: with authentication on, the owner
                                      token the id was issued with; needed to take it up)

SUCCESS answers ``producerId`` and ``producerEpoch`` (:class:`ProducerIdAnswer`): a new id at
epoch 0, or the id asked for at an epoch above every one it had; with authentication on also
``producerToken`` and ``ownerToken`` (bytes, :mod:`protocol.producer_token`) for the user who
asked. The controllers issue both
through their Raft log, so no two producers get the same id and an epoch never repeats. An id
the controllers never issued is refused (CONTROLLER_INVALID_REQUEST).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import ClassVar

from protocol.codes import RequestCode
from protocol.fields import FieldError, opt_int_or_none, req_int
from protocol.idempotence import MAX_EPOCH, MAX_PRODUCER_ID
from protocol.producer_token import OWNER_FIELD, TOKEN_FIELD, token_of
from protocol.remoting import Header, Scalar

__all__ = ["GetProducerId", "ProducerIdAnswer"]


@dataclass(frozen=True, slots=True, kw_only=True)
class GetProducerId:
    """CONTROLLER_GET_PRODUCER_ID: a new producer id, or ``producer_id`` at a new epoch."""

    code: ClassVar[RequestCode] = RequestCode.CONTROLLER_GET_PRODUCER_ID

    producer_id: int | None = None
    owner_token: bytes | None = None

    def __post_init__(self) -> None:
        if self.producer_id is not None and not 0 <= self.producer_id <= MAX_PRODUCER_ID:
            raise FieldError(f"header field 'producerId' must be in 0..{MAX_PRODUCER_ID}")

    def encode(self) -> tuple[Header, bytes | None]:
        header: Header = {}
        if self.producer_id is not None:
            header["producerId"] = self.producer_id
        if self.owner_token is not None:
            header[OWNER_FIELD] = self.owner_token
        return header, None

    @classmethod
    def parse(cls, header: Mapping[str, Scalar], body: bytes | None = None) -> GetProducerId:
        return cls(
            producer_id=opt_int_or_none(header, "producerId"),
            owner_token=_token(header, OWNER_FIELD),
        )


def _token(header: Mapping[str, Scalar], name: str) -> bytes | None:
    try:
        return token_of(header, name)
    except ValueError as exc:
        raise FieldError(str(exc)) from None


@dataclass(frozen=True, slots=True, kw_only=True)
class ProducerIdAnswer:
    """CONTROLLER_GET_PRODUCER_ID's SUCCESS."""

    producer_id: int
    epoch: int
    token: bytes | None = None
    """The send token (authentication on): every sequenced send carries it."""
    owner_token: bytes | None = None
    """The owner token (authentication on): a take-up of the id sends it."""

    def __post_init__(self) -> None:
        if not 0 <= self.producer_id <= MAX_PRODUCER_ID or not 0 <= self.epoch <= MAX_EPOCH:
            raise FieldError("producerId or producerEpoch out of range")

    def encode(self) -> tuple[Header, bytes | None]:
        header: Header = {"producerId": self.producer_id, "producerEpoch": self.epoch}
        if self.token is not None:
            header[TOKEN_FIELD] = self.token
        if self.owner_token is not None:
            header[OWNER_FIELD] = self.owner_token
        return header, None

    @classmethod
    def parse(cls, header: Mapping[str, Scalar], body: bytes | None = None) -> ProducerIdAnswer:
        return cls(
            producer_id=req_int(header, "producerId"),
            epoch=req_int(header, "producerEpoch"),
            token=_token(header, TOKEN_FIELD),
            owner_token=_token(header, OWNER_FIELD),
        )
