"""broker/producer_groups.py: who is listed by producerConnection, and for how long."""

from __future__ import annotations

from broker.consumer_groups import ClientInfo
from broker.producer_groups import PRODUCER_EXPIRY_MS, ProducerGroups

CLASSIC = ClientInfo("JAVA", "401", "classic")


def test_a_classic_producer_stays_listed_between_its_30_s_heartbeats() -> None:
    # RocketMQ's clients heart-beat every 30 s: the consumers' 10 s expiry would drop them.
    groups = ProducerGroups()
    groups.heartbeat("PG", "p1", 0, 7, "10.0.0.1:5000", CLASSIC)
    (listed,) = groups.live("PG", 30_000)
    assert (listed.client_id, listed.language, listed.protocol) == ("p1", "JAVA", "classic")
    assert groups.live("PG", PRODUCER_EXPIRY_MS + 1) == []


def test_a_closed_connection_takes_its_producers_with_it() -> None:
    groups = ProducerGroups()
    groups.heartbeat("PG", "p1", 0, 7, "a:1", CLASSIC)
    groups.heartbeat("PG", "p2", 0, 8, "a:2", ClientInfo("PYTHON", "0.1.0"))
    groups.heartbeat("QG", "p1", 0, 7, "a:1", CLASSIC)
    groups.connection_closed(7)
    assert [p.client_id for p in groups.live("PG", 1)] == ["p2"]
    assert groups.live("QG", 1) == []
