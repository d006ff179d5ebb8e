"""broker/broker_stats.py: rates from growing counters sampled about once a second."""

from __future__ import annotations

from broker.broker_stats import SAMPLE_MS, WINDOW_MS, BrokerStats, Counters, counters
from broker.classic.admin import runtime_table
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


def test_the_classic_runtime_table_has_rocketmqs_tps_and_disk_keys() -> None:
    # mqadmin's brokerStatus and the Dashboard read these keys from the classic door.
    info = RuntimeInfo(put_tps=12.345, get_tps=3.0, commitlog_disk_ratio=0.25, pop_inflight=2)
    table = runtime_table(info)
    assert (table["putTps"], table["getTransferedTps"]) == ("12.35", "3.00")
    assert (table["commitLogDiskRatio"], table["popInflight"]) == ("0.2500", "2")
    assert "pageCacheLockTimeMills" not in table  # not measured: left out
    assert "commitLogDiskRatio" not in runtime_table(RuntimeInfo())
