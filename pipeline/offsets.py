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


@dataclass(frozen=True, slots=True)
class ByTimestamp:
    """A position by store timestamp (ms): ``every`` queue, or one timestamp ``per_queue``.
    Each queue's offset is its first message stored at or after the timestamp (the queue's end
    when there is none), as the broker's SEARCH_OFFSET_BY_TIMESTAMP answers."""

    every: int | None = None
    per_queue: Offsets | None = None


@dataclass(frozen=True, slots=True)
class PerTopic:
    """A JSON position when several topics are read (``topics``, ``topicPattern``):
    ``{"orders": {"broker-a": {"0": 42}}}``, offsets or (``timestamps``) store timestamps."""

    by_topic: dict[str, Offsets]
    timestamps: bool = False

    def for_topic(self, topic: str, option: str) -> OffsetSpec | ByTimestamp:
        """The position of one topic; every topic read must be named."""
        offsets = self.by_topic.get(topic)
        if offsets is None:
            raise OptionError(
                f"{option} must name every topic read; missing: {topic!r} "
                f"(it names {', '.join(sorted(self.by_topic)) or 'none'})"
            )
        return ByTimestamp(per_queue=offsets) if self.timestamps else offsets

    def check_topics(self, topics: Iterable[str], option: str) -> None:
        unknown = sorted(set(self.by_topic) - set(topics))
        if unknown:
            raise OptionError(f"{option} names {', '.join(unknown)}, not a topic this query reads")


#: a starting or ending position: an offsets spec, timestamps, or per topic
PositionSpec = OffsetSpec | ByTimestamp | PerTopic


def per_topic(doc: Any, what: str, *, timestamps: bool = False) -> PerTopic:
    """``{"topic": {"broker": {"queue": n}}}`` (several topics read)."""
    if not isinstance(doc, dict) or not all(isinstance(t, str) and t for t in doc):
        raise OptionError(
            f'{what} must be a JSON object of topic to offsets like {{"orders": {{"broker-a": '
            f'{{"0": 42}}}}}} when several topics are read, not {doc!r}'
        )
    by_topic: dict[str, Offsets] = {}
    for t, v in doc.items():
        where = f"{what} of topic {t!r}"
        by_topic[t] = (
            from_json(v, where, floor=0, value="timestamp") if timestamps else from_json(v, where)
        )
    return PerTopic(by_topic, timestamps)


#: offsets of several topics: topic -> queue -> offset
TopicOffsets = dict[str, Offsets]
_SEP = "\x00"


def flatten(offsets: Mapping[str, Mapping[MessageQueue, int]]) -> Offsets:
    """Several topics' offsets as one mapping, so the budget functions (:func:`limit_rows`,
    :func:`split_ranges`) share across topics: the key's broker name carries the topic (a NUL,
    which no topic or broker name holds, separates them)."""
    return {
        MessageQueue(f"{t}{_SEP}{mq.broker_name}", mq.queue_id): o
        for t, offs in offsets.items()
        for mq, o in offs.items()
    }


def unflatten_key(key: MessageQueue) -> tuple[str, MessageQueue]:
    topic, _, broker = key.broker_name.partition(_SEP)
    return topic, MessageQueue(broker, key.queue_id)


def unflatten(flat: Mapping[MessageQueue, int]) -> TopicOffsets:
    out: TopicOffsets = {}
    for key, o in flat.items():
        topic, mq = unflatten_key(key)
        out.setdefault(topic, {})[mq] = o
    return out


def to_json_topics(offsets: Mapping[str, Mapping[MessageQueue, int]]) -> dict[str, Any]:
    """The canonical JSON-able form with topics (topics by name)."""
    return {t: to_json(offsets[t]) for t in sorted(offsets)}


def from_json_topics(doc: Any, what: str) -> dict[str, Offsets]:
    """Parse :func:`to_json_topics`' form."""
    return per_topic(doc, what).by_topic


def to_json(offsets: Mapping[MessageQueue, int]) -> dict[str, dict[str, int]]:
    """The canonical JSON-able form (brokers by name, queues by number)."""
    out: dict[str, dict[str, int]] = {}
    for mq in sorted(offsets):
        out.setdefault(mq.broker_name, {})[str(mq.queue_id)] = int(offsets[mq])
    return out


def from_json(
    doc: Any, what: str = "offset", *, floor: int = EARLIEST, value: str = "offset"
) -> Offsets:
    """Parse ``{"broker": {"queue": offset}}``; raises :class:`OptionError` naming the problem.
    Values below ``floor`` are refused (offsets allow -2 and -1, timestamps start at 0)."""
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
            if type(offset) is not int or offset < floor:
                raise OptionError(
                    f"{what}: {value} of {broker}/{queue} must be an integer >= 0"
                    f"{' (or -2 for earliest, -1 for latest)' if floor < 0 else ''}, "
                    f"not {offset!r}"
                )
            out[MessageQueue(broker, queue_id)] = offset
    return out


def _json(text: str, option: str, expected: str) -> Any:
    """``text`` read as JSON; OptionError saying what ``option`` takes when it is not JSON."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise OptionError(
            f"{option} must be {expected}; {text!r} is not valid JSON ({exc.msg} at character "
            f"{exc.pos})"
        ) from None


def parse_timestamps(text: str, option: str, *, multi: bool = False) -> Offsets | PerTopic:
    """``{"broker-a": {"0": 1700000000000}}``: a store timestamp (ms, >= 0) per queue (with
    ``multi``: per topic, then per queue)."""
    doc = _json(text, option, 'a JSON object like {"broker-a": {"0": 1700000000000}}')
    if multi:
        return per_topic(doc, option, timestamps=True)
    return from_json(doc, option, floor=0, value="timestamp")


def parse_spec(
    text: str | None,
    option: str,
    default: Literal["earliest", "latest"],
    *,
    multi: bool = False,
) -> OffsetSpec | PerTopic:
    """An offsets option: ``earliest``, ``latest`` or a JSON object of queue offsets (with
    ``multi``: of topic to queue offsets)."""
    if text is None or not text.strip():
        return default
    word = text.strip().lower()
    if word in ("earliest", "latest"):
        return "earliest" if word == "earliest" else "latest"
    doc = _json(
        text, option, """'earliest', 'latest' or a JSON object like {"broker-a": {"0": 42}}"""
    )
    if multi:
        return per_topic(doc, option)
    return from_json(doc, option)


def resolve(
    spec: OffsetSpec,
    bounds: Mapping[MessageQueue, QueueBounds],
    *,
    option: str,
    default: Literal["earliest", "latest"],
    topic: str,
) -> Offsets:
    """Concrete offsets for every queue in ``bounds``. A JSON spec must name every queue of the
    topic (as the Kafka source requires every partition) and no other: either mistake is an
    :class:`OptionError` listing the queues concerned. ``default`` fills the queues of groups
    that did not answer (not in ``bounds``) only through the caller."""
    if isinstance(spec, str):
        return {mq: _pick(spec, b) for mq, b in bounds.items()}
    check_complete(spec, bounds, option=option, topic=topic)
    out: Offsets = {}
    for mq, b in bounds.items():
        value = spec[mq]
        if value == EARLIEST:
            out[mq] = b.min_offset
        elif value == LATEST:
            out[mq] = b.max_offset
        else:
            out[mq] = value
    return out


def check_complete(
    spec: Mapping[MessageQueue, int],
    queues: Iterable[MessageQueue],
    *,
    option: str,
    topic: str,
    values: str = "use -2 for earliest, -1 for latest",
) -> None:
    """A per-queue option must name exactly the topic's queues: say which are missing or
    unknown."""
    have = set(queues)
    unknown = sorted(mq for mq in spec if mq not in have)
    if unknown:
        raise OptionError(
            f"{option} names {_names(unknown)}, not a queue of topic {topic!r} "
            f"(its queues: {describe_queues(have)})"
        )
    missing = sorted(mq for mq in have if mq not in spec)
    if missing:
        raise OptionError(
            f"{option} must name every queue of topic {topic!r}; missing: {_names(missing)} "
            f"({values})"
        )


def _names(queues: Iterable[MessageQueue]) -> str:
    return ", ".join(f"{mq.broker_name}/{mq.queue_id}" for mq in queues)


def split_ranges(
    ranges: list[tuple[MessageQueue, int, int]],
    min_partitions: int | None,
    max_records: int | None = None,
) -> list[tuple[MessageQueue, int, int]]:
    """Split ``(queue, start, end)`` ranges so there are about ``min_partitions`` of them (the
    Kafka source's minPartitions): when there are fewer, each range is cut into a number of
    parts proportional to its size (at least one, at most one per message), in pieces whose sizes
    differ by at most one. Then (``max_records``, the Kafka source's maxRecordsPerPartition) a
    piece of more than ``max_records`` messages is cut into the fewest equal pieces of at most
    that many. The pieces of a range are contiguous and cover it exactly."""
    ranges = [r for r in ranges if r[1] < r[2]]
    if min_partitions is not None and len(ranges) < min_partitions:
        total = sum(hi - lo for _, lo, hi in ranges)
        ranges = [
            piece
            for mq, lo, hi in ranges
            for piece in _cut(
                mq, lo, hi, max(1, min(hi - lo, round((hi - lo) / total * min_partitions)))
            )
        ]
    if max_records is not None:
        ranges = [
            piece
            for mq, lo, hi in ranges
            for piece in _cut(mq, lo, hi, -(-(hi - lo) // max_records))
        ]
    return ranges


def _cut(mq: MessageQueue, lo: int, hi: int, parts: int) -> list[tuple[MessageQueue, int, int]]:
    """``[lo, hi)`` in ``parts`` contiguous pieces whose sizes differ by at most one."""
    step, extra = divmod(hi - lo, parts)
    out: list[tuple[MessageQueue, int, int]] = []
    at = lo
    for i in range(parts):
        nxt = at + step + (1 if i < extra else 0)
        out.append((mq, at, nxt))
        at = nxt
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
