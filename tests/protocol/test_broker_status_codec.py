"""GET_BROKER_RUNTIME_INFO's figures for brokerStatus and VIEW_BROKER_STATS_DATA
(protocol/broker_requests/runtime.py): golden bytes, round trips, an earlier broker's answer read
with the new figures at their defaults, and bad fields."""

from __future__ import annotations

import re
from typing import Any

import msgpack
import pytest
from hypothesis import given
from hypothesis import strategies as st

from protocol.broker_requests.runtime import (
    GroupStats,
    RuntimeInfo,
    StatsData,
    StatsQuery,
    TopicStats,
)
from protocol.codes import RequestCode
from protocol.fields import FieldError
from protocol.remoting import FrameDecoder, encode_frame, request

STATS = StatsData(
    window_ms=10_000,
    topics=(TopicStats("T", 2.5, 1.0, 100, 40),),
    groups=(GroupStats("G", "T", 1.5),),
)
STATS_GOLDEN = (
    "00000087960001010080c47f83a877696e646f774d73cd2710a6746f706963739185a5746f706963a154a670"
    "7574547073cb4004000000000000a6676574547073cb3ff0000000000000a8707574546f74616c64a8676574"
    "546f74616c28a667726f7570739183a567726f7570a147a5746f706963a154aa636f6e73756d65547073cb3f"
    "f8000000000000"
)
# GET_BROKER_RUNTIME_INFO's answer as brokers wrote it before brokerStatus' figures (the golden
# frame tests/protocol/test_typed_requests.py held until then).
EARLIER_RUNTIME = (
    "000000fb960001010080c4f3de0012aa62726f6b65724e616d65a162a7636c7573746572a163a7616464"
    "72657373ab3132372e302e302e313a31a862726f6b6572496401a4726f6c65a64d4153544552ab6d6173"
    "74657245706f636802a96d61784f666673657403a96d696e4f666673657400ad666c75736865644f6666"
    "73657403ad636f6e6669726d4f666673657403a9686141646472657373ab3132372e302e302e313a32a6"
    "66656e636564c2a6746f7069637301ab636f6e6e656374696f6e7302ac70756c6c7357616974696e6700"
    "ac74696d657250656e64696e6700ac67727063456e64706f696e74c0af67727063546c73456e64706f69"
    "6e74c0"
)


def _frame(code: int, typed: Any) -> bytes:
    header, body = typed.encode()
    return encode_frame(request(code, 1, header, body))


def test_the_stats_request_is_rocketmqs_315_without_fields() -> None:
    assert _frame(StatsQuery.code, StatsQuery()).hex() == "000000099600cd013b010080c0"
    assert StatsQuery.code == RequestCode.VIEW_BROKER_STATS_DATA == 315


def test_the_stats_answer_bytes_stay_put() -> None:
    assert _frame(1, STATS).hex() == STATS_GOLDEN
    (frame,) = FrameDecoder().feed(bytes.fromhex(STATS_GOLDEN))
    assert StatsData.parse(frame.header, frame.body) == STATS


def test_an_earlier_brokers_runtime_info_reads_with_the_new_figures_at_their_defaults() -> None:
    (frame,) = FrameDecoder().feed(bytes.fromhex(EARLIER_RUNTIME))
    info = RuntimeInfo.parse(frame.header, frame.body)
    assert (info.broker_name, info.master, info.connections) == ("b", True, 2)
    assert (info.put_tps, info.get_tps, info.stats_window_ms, info.put_total) == (0.0, 0.0, 0, 0)
    assert (info.commitlog_disk_ratio, info.page_cache_lock_ms) == (None, None)
    assert (info.pop_inflight, info.timer_overdue_ms) == (0, 0)


floats = st.floats(allow_nan=False)
ints = st.integers(min_value=0, max_value=2**63 - 1)


@given(
    st.builds(
        RuntimeInfo,
        put_tps=floats,
        get_tps=floats,
        stats_window_ms=ints,
        put_total=ints,
        get_total=ints,
        commitlog_disk_ratio=st.none() | floats,
        page_cache_lock_ms=st.none() | floats,
        pop_inflight=ints,
        timer_overdue_ms=ints,
    )
)
def test_any_runtime_info_with_the_new_figures_round_trips(info: RuntimeInfo) -> None:
    (frame,) = FrameDecoder().feed(_frame(1, info))
    assert RuntimeInfo.parse(frame.header, frame.body) == info


@given(
    st.builds(
        StatsData,
        window_ms=ints,
        topics=st.lists(
            st.builds(TopicStats, st.text(max_size=10), floats, floats, ints, ints), max_size=4
        ).map(tuple),
        groups=st.lists(
            st.builds(GroupStats, st.text(max_size=10), st.text(max_size=10), floats), max_size=4
        ).map(tuple),
    )
)
def test_any_stats_answer_round_trips(data: StatsData) -> None:
    (frame,) = FrameDecoder().feed(_frame(1, data))
    assert StatsData.parse(frame.header, frame.body) == data


@pytest.mark.parametrize(
    ("cls", "doc", "message"),
    [
        (RuntimeInfo, {"putTps": 1}, "'putTps' must be float"),
        (RuntimeInfo, {"commitLogDiskRatio": "x"}, "'commitLogDiskRatio' must be float or nil"),
        (RuntimeInfo, {"popInflight": 1.5}, "'popInflight' must be an integer"),
        (StatsData, {"topics": {}}, "'topics' must be a list of maps"),
        (StatsData, {"topics": [{"topic": "T"}]}, "'putTps' must be a float"),
        (StatsData, {"groups": [{"group": 1}]}, "'group' must be text"),
    ],
)
def test_a_bad_field_raises_one_field_error(cls: Any, doc: dict[str, Any], message: str) -> None:
    with pytest.raises(FieldError, match=re.escape(message)):
        cls.parse({}, msgpack.packb(doc))
