"""Transactional messages: the system topics, message properties and op records (pure codecs).

A half message is stored under :data:`HALF_TOPIC` (queue 0) with its real topic and queue in
properties; consumers never read it. Every decision about a half is an op record of
:data:`OP_TOPIC` (queue 0) whose body :func:`encode_op` writes: commit, rollback, a check-back
sent, a discard after too many checks. Both topics are CommitLog records like any message, so
slaves hold them and a new master rebuilds the open transactions (docs/transactions.md).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Final

import msgpack

__all__ = [
    "COMMIT_TYPE",
    "HALF_TOPIC",
    "NOT_TYPE",
    "OP_TOPIC",
    "PROP_HALF_OFFSET",
    "PROP_PRODUCER_GROUP",
    "PROP_TRANSACTION_ID",
    "PROP_TRANSACTION_PREPARED",
    "ROLLBACK_TYPE",
    "Op",
    "OpKind",
    "OpRecordError",
    "decode_op",
    "encode_op",
    "half_properties",
    "is_transactional",
    "real_properties",
    "resolution_of",
]

HALF_TOPIC: Final = "RMQ_SYS_TRANS_HALF_TOPIC"
OP_TOPIC: Final = "RMQ_SYS_TRANS_OP_HALF_TOPIC"

PROP_TRANSACTION_PREPARED: Final = "TRAN_MSG"
"""``"true"`` on a send: store it as a half message."""
PROP_PRODUCER_GROUP: Final = "PGROUP"
"""The producer group whose members are asked about an unresolved half."""
PROP_TRANSACTION_ID: Final = "__transactionId__"
"""The producer's id of the transaction (any string up to 128 characters)."""
PROP_HALF_OFFSET: Final = "TRAN_HALF_OFFSET"
"""On a committed message: the CommitLog offset of its half (set by the broker)."""
PROP_REAL_TOPIC: Final = "REAL_TOPIC"
PROP_REAL_QUEUE_ID: Final = "REAL_QID"

MAX_TRANSACTION_ID_CHARS: Final = 128
MAX_GROUP_CHARS: Final = 255

# END_TRANSACTION's commitOrRollback (RocketMQ's MessageSysFlag values).
NOT_TYPE: Final = 0
COMMIT_TYPE: Final = 8
ROLLBACK_TYPE: Final = 12


class OpKind(enum.Enum):
    COMMIT = "C"
    ROLLBACK = "R"
    CHECK = "K"
    """A check-back was due: sent to a live producer of the group, or none was connected."""
    DISCARD = "D"
    """Checked the maximum number of times without an answer: given up."""


@dataclass(frozen=True, slots=True)
class Op:
    kind: OpKind
    half_offset: int
    time_ms: int
    """The master's clock when it wrote the record (a check's time schedules the next)."""


class OpRecordError(ValueError):
    """An op record body that is not one."""


def encode_op(op: Op) -> bytes:
    out: bytes = msgpack.packb([op.kind.value, op.half_offset, op.time_ms])
    return out


def decode_op(body: bytes) -> Op:
    try:
        obj = msgpack.unpackb(body, raw=False)
    except Exception:
        raise OpRecordError("op record is not msgpack") from None
    if not isinstance(obj, list) or len(obj) != 3:
        raise OpRecordError("op record must be [kind, half offset, time]")
    kind, offset, at = obj
    try:
        op_kind = OpKind(kind)
    except ValueError:
        raise OpRecordError(f"unknown op kind {kind!r}") from None
    if type(offset) is not int or offset < 0 or type(at) is not int:
        raise OpRecordError("op record offset and time must be integers")
    return Op(op_kind, offset, at)


def is_transactional(properties: dict[str, str]) -> bool:
    return properties.get(PROP_TRANSACTION_PREPARED) == "true"


def half_properties(properties: dict[str, str], topic: str, queue_id: int) -> dict[str, str]:
    """A transactional send's properties as its half record carries them; raises
    :class:`ValueError` when the producer group or transaction id is missing or too long."""
    group = properties.get(PROP_PRODUCER_GROUP, "")
    txn_id = properties.get(PROP_TRANSACTION_ID, "")
    if not group or len(group) > MAX_GROUP_CHARS:
        raise ValueError(f"a transactional message needs {PROP_PRODUCER_GROUP} (1..255 chars)")
    if not txn_id or len(txn_id) > MAX_TRANSACTION_ID_CHARS:
        raise ValueError(
            f"a transactional message needs {PROP_TRANSACTION_ID} "
            f"(1..{MAX_TRANSACTION_ID_CHARS} chars)"
        )
    return {**properties, PROP_REAL_TOPIC: topic, PROP_REAL_QUEUE_ID: str(queue_id)}


def real_properties(half: dict[str, str], half_offset: int) -> tuple[str, int, dict[str, str]]:
    """The real topic, queue and properties of a half's committed copy: it names the half's
    offset and is no longer a half (no ``TRAN_MSG``, so forwarding it with its properties sends
    an ordinary message); raises :class:`ValueError` for a half record without its real
    topic."""
    topic = half.get(PROP_REAL_TOPIC, "")
    try:
        queue_id = int(half.get(PROP_REAL_QUEUE_ID, ""))
    except ValueError:
        raise ValueError("half record has no real queue id") from None
    if not topic:
        raise ValueError("half record has no real topic")
    dropped = (PROP_REAL_TOPIC, PROP_REAL_QUEUE_ID, PROP_TRANSACTION_PREPARED)
    props = {k: v for k, v in half.items() if k not in dropped}
    props[PROP_HALF_OFFSET] = str(half_offset)
    return topic, queue_id, props


def resolution_of(commit_or_rollback: int) -> OpKind | None:
    """END_TRANSACTION's ``commitOrRollback``: COMMIT, ROLLBACK, or None for "unknown" (0);
    raises :class:`ValueError` for any other value."""
    if commit_or_rollback == COMMIT_TYPE:
        return OpKind.COMMIT
    if commit_or_rollback == ROLLBACK_TYPE:
        return OpKind.ROLLBACK
    if commit_or_rollback == NOT_TYPE:
        return None
    raise ValueError(
        f"commitOrRollback must be {COMMIT_TYPE} (commit), {ROLLBACK_TYPE} (rollback) or "
        f"{NOT_TYPE} (unknown), not {commit_or_rollback}"
    )
