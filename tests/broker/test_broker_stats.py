"""broker/broker_stats.py: rates from growing counters sampled about once a second."""

from __future__ import annotations

import random

from broker.broker_stats import SAMPLE_MS, WINDOW_MS, BrokerStats, Counters, counters, sample
from broker.classic.admin import runtime_table
from broker.metrics import TopicTraffic
from protocol.broker_requests.runtime import RuntimeInfo


def test_no_rates_before_two_samples_and_floats_with_no_topic() -> None:
    stats = BrokerStats()
    assert stats.rates().window_ms == 0
    stats.observe(0, Counters())
    stats.observe(SAMPLE_MS, Counters())
    rates = stats.rates()
    # A broker with no topic yet still answers floats (the runtime answer's type).
    assert (rates.window_ms, rates.put_tps, rates.get_tps) == (SAMPLE_MS, 0.0, 0.0)
    assert type(rates.put_tps) is float and type(rates.get_tps) is float


def test_rates_span_the_window_and_a_counter_that_went_down_counts_from_zero() -> None:
    stats = BrokerStats()
    for second in range(30):
        now = second * SAMPLE_MS
        stats.observe(now, Counters(put={"T": 100 * second}, consumed={("G", "T"): 50 * second}))
        stats.observe(now + 10, Counters(put={"T": 0}))  # not due: ignored
    rates = stats.rates()
    assert rates.window_ms == WINDOW_MS
    assert rates.put == {"T": 100.0} and rates.consumed == {("G", "T"): 50.0}
    assert stats.latest.put == {"T": 2900}
    stats.observe(30 * SAMPLE_MS, Counters(put={"T": 20}))  # deleted and created again
    assert stats.rates().put["T"] == 20 / (WINDOW_MS / 1000)


class _Counts:
    def __init__(self, messages_in: int, messages_out: int) -> None:
        self.messages_in = messages_in
        self.messages_out = messages_out


def test_a_sample_adds_a_groups_offsets_over_the_topics_queues() -> None:
    sample = counters({"T": _Counts(7, 3)}, {"G": {"T": {0: 5, 1: 6}}, "H": {"T": {}}})
    assert sample == Counters(put={"T": 7}, got={"T": 3}, consumed={("G", "T"): 11, ("H", "T"): 0})


class _CountedStats(BrokerStats):
    """Counts the topic counters each sample carried."""

    __slots__ = ("carried",)

    def __init__(self) -> None:
        super().__init__()
        self.carried = 0

    def observe(self, now_ms: int, moved: Counters) -> None:
        if self.due(now_ms):
            self.carried += len(moved.put) + len(moved.got)
        super().observe(now_ms, moved)


def test_a_sample_reads_only_the_topics_that_moved_since_the_last_one() -> None:
    """Issue 34: the broker's sample, every second, copied every topic's put and served
    counters (6,250 topics' at 50,000 queues, the largest part of an idle master's own CPU);
    now only the topics put to or served since the sample before."""
    traffic, stats = TopicTraffic(), _CountedStats()
    for i in range(2000):  # a broker that served 2,000 topics, long ago
        traffic.get(f"t{i}").messages_in += 5
    sample(stats, traffic, dict, 0)
    stats.carried = 0
    for second in range(1, 21):  # then puts to 3 topics and pulls of 1, for 20 s
        for i in range(3):
            traffic.get(f"t{i}").messages_in += 10
        traffic.get("t5").messages_out += 4
        sample(stats, traffic, dict, second * SAMPLE_MS)
    assert stats.carried <= 20 * 4 * 2, f"{stats.carried} topic counters carried by 20 samples"
    rates = stats.rates()
    assert {t: r for t, r in rates.put.items() if r} == {f"t{i}": 10.0 for i in range(3)}
    assert {t: r for t, r in rates.got.items() if r} == {"t5": 4.0}
    assert stats.latest.put["t1999"] == 5 and stats.latest.put["t0"] == 205


def test_rates_from_the_topics_that_moved_are_those_from_every_topic() -> None:
    """The same traffic sampled both ways: the same rates (0 where a topic did not move)."""
    rng = random.Random(34)
    every, moved, traffic = BrokerStats(), BrokerStats(), TopicTraffic()
    consumed: dict[tuple[str, str], int] = {}
    for t in range(0, 40 * SAMPLE_MS, 300):
        for _ in range(rng.randrange(0, 5)):
            counts = traffic.get(f"t{rng.randrange(15)}")
            counts.messages_in += rng.randrange(1, 9)
            counts.messages_out += rng.randrange(0, 9)
        consumed[("G", f"t{rng.randrange(3)}")] = t
        if every.due(t):
            every.observe(t, counters(traffic.by_topic, consumed=dict(consumed)))
        sample(moved, traffic, lambda: dict(consumed), t)
        want, got = every.rates(), moved.rates()
        assert want.window_ms == got.window_ms, f"seed 34, at {t} ms"
        for name in ("put", "got", "consumed"):
            w, g = getattr(want, name), getattr(got, name)
            assert {k: v for k, v in w.items() if v} == {k: v for k, v in g.items() if v}, (
                f"seed 34, {name} at {t} ms"
            )
        assert moved.latest.put == every.latest.put and moved.latest.got == every.latest.got


def test_the_classic_runtime_table_has_rocketmqs_tps_and_disk_keys() -> None:
    # mqadmin's brokerStatus and the Dashboard read these keys from the classic door.
    info = RuntimeInfo(put_tps=12.345, get_tps=3.0, commitlog_disk_ratio=0.25, pop_inflight=2)
    table = runtime_table(info)
    assert (table["putTps"], table["getTransferedTps"]) == ("12.35", "3.00")
    assert (table["commitLogDiskRatio"], table["popInflight"]) == ("0.2500", "2")
    assert "pageCacheLockTimeMills" not in table  # not measured: left out
    assert "commitLogDiskRatio" not in runtime_table(RuntimeInfo())
