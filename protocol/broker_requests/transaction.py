"""END_TRANSACTION: a transactional producer's (or its check-back's) commit or rollback of a
half message (docs/transactions.md). Pure: no sockets, no clock.

Request header: ``producerGroup``, ``transactionId``, ``commitLogOffset``? (the half message's,
-1 when unknown), ``commitOrRollback`` (:data:`protocol.transaction.COMMIT_TYPE`,
``ROLLBACK_TYPE`` or ``NOT_TYPE``: unknown), ``fromTransactionCheck``? (true: the answer to a
check-back). SUCCESS answers ``state`` (COMMIT, ROLLBACK or OPEN) and ``already`` (it was
resolved before).

CHECK_TRANSACTION_STATE (39), oneway from a master to a producer of the group
(:class:`CheckTransactionState`): header ``producerGroup``, ``transactionId``,
``commitLogOffset`` (the half message's), ``brokerName``; body the half message's record
(:mod:`protocol.message`). The producer answers with END_TRANSACTION ``fromTransactionCheck``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import ClassVar

from protocol.codes import RequestCode
from protocol.fields import FieldError, opt_int, opt_str, req_int, req_str
from protocol.remoting import Header, Scalar
from protocol.transaction import OpKind, resolution_of

__all__ = ["CheckTransactionState", "EndTransaction", "TransactionEnded"]


@dataclass(frozen=True, slots=True, kw_only=True)
class EndTransaction:
    """END_TRANSACTION: resolve transaction ``transaction_id`` of ``group`` (its half message
    at ``offset``) with ``commit_or_rollback``."""

    code: ClassVar[RequestCode] = RequestCode.END_TRANSACTION

    group: str
    transaction_id: str
    offset: int = -1
    commit_or_rollback: int
    from_check: bool = False

    @property
    def resolution(self) -> OpKind | None:
        """COMMIT, ROLLBACK, or None (unknown: leave it open)."""
        return resolution_of(self.commit_or_rollback)

    def encode(self) -> tuple[Header, bytes | None]:
        header: Header = {
            "producerGroup": self.group,
            "transactionId": self.transaction_id,
            "commitLogOffset": self.offset,
            "commitOrRollback": self.commit_or_rollback,
        }
        if self.from_check:
            header["fromTransactionCheck"] = True
        return header, None

    @classmethod
    def parse(cls, header: Mapping[str, Scalar], body: bytes | None = None) -> EndTransaction:
        group = req_str(header, "producerGroup")
        txn_id = req_str(header, "transactionId")
        offset = opt_int(header, "commitLogOffset", -1)
        commit_or_rollback = req_int(header, "commitOrRollback")
        try:
            resolution_of(commit_or_rollback)
        except ValueError as exc:
            raise FieldError(str(exc)) from None
        return cls(
            group=group,
            transaction_id=txn_id,
            offset=offset,
            commit_or_rollback=commit_or_rollback,
            from_check=header.get("fromTransactionCheck") is True,
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class TransactionEnded:
    """END_TRANSACTION's SUCCESS: the transaction's state now (COMMIT, ROLLBACK or OPEN) and
    whether it was resolved before this request."""

    state: str
    already: bool

    def encode(self) -> tuple[Header, bytes | None]:
        return {"state": self.state, "already": self.already}, None

    @classmethod
    def parse(cls, header: Mapping[str, Scalar], body: bytes | None = None) -> TransactionEnded:
        already = header.get("already")
        if not isinstance(already, bool):
            raise FieldError("header field 'already' must be a boolean")
        return cls(state=req_str(header, "state"), already=already)


@dataclass(frozen=True, slots=True, kw_only=True)
class CheckTransactionState:
    """CHECK_TRANSACTION_STATE: is transaction ``transaction_id`` of ``group``, whose half
    message is ``half`` (its record's bytes) at CommitLog ``offset`` of ``broker_name``, to be
    committed or rolled back?"""

    code: ClassVar[RequestCode] = RequestCode.CHECK_TRANSACTION_STATE

    group: str
    transaction_id: str = ""
    offset: int
    broker_name: str = ""
    half: bytes

    def encode(self) -> tuple[Header, bytes | None]:
        header: Header = {
            "producerGroup": self.group,
            "transactionId": self.transaction_id,
            "commitLogOffset": self.offset,
            "brokerName": self.broker_name,
        }
        return header, self.half

    @classmethod
    def parse(
        cls, header: Mapping[str, Scalar], body: bytes | None = None
    ) -> CheckTransactionState:
        if not body:
            raise FieldError("a check-back carries its half message")
        return cls(
            group=req_str(header, "producerGroup"),
            transaction_id=opt_str(header, "transactionId"),
            offset=req_int(header, "commitLogOffset"),
            broker_name=opt_str(header, "brokerName"),
            half=body,
        )
