"""Queue offsets as the ``rmq`` source plans, checkpoints and limits them (no Spark, no I/O).

On the wire of Spark's checkpoint an offset is ``{"broker-a": {"0": 42, "1": 7}}``: for each broker
group and queue id, the next queue offset to read (ranges are end exclusive). Internally offsets
are a mapping :class:`client.routes.MessageQueue` -> int. :func:`to_json` always writes brokers
sorted by name and queues by number, so equal offsets serialise to equal JSON, which is how Spark
tells "no new data" from a new batch.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from client.routes import MessageQueue
from pipeline.errors import OptionError

EARLIEST = -2
LATEST = -1

Offsets = dict[MessageQueue, int]
#: "earliest", "latest", or queue -> offset (EARLIEST / LATEST allowed as values)
OffsetSpec = Literal["earliest", "latest"] | Offsets


@dataclass(frozen=True, slots=True)
class QueueBounds:
    """What a queue holds now: the first retained offset and the end of committed messages."""

    min_offset: int
    max_offset: int


def to_json(offsets: Mapping[MessageQueue, int]) -> dict[str, dict[str, int]]:
    """The canonical JSON-able form (brokers by name, queues by number)."""
    out: dict[str, dict[str, int]] = {}
    for mq in sorted(offsets):
        out.setdefault(mq.broker_name, {})[str(mq.queue_id)] = int(offsets[mq])
    return out


def from_json(doc: Any, what: str = "offset") -> Offsets:
    """Parse ``{"broker": {"queue": offset}}``; raises :class:`OptionError` naming the problem."""
    example = '{"broker-a": {"0": 42}}'
    if not isinstance(doc, dict):
        raise OptionError(f"{what} must be a JSON object like {example}, not {doc!r}")
    out: Offsets = {}
    for broker, queues in doc.items():
        if not isinstance(broker, str) or not broker:
            raise OptionError(f"{what}: broker group names must be non-empty strings")
        if not isinstance(queues, dict):
            raise OptionError(
                f"{what}: the value for broker group {broker!r} must be an object of queue id "
                f"to offset like {example}, not {queues!r}"
            )
        for queue, offset in queues.items():
            try:
                queue_id = int(queue)
            except (TypeError, ValueError):
                queue_id = -1
            if queue_id < 0 or str(queue_id) != str(queue).strip():
                raise OptionError(f"{what}: queue id {queue!r} of {broker!r} is not a number >= 0")
            if type(offset) is not int or offset < EARLIEST:
                raise OptionError(
                    f"{what}: offset of {broker}/{queue} must be an integer >= 0 "
                    f"(or -2 for earliest, -1 for latest), not {offset!r}"
                )
            out[MessageQueue(broker, queue_id)] = offset
    return out


def parse_spec(text: str | None, option: str, default: Literal["earliest", "latest"]) -> OffsetSpec:
    """An offsets option: ``earliest``, ``latest`` or a JSON object of queue offsets."""
    if text is None or not text.strip():
        return default
    word = text.strip().lower()
    if word in ("earliest", "latest"):
        return "earliest" if word == "earliest" else "latest"
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise OptionError(
            f"{option} must be 'earliest', 'latest' or a JSON object like "
            f'{{"broker-a": {{"0": 42}}}}; {text!r} is not valid JSON ({exc.msg} at '
            f"character {exc.pos})"
        ) from None
    return from_json(doc, option)


def resolve(
    spec: OffsetSpec,
    bounds: Mapping[MessageQueue, QueueBounds],
    *,
    option: str,
    default: Literal["earliest", "latest"],
    topic: str,
) -> Offsets:
    """Concrete offsets for every queue in ``bounds`` (queues a JSON spec leaves out get
    ``default``). A JSON spec naming a queue the topic does not have is an error."""
    if isinstance(spec, str):
        return {mq: _pick(spec, b) for mq, b in bounds.items()}
    unknown = sorted(mq for mq in spec if mq not in bounds)
    if unknown:
        names = ", ".join(f"{mq.broker_name}/{mq.queue_id}" for mq in unknown)
        raise OptionError(
            f"{option} names {names}, not a queue of topic {topic!r} "
            f"(its queues: {describe_queues(bounds)})"
        )
    out: Offsets = {}
    for mq, b in bounds.items():
        value = spec.get(mq)
        if value is None:
            out[mq] = _pick(default, b)
        elif value == EARLIEST:
            out[mq] = b.min_offset
        elif value == LATEST:
            out[mq] = b.max_offset
        else:
            out[mq] = value
    return out


def _pick(word: str, b: QueueBounds) -> int:
    return b.min_offset if word == "earliest" else b.max_offset


def describe_queues(queues: Iterable[MessageQueue]) -> str:
    """``broker-a/0..7, broker-b/0..3`` (or ``none``)."""
    by_broker: dict[str, list[int]] = {}
    for mq in sorted(queues):
        by_broker.setdefault(mq.broker_name, []).append(mq.queue_id)
    parts = []
    for broker, ids in by_broker.items():
        contiguous = ids == list(range(ids[0], ids[0] + len(ids)))
        span = f"{ids[0]}..{ids[-1]}" if contiguous and len(ids) > 1 else ",".join(map(str, ids))
        parts.append(f"{broker}/{span}")
    return ", ".join(parts) or "none"


def limit_rows(start: Mapping[MessageQueue, int], end: Offsets, max_rows: int) -> Offsets:
    """Cap ``end`` so that at most ``max_rows`` messages lie between ``start`` and it.

    The budget is shared in proportion to each queue's backlog (as Spark's Kafka source does
    with maxOffsetsPerTrigger); the rounding remainder goes to the largest fractions, so the
    result is deterministic and uses the whole budget.
    """
    if max_rows < 0:
        raise ValueError("max_rows must be >= 0")
    lags = {mq: max(0, e - start.get(mq, e)) for mq, e in end.items()}
    total = sum(lags.values())
    if total <= max_rows:
        return dict(end)
    shares: dict[MessageQueue, int] = {}
    fractions: list[tuple[float, MessageQueue]] = []
    for mq, lag in lags.items():
        exact = max_rows * lag / total
        shares[mq] = int(exact)
        fractions.append((exact - int(exact), mq))
    left = max_rows - sum(shares.values())
    # Largest fraction first; ties by queue so the choice never depends on dict order.
    for _, mq in sorted(fractions, key=lambda f: (-f[0], f[1]))[:left]:
        shares[mq] += 1
    out: Offsets = {}
    for mq, e in end.items():
        s = start.get(mq, e)
        out[mq] = e if e <= s else s + min(shares[mq], e - s)
    return out
