"""Message traces on the client side: finding a message's trace records.

:func:`query_trace` finds the trace messages whose keys hold a message id, through the key
index of the trace topic (every broker group of it), and returns the records about that id in
time order: what ``rmqctl queryMsgTraceById`` prints. The records' format is
:mod:`protocol.trace`.
"""

from __future__ import annotations

from dataclasses import dataclass

from client.lookup import Lookup
from protocol.trace import TRACE_TOPIC, TraceFormatError, TraceRecord, decode_records

__all__ = ["TraceStep", "query_trace", "timeline"]


@dataclass(frozen=True, slots=True)
class TraceStep:
    """One record of a message's timeline and the trace message it was found in."""

    record: TraceRecord
    stored_at: str
    """The broker that holds the trace message (host:port)."""


def _order(step: TraceStep) -> int:
    # Stable: records of one time stay in the order they were written (a writer writes them
    # in the order it saw the events; the lookup returns trace messages oldest first)
    return step.record.timestamp


def timeline(steps: list[TraceStep]) -> list[TraceStep]:
    """``steps`` in time order (at one millisecond in the order they were written), each
    record once (the same record found in two trace messages is shown once)."""
    seen: set[TraceRecord] = set()
    out: list[TraceStep] = []
    for step in sorted(steps, key=_order):
        if step.record in seen:
            continue
        seen.add(step.record)
        out.append(step)
    return out


async def query_trace(
    lookup: Lookup,
    msg_id: str,
    *,
    topic: str = TRACE_TOPIC,
    errors: list[str] | None = None,
) -> list[TraceStep]:
    """The trace records of ``msg_id`` in time order (empty: none found). Raises
    :class:`~client.errors.ClientError` when the trace topic is unknown or no broker group
    could answer; a trace message that is not in the trace format is skipped and said in
    ``errors``."""
    found = await lookup.by_key(topic, msg_id, max_num=1024, errors=errors)
    steps: list[TraceStep] = []
    for m in found:
        try:
            records = decode_records(m.record.body)
        except TraceFormatError as exc:
            if errors is not None:
                errors.append(f"trace message {m.msg_id}: {exc}")
            continue
        steps += [TraceStep(r, m.address) for r in records if r.msg_id == msg_id]
    return timeline(steps)
