"""protocol.consume_stats: the lag arithmetic and the GET_CONSUME_STATS /
GET_CONSUMER_CONNECTION_LIST bodies (round trips, malformed bodies refused)."""

from __future__ import annotations

import msgpack
import pytest

from protocol.consume_stats import (
    ConsumerConnection,
    ConsumeStats,
    QueueStats,
    StatsError,
    decode_connections,
    encode_connections,
    queue_lag,
)


@pytest.mark.parametrize(
    ("max_offset", "committed", "min_offset", "lag"),
    [
        (100, 100, 0, 0),  # caught up
        (100, 40, 0, 60),
        (100, None, 0, 100),  # never committed: everything retained is unread
        (100, None, 30, 70),  # ... from the queue's min offset (retention deleted the rest)
        (100, 10, 30, 70),  # committed below the min offset: what is left is unread
        (100, 120, 0, 0),  # committed past what is readable (e.g. not confirmed yet): 0
        (0, None, 0, 0),  # an empty queue
    ],
)
def test_queue_lag(max_offset: int, committed: int | None, min_offset: int, lag: int) -> None:
    assert queue_lag(max_offset, committed, min_offset) == lag
    assert QueueStats("T", 0, min_offset, max_offset, committed, None).lag == lag


def test_consume_stats_round_trip_keeps_unknown_offsets_and_times_as_none() -> None:
    stats = ConsumeStats(
        broker_name="broker-a",
        address="127.0.0.1:10911",
        role="SLAVE",
        groups={
            "g": (
                QueueStats("T", 0, 0, 10, 4, 1_700_000_000_000),
                QueueStats("T", 1, 0, 3, None, None),
            )
        },
    )
    body = stats.encode()
    raw = msgpack.unpackb(body, strict_map_key=False)
    assert raw["groups"]["g"][1]["consumerOffset"] == -1  # RocketMQ's "none" on the wire
    assert raw["groups"]["g"][1]["lastConsumeMs"] == 0
    assert ConsumeStats.decode(body) == stats


def test_connections_round_trip() -> None:
    members = [ConsumerConnection("c-1", "10.0.0.1:5000", "T", 1_700_000_000_000)]
    assert decode_connections(encode_connections(members)) == members
    assert decode_connections(encode_connections([])) == []


@pytest.mark.parametrize(
    "body",
    [
        b"",
        b"\xc1",  # never valid msgpack
        msgpack.packb([1, 2]),
        msgpack.packb({"brokerName": "b", "address": "a", "role": "MASTER"}),  # no groups
        msgpack.packb({"brokerName": "b", "address": "a", "role": "MASTER", "groups": {"g": 1}}),
        msgpack.packb(
            {
                "brokerName": "b",
                "address": "a",
                "role": "MASTER",
                "groups": {"g": [{"topic": "T", "queueId": "0"}]},
            }
        ),
    ],
)
def test_malformed_consume_stats_raise_stats_error(body: bytes) -> None:
    with pytest.raises(StatsError):
        ConsumeStats.decode(body)


@pytest.mark.parametrize(
    "body",
    [b"\xc1", msgpack.packb({"a": 1}), msgpack.packb([{"clientId": "c"}]), msgpack.packb([3])],
)
def test_malformed_connection_lists_raise_stats_error(body: bytes) -> None:
    with pytest.raises(StatsError):
        decode_connections(body)
