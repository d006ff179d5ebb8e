"""Hot-path metrics reach Prometheus text with the conventional names and cumulative buckets."""

from __future__ import annotations

from prometheus_client import generate_latest

from broker.metrics import BrokerMetrics


def test_topic_traffic_and_latency_are_exposed_as_prometheus_families() -> None:
    m = BrokerMetrics("DefaultCluster", "broker-a")
    counts = m.topic("T")
    counts.messages_in += 3
    counts.bytes_in += 3072
    for v in (0.0001, 0.001, 0.3, 9.0):
        m.send_latency.observe(v)
    text = generate_latest(m.registry).decode()
    # broker_id is empty until the broker knows its id (no broker is bound here).
    labels = 'broker_id="",broker_name="broker-a",cluster="DefaultCluster"'
    assert f'rmq_broker_messages_in_total{{{labels},topic="T"}} 3.0' in text
    assert f'rmq_broker_bytes_in_total{{{labels},topic="T"}} 3072.0' in text
    assert f'rmq_broker_send_latency_seconds_bucket{{{labels},le="0.0002"}} 1.0' in text
    assert f'rmq_broker_send_latency_seconds_bucket{{{labels},le="0.001"}} 2.0' in text
    assert f'rmq_broker_send_latency_seconds_bucket{{{labels},le="5.0"}} 3.0' in text
    assert f'rmq_broker_send_latency_seconds_bucket{{{labels},le="+Inf"}} 4.0' in text
    assert f"rmq_broker_send_latency_seconds_count{{{labels}}} 4.0" in text
