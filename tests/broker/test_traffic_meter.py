"""TrafficMeter (broker/traffic_meter.py) and the report's codec (protocol/traffic.py): rates
from the broker's put counters, time as an input."""

from __future__ import annotations

import math
import random
from typing import Any

import msgpack
import pytest

from broker.metrics import TopicTraffic
from broker.replicas.heartbeat import sample_traffic
from broker.traffic_meter import TrafficMeter
from protocol.traffic import (
    MAX_QUEUES,
    MAX_TOPICS,
    TopicRate,
    TrafficError,
    TrafficReport,
    decode_report,
)


def test_rates_over_the_window_from_the_counters() -> None:
    meter = TrafficMeter(window_ms=10_000, top_topics=8)
    assert meter.sample_ms == 1000
    meter.observe(0, {"orders": {0: 0}})
    assert meter.report() == TrafficReport(10_000, 0.0)  # one sample: no rate yet
    meter.observe(500, {"orders": {0: 999}})  # not due: ignored
    meter.observe(2000, {"orders": {0: 100, 1: 40}, "logs": {0: 10}})
    r = meter.report()
    assert r.msg_per_sec == pytest.approx(75.0)
    assert r.topics["orders"] == TopicRate(70.0, {0: 50.0, 1: 20.0})
    assert r.topics["logs"] == TopicRate(5.0, {0: 5.0})
    assert decode_report(meter.body()) == r


def test_old_samples_leave_the_window() -> None:
    meter = TrafficMeter(window_ms=10_000, top_topics=8)
    for t in range(0, 31):  # 100 msg/s for 20 s, then idle for 10 s
        meter.observe(t * 1000, {"t": {0: min(t, 20) * 100}})
    # The window is the last 10 s: idle, so the topic is gone from the report.
    assert meter.report().msg_per_sec == 0.0 and meter.report().topics == {}
    assert len(meter._samples) <= 12  # bounded, whatever ran before


def test_a_topic_deleted_and_created_again_counts_from_zero() -> None:
    """deleteTopic drops the topic's counters (TopicTraffic.forget: its series end); created
    again, they count from 0, below the window's base. Its puts since count, not none (the
    meter read a counter below its base as idle until it passed the old count)."""
    traffic = TopicTraffic()
    traffic.get("t").queues_in[0] = 500
    traffic.forget("t")
    assert "t" not in traffic.by_topic and traffic.moved_totals() == {}
    meter = TrafficMeter(window_ms=10_000, top_topics=8)
    meter.observe(0, {"t": {0: 500}})
    meter.observe(2000, {"t": {0: 40}})  # deleted, created again, 40 put since
    assert meter.report().topics["t"] == TopicRate(20.0, {0: 20.0})


def test_only_the_busiest_topics_are_named_the_total_counts_all() -> None:
    meter = TrafficMeter(window_ms=1000, top_topics=2)
    meter.observe(0, {})
    meter.observe(1000, {"a": {0: 10}, "b": {0: 30}, "c": {0: 20}, "d": {0: 20}})
    r = meter.report()
    assert list(r.topics) == ["b", "c"]  # ties by name
    assert r.msg_per_sec == 80.0


def test_put_counters_feed_the_meter() -> None:
    traffic = TopicTraffic()
    traffic.get("t").queues_in[3] = 7
    traffic.moved.add("t")
    totals = traffic.moved_totals()
    traffic.get("t").queues_in[3] = 9
    assert totals == {"t": {3: 7}}  # a copy
    assert traffic.moved_totals() == {}  # taken: nothing moved since


class _CountedQueues(dict[int, int]):
    """A topic's per-queue counters that count how often a sample reads them."""

    reads = 0

    def copy(self) -> dict[int, int]:
        _CountedQueues.reads += 1
        return dict(self)

    def items(self) -> Any:
        _CountedQueues.reads += 1
        return super().items()


def test_a_sample_reads_only_the_topics_put_to_since_the_last_one() -> None:
    """Issue 34: each sample (every 6 s with the default window) copied and compared every
    topic's counters, O(every queue the broker ever took a put for) on the heartbeat's thread
    (5 to 7 ms at 10,000 queues); now only the topics put to since the sample before."""
    traffic, meter = TopicTraffic(), TrafficMeter(window_ms=10_000, top_topics=8)
    for i in range(2000):  # a broker that took a put in each of 2,000 topics, long ago
        counts = traffic.get(f"t{i}")
        counts.queues_in = _CountedQueues({0: 5})
        traffic.moved.add(f"t{i}")
    sample_traffic(meter, traffic, 0)
    _CountedQueues.reads = 0
    for second in range(1, 21):  # then puts to 3 topics only, a sample a second for 20 s
        for i in range(3):
            traffic.get(f"t{i}").queues_in[0] += 10
            traffic.moved.add(f"t{i}")
        sample_traffic(meter, traffic, second * 1000)
    assert _CountedQueues.reads <= 20 * 3 * 2, f"{_CountedQueues.reads} topic counters read"
    r = meter.report()  # the same rates as from every topic's counters
    assert r.msg_per_sec == pytest.approx(30.0)
    assert r.topics == {f"t{i}": TopicRate(10.0, {0: 10.0}) for i in range(3)}


def test_the_rates_from_moved_topics_are_those_from_every_topic() -> None:
    """The same puts sampled both ways give the same reports, sample by sample."""
    rng = random.Random(34)
    whole, moved, traffic = TrafficMeter(8000, 4), TrafficMeter(8000, 4), TopicTraffic()
    for t in range(0, 60_000, 700):
        for _ in range(rng.randrange(0, 6)):
            topic, q = f"t{rng.randrange(12)}", rng.randrange(4)
            queues = traffic.get(topic).queues_in
            queues[q] = queues.get(q, 0) + rng.randrange(1, 50)
            traffic.moved.add(topic)
        every = traffic.queue_totals()
        if whole.due(t):
            whole.observe(t, every)
        sample_traffic(moved, traffic, t)
        got, want = moved.report(), whole.report()
        assert got.topics == want.topics, f"seed 34, at {t} ms"
        assert got.msg_per_sec == pytest.approx(want.msg_per_sec), f"seed 34, at {t} ms"


def test_report_round_trips() -> None:
    r = TrafficReport(60_000, 12.5, {"t": TopicRate(12.5, {0: 10.0, 5: 2.5})})
    assert decode_report(r.encode()) == r


@pytest.mark.parametrize(
    ("doc", "error"),
    [
        ([], "must be a map"),
        ({"windowMs": 0, "msgPerSec": 1}, "windowMs"),
        ({"windowMs": 1, "msgPerSec": -1}, "msgPerSec must be a finite number >= 0"),
        ({"windowMs": 1, "msgPerSec": math.inf}, "finite"),
        ({"windowMs": 1, "msgPerSec": True}, "must be a number"),
        ({"windowMs": 1, "msgPerSec": 1, "topics": []}, "topics must be a map"),
        (
            {"windowMs": 1, "msgPerSec": 1, "topics": {f"t{i}": {} for i in range(MAX_TOPICS + 1)}},
            "at most",
        ),
        ({"windowMs": 1, "msgPerSec": 1, "topics": {"t": 1}}, "topic names to"),
        (
            {"windowMs": 1, "msgPerSec": 1, "topics": {"t": {"msgPerSec": 1, "queues": {-1: 1}}}},
            "queue ids",
        ),
        (
            {
                "windowMs": 1,
                "msgPerSec": 1,
                "topics": {"t": {"msgPerSec": 1, "queues": {MAX_QUEUES: 1}}},
            },
            "queue ids",
        ),
        ({"windowMs": 1, "msgPerSec": 1, "topics": {"t": {"queues": {}}}}, "t msgPerSec"),
    ],
)
def test_malformed_reports_are_refused(doc: object, error: str) -> None:
    with pytest.raises(TrafficError, match=error):
        decode_report(msgpack.packb(doc))


def test_garbage_is_refused() -> None:
    with pytest.raises(TrafficError, match="not msgpack"):
        decode_report(b"\xc1\xc1")


def test_a_role_change_starts_the_window_again() -> None:
    """A slave promoted after a minute of putting nothing reports its own puts' rate within
    FIRST_RATE_MS, not those puts spread over the window it spent as a slave; a demoted master
    stops reporting its last rate at once."""
    traffic = TopicTraffic()
    meter = TrafficMeter(window_ms=60_000, top_topics=8)

    def put(n: int) -> None:  # as the put path counts
        counts = traffic.get("t")
        counts.queues_in[0] = counts.queues_in.get(0, 0) + n
        traffic.moved.add("t")

    put(5_000)  # while master, long ago
    for t in range(0, 61_000, 6_000):  # a slave: nothing put for a minute
        sample_traffic(meter, traffic, t)
    assert meter.report().msg_per_sec == 0.0
    meter.request_restart()  # promoted at 61 s
    sample_traffic(meter, traffic, 61_000)
    put(100)
    sample_traffic(meter, traffic, 61_500)  # not due yet
    assert meter.report().msg_per_sec == 0.0
    put(100)
    sample_traffic(meter, traffic, 62_000)  # FIRST_RATE_MS after the restart
    assert meter.report().msg_per_sec == pytest.approx(200.0)  # 200 in 1 s
    for t in range(68_000, 120_000, 6_000):  # then on every sample_ms
        put(600)
        sample_traffic(meter, traffic, t)
        assert meter.report().msg_per_sec == pytest.approx(
            (traffic.get("t").queues_in[0] - 5_000) / ((t - 61_000) / 1000)
        )
    meter.request_restart()  # demoted
    sample_traffic(meter, traffic, 120_100)
    assert meter.report() == TrafficReport(60_000, 0.0)
    sample_traffic(meter, traffic, 121_100)
    assert meter.report().msg_per_sec == 0.0  # puts nothing as a slave
