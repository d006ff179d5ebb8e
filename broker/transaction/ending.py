"""Ending a transaction for any front: END_TRANSACTION's processor and the gRPC endpoint's
EndTransaction (in-process while this broker is the master) call :func:`end_transaction`.

It asks the write gate, resolves the transaction in the service, and turns what the service
found into the answer's decision: :class:`Ended` (what to answer once ``result`` is durable) or
:class:`EndRefused` (TRANSACTION_NOT_FOUND for an unknown transaction or another producer
group's, TRANSACTION_ALREADY_RESOLVED for the opposite of what resolved it, the write gate's
refusal, a store failure); nothing is stored when it is refused.
"""

from __future__ import annotations

from dataclasses import dataclass

import structlog

from broker.transaction.service import TransactionService
from broker.write_gate import WriteRefused
from protocol.broker_requests.transaction import EndTransaction
from protocol.codes import ResponseCode
from protocol.refusal import RequestRefused
from protocol.transaction import OpKind
from storage.errors import DiskFullError, StoreError
from storage.store import MessageNotFoundError, PutResult

__all__ = ["EndRefused", "Ended", "end_transaction"]

log = structlog.get_logger(__name__)


class EndRefused(RequestRefused):
    """A transaction end refused: ``code`` and ``remark`` go into the answer."""


@dataclass(frozen=True, slots=True)
class Ended:
    """A transaction ended (or left open): answered once ``result`` (None: nothing written) is
    as durable as a send."""

    state: str
    """COMMIT, ROLLBACK or OPEN."""
    already: bool
    """Resolved that way before: nothing was written."""
    result: PutResult | None


def end_transaction(service: TransactionService, ask: EndTransaction) -> Ended:
    """Commit, roll back or leave open the transaction ``ask`` names; raises
    :class:`EndRefused`."""
    group, txn_id, offset, kind = ask.group, ask.transaction_id, ask.offset, ask.resolution
    host = service.host
    try:
        host.gate.check_writable()
    except WriteRefused as refused:
        raise EndRefused(refused.code, refused.remark) from None
    try:
        outcome = service.end(group, txn_id, offset, kind, from_check=ask.from_check)
    except MessageNotFoundError as exc:
        raise EndRefused(
            ResponseCode.TRANSACTION_NOT_FOUND,
            f"transaction {txn_id!r}: its half message is gone ({exc})",
        ) from None
    except StoreError as exc:
        log.error("end transaction failed", transaction_id=txn_id, error=str(exc))
        code = (
            ResponseCode.DISK_FULL if isinstance(exc, DiskFullError) else ResponseCode.SYSTEM_ERROR
        )
        raise EndRefused(code, f"end transaction failed: {exc}") from None
    if ask.from_check:
        log.info(
            "transaction check answered",
            transaction_id=txn_id,
            producer_group=group,
            answer=kind.name if kind is not None else "UNKNOWN",
        )
    if not outcome.known:
        where = f" (it belongs to producer group {outcome.group})" if outcome.group else ""
        raise EndRefused(
            ResponseCode.TRANSACTION_NOT_FOUND,
            f"no transaction {txn_id!r} at offset {offset} in broker group "
            f"{host.cfg.broker_name} for producer group {group}{where}",
        )
    if outcome.already and kind is not None and outcome.resolution is not kind:
        done = outcome.resolution.name.lower() if outcome.resolution else "resolved"
        raise EndRefused(
            ResponseCode.TRANSACTION_ALREADY_RESOLVED,
            f"transaction {txn_id!r} was {_past(done)} already",
        )
    state = outcome.resolution.name if outcome.resolution is not None else "OPEN"
    return Ended(state, outcome.already, outcome.result)


def _past(outcome: str) -> str:
    return {
        OpKind.COMMIT.name.lower(): "committed",
        OpKind.ROLLBACK.name.lower(): "rolled back",
        OpKind.DISCARD.name.lower(): "discarded (never resolved)",
    }.get(outcome, outcome)
