"""The pure parts of consumer retry: back-off levels, group settings, the retry/DLQ decision and
the properties of the copies."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from protocol.retry import (
    DEFAULT_LEVELS_MS,
    PROP_DLQ_ORIGIN_MESSAGE_ID,
    PROP_DLQ_ORIGIN_TOPIC,
    PROP_DLQ_RESENT_FROM,
    PROP_FAILURE_REASON,
    PROP_ORIGIN_MESSAGE_ID,
    PROP_RECONSUME_TIME,
    PROP_RETRY_TOPIC,
    DeadLetter,
    Retry,
    RetryConfigError,
    SubscriptionGroupConfig,
    backoff_ms,
    clip_reason,
    config_from_dict,
    dlq_origin_topic,
    dlq_topic,
    format_delay_levels,
    group_error,
    next_step,
    origin_message_id,
    parse_delay_levels,
    reconsume_times,
    resent_properties,
    retry_topic,
    sent_back_properties,
)


def test_the_default_levels_are_rocketmqs_retry_levels() -> None:
    s, m, h = 1000, 60_000, 3_600_000
    assert (
        10 * s,
        30 * s,
        *(k * m for k in range(1, 11)),
        20 * m,
        30 * m,
        h,
        2 * h,
    ) == DEFAULT_LEVELS_MS
    config = SubscriptionGroupConfig("G")
    assert config.retry_max_times == 16 and config.consume_retry


@pytest.mark.parametrize(
    ("text", "levels"),
    [
        ("1s 1s 2s", (1000, 1000, 2000)),
        ("500ms, 2m,1h 1d", (500, 120_000, 3_600_000, 86_400_000)),
        ("  0s  ", (0,)),
    ],
)
def test_delay_levels_parse(text: str, levels: tuple[int, ...]) -> None:
    assert parse_delay_levels(text) == levels


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("", "at least one level"),
        ("   ", "at least one level"),
        ("10", "'10' is not a delay"),
        ("-1s", "'-1s' is not a delay"),
        ("1.5s", "'1.5s' is not a delay"),
        ("10x", "'10x' is not a delay"),
        ("41d", "longer than 40 days"),
        (" ".join(["1s"] * 65), "at most 64 levels"),
    ],
)
def test_malformed_delay_levels_are_refused_with_the_reason(text: str, says: str) -> None:
    with pytest.raises(RetryConfigError, match=says):
        parse_delay_levels(text)


@given(st.lists(st.integers(0, 40 * 86_400_000), min_size=1, max_size=64))
def test_formatting_levels_parses_back(levels: list[int]) -> None:
    assert parse_delay_levels(format_delay_levels(levels)) == tuple(levels)


def test_backoff_indexes_the_levels_by_reconsume_count_and_repeats_the_last() -> None:
    config = SubscriptionGroupConfig("G", 10, (1000, 1000, 2000))
    assert [backoff_ms(config, n) for n in range(6)] == [1000, 1000, 2000, 2000, 2000, 2000]


def test_the_decision_retries_until_max_then_dead_letters() -> None:
    config = SubscriptionGroupConfig("G", 3, (1000, 1000, 2000))
    assert next_step(config, 0) == Retry(1000, 1)
    assert next_step(config, 1) == Retry(1000, 2)
    assert next_step(config, 2) == Retry(2000, 3)
    assert next_step(config, 3) == DeadLetter(3)
    assert next_step(config, 7) == DeadLetter(7)
    # The consumer's own maximum may only lower the group's.
    assert next_step(config, 1, client_max=1) == DeadLetter(1)
    assert next_step(config, 3, client_max=99) == DeadLetter(3)
    assert next_step(SubscriptionGroupConfig("G", 0), 0) == DeadLetter(0)


@given(st.integers(0, 50), st.integers(0, 50))
def test_a_message_is_retried_exactly_max_times(max_times: int, start: int) -> None:
    config = SubscriptionGroupConfig("G", max_times, (5,))
    count, retries = 0, 0
    while isinstance(step := next_step(config, count), Retry):
        assert step.count == count + 1
        count, retries = step.count, retries + 1
    assert retries == max_times and step == DeadLetter(max_times)


def test_settings_from_a_document_keep_unset_keys_from_the_base() -> None:
    base = config_from_dict({"groupName": "G", "retryMaxTimes": 3, "retryDelays": "1s 2s"})
    assert base == SubscriptionGroupConfig("G", 3, (1000, 2000), True)
    changed = config_from_dict({"groupName": "G", "consumeRetryEnable": False}, base)
    assert changed == SubscriptionGroupConfig("G", 3, (1000, 2000), False)
    assert config_from_dict(changed.to_dict()) == changed
    fifo = config_from_dict({"groupName": "G", "consumeMessageOrderly": True}, changed)
    assert fifo == SubscriptionGroupConfig("G", 3, (1000, 2000), False, True)
    assert config_from_dict(fifo.to_dict()) == fifo
    # Another group's settings are no base.
    assert config_from_dict({"groupName": "H"}, base) == SubscriptionGroupConfig("H")


@pytest.mark.parametrize(
    ("doc", "says"),
    [
        ({"groupName": "G", "retryTimes": 3}, "unknown subscription group setting"),
        ({"retryMaxTimes": 3}, "groupName must be a string"),
        ({"groupName": ""}, "1..120 characters"),
        ({"groupName": "a b"}, "may hold only"),
        ({"groupName": "%RETRY%x"}, "may hold only"),
        ({"groupName": "G", "retryMaxTimes": -1}, "retryMaxTimes must be"),
        ({"groupName": "G", "retryMaxTimes": 10_001}, "retryMaxTimes must be"),
        ({"groupName": "G", "retryMaxTimes": True}, "retryMaxTimes must be"),
        ({"groupName": "G", "retryMaxTimes": "3"}, "retryMaxTimes must be"),
        ({"groupName": "G", "retryDelays": "1s 2"}, "'2' is not a delay"),
        ({"groupName": "G", "retryDelays": [1000]}, "retryDelays must be a string"),
        ({"groupName": "G", "consumeRetryEnable": 1}, "consumeRetryEnable must be a boolean"),
        ({"groupName": "G", "consumeMessageOrderly": "yes"}, "consumeMessageOrderly must be a"),
    ],
)
def test_bad_settings_are_refused_naming_the_key(doc: dict[str, object], says: str) -> None:
    with pytest.raises(RetryConfigError, match=says):
        config_from_dict(doc)


def test_topic_names_and_group_names() -> None:
    assert retry_topic("G") == "%RETRY%G" and dlq_topic("G") == "%DLQ%G"
    assert group_error("orders-consumers.v2|x_y") is None
    assert group_error("x" * 121) is not None


def test_a_retry_copy_carries_origin_count_and_reason_and_drops_timer_state() -> None:
    stored = {"KEYS": "k", "TAGS": "t", "app": "1", "TIMER_OUT_MS": "5", "REAL_TOPIC": "x"}
    props = sent_back_properties(
        stored, origin_topic="T", origin_id="ID0", step=Retry(1000, 1), reason="boom"
    )
    assert props == {
        "app": "1",
        PROP_RETRY_TOPIC: "T",
        PROP_ORIGIN_MESSAGE_ID: "ID0",
        PROP_RECONSUME_TIME: "1",
        PROP_FAILURE_REASON: "boom",
    }
    again = sent_back_properties(
        props, origin_topic="T", origin_id="ID0", step=DeadLetter(3), reason=""
    )
    assert again[PROP_RECONSUME_TIME] == "3" and PROP_FAILURE_REASON not in again
    assert again[PROP_DLQ_ORIGIN_TOPIC] == "T" and again[PROP_DLQ_ORIGIN_MESSAGE_ID] == "ID0"
    assert dlq_origin_topic(again) == "T" and reconsume_times(again) == 3


def test_a_resent_message_keeps_the_application_properties_only() -> None:
    dlq = {
        "app": "1",
        PROP_RETRY_TOPIC: "T",
        PROP_ORIGIN_MESSAGE_ID: "ID0",
        PROP_RECONSUME_TIME: "3",
        PROP_FAILURE_REASON: "boom",
        PROP_DLQ_ORIGIN_TOPIC: "T",
        PROP_DLQ_ORIGIN_MESSAGE_ID: "ID0",
    }
    assert resent_properties(dlq, "DLQID") == {
        "app": "1",
        PROP_ORIGIN_MESSAGE_ID: "ID0",
        PROP_DLQ_RESENT_FROM: "DLQID",
    }
    assert reconsume_times(resent_properties(dlq, "DLQID")) == 0


def test_origin_id_reason_clipping_and_unreadable_counts() -> None:
    assert origin_message_id({}, "S") == "S"
    assert origin_message_id({"UNIQ_KEY": "U"}, "S") == "U"
    assert origin_message_id({PROP_ORIGIN_MESSAGE_ID: "O", "UNIQ_KEY": "U"}, "S") == "O"
    assert clip_reason("a\nb\x01c\x02  d") == "a b c d"
    assert len(clip_reason("x" * 10_000)) == 512
    assert reconsume_times({PROP_RECONSUME_TIME: "nope"}) == 0
    assert reconsume_times({PROP_RECONSUME_TIME: "-4"}) == 0
