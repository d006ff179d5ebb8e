"""GET_BROKER_CONFIG and UPDATE_BROKER_CONFIG (protocol/broker_requests/broker_config.py): the
frame bytes of one fixed request and answer each stay put, an older broker's answers (without
the live file's fields) still parse, any request and answer round-trips through a frame, and a
bad field raises one FieldError naming it."""

from __future__ import annotations

import re
from typing import Any

import msgpack
import pytest
from hypothesis import given
from hypothesis import strategies as st

from protocol.broker_requests.broker_config import (
    BrokerConfigChanged,
    BrokerConfigQuery,
    BrokerConfigTable,
    ChangedLive,
    UpdateBrokerConfig,
)
from protocol.codes import RequestCode
from protocol.fields import FieldError
from protocol.remoting import FrameDecoder, encode_frame, request

TABLE = BrokerConfigTable(
    config={
        "flush_interval_ms": 500,
        "retention_hours": 72.0,
        "auto_create_topic": True,
        "tls_cert": None,
        "listen": "127.0.0.1:10911",
    },
    live_keys=("flush_interval_ms",),
    config_file="/etc/b.toml",
    live_file="/d/config/liveConfig.json",
    changed_live={
        "flush_interval_ms": ChangedLive(
            start_value=500, set_at="2026-11-29T08:30:00Z", set_by="10.0.0.7:53122"
        )
    },
)
CHANGED = BrokerConfigChanged(
    key="flush_interval_ms",
    old=500,
    new=250,
    persisted=True,
    config_file="/d/config/liveConfig.json",
    live_file="/d/config/liveConfig.json",
    start_value=500,
)

# Request frames: code 26 with no fields; code 25 with header {key, value} and no body.
GOLDEN_REQUESTS: list[tuple[Any, str]] = [
    (BrokerConfigQuery(), "0000000796001a010080c0"),
    (
        UpdateBrokerConfig(key="flush_interval_ms", value="250"),
        "00000027960019010082a36b6579b1666c7573685f696e74657276616c5f6d73a576616c7565a3323530c0",
    ),
]
# Answers framed like a request of code 1 (as tests/protocol/test_typed_requests.py does): the
# msgpack map body, keys in this order.
GOLDEN_ANSWERS: list[tuple[Any, str]] = [
    (
        TABLE,
        "00000128960001010080c5011f85a6636f6e66696785b1666c7573685f696e74657276616c5f6d73cd01f4af"
        "726574656e74696f6e5f686f757273cb4052000000000000b16175746f5f6372656174655f746f706963c3a8"
        "746c735f63657274c0a66c697374656eaf3132372e302e302e313a3130393131a86c6976654b65797391b166"
        "6c7573685f696e74657276616c5f6d73aa636f6e66696746696c65ab2f6574632f622e746f6d6ca86c697665"
        "46696c65b92f642f636f6e6669672f6c697665436f6e6669672e6a736f6eab6368616e6765644c69766581b1"
        "666c7573685f696e74657276616c5f6d7383aa737461727456616c7565cd01f4a57365744174b4323032362d"
        "31312d32395430383a33303a30305aa57365744279ae31302e302e302e373a3533313232",
    ),
    (
        CHANGED,
        "0000008d960001010080c48587a36b6579b1666c7573685f696e74657276616c5f6d73a36f6c64cd01f4a36e"
        "6577ccfaa9706572736973746564c3aa636f6e66696746696c65b92f642f636f6e6669672f6c697665436f6e"
        "6669672e6a736f6ea86c69766546696c65b92f642f636f6e6669672f6c697665436f6e6669672e6a736f6eaa"
        "737461727456616c7565cd01f4",
    ),
]
# An older broker's answers (before live changes were kept in the data directory): no liveFile,
# changedLive or startValue; they parse with those empty.
OLDER_ANSWERS: list[tuple[Any, str]] = [
    (
        BrokerConfigTable(
            config=TABLE.config, live_keys=TABLE.live_keys, config_file="/etc/b.toml"
        ),
        "000000a6960001010080c49e83a6636f6e66696785b1666c7573685f696e74657276616c5f6d73cd01f4af72"
        "6574656e74696f6e5f686f757273cb4052000000000000b16175746f5f6372656174655f746f706963c3a874"
        "6c735f63657274c0a66c697374656eaf3132372e302e302e313a3130393131a86c6976654b65797391b1666c"
        "7573685f696e74657276616c5f6d73aa636f6e66696746696c65ab2f6574632f622e746f6d6c",
    ),
    (
        BrokerConfigChanged(
            key="flush_interval_ms", old=500, new=250, persisted=True, config_file="/etc/b.toml"
        ),
        "0000004e960001010080c44685a36b6579b1666c7573685f696e74657276616c5f6d73a36f6c64cd01f4a36e"
        "6577ccfaa9706572736973746564c3aa636f6e66696746696c65ab2f6574632f622e746f6d6c",
    ),
]


@pytest.mark.parametrize(("answer", "golden"), OLDER_ANSWERS)
def test_an_older_brokers_answer_still_parses(answer: Any, golden: str) -> None:
    (frame,) = FrameDecoder().feed(bytes.fromhex(golden))
    parsed = type(answer).parse(frame.header, frame.body)
    assert parsed == answer
    assert parsed.live_file is None


def test_the_codes_are_rocketmqs() -> None:
    assert (RequestCode.UPDATE_BROKER_CONFIG, RequestCode.GET_BROKER_CONFIG) == (25, 26)


@pytest.mark.parametrize(("typed", "golden"), GOLDEN_REQUESTS)
def test_the_request_bytes_stay_put(typed: Any, golden: str) -> None:
    header, body = typed.encode()
    assert encode_frame(request(typed.code, 1, header, body)).hex() == golden
    (frame,) = FrameDecoder().feed(bytes.fromhex(golden))
    assert type(typed).parse(frame.header, frame.body) == typed


@pytest.mark.parametrize(("answer", "golden"), GOLDEN_ANSWERS)
def test_the_answer_bytes_stay_put(answer: Any, golden: str) -> None:
    header, body = answer.encode()
    assert encode_frame(request(1, 1, header, body)).hex() == golden
    (frame,) = FrameDecoder().feed(bytes.fromhex(golden))
    assert type(answer).parse(frame.header, frame.body) == answer


text = st.text(max_size=40)
key = st.text(min_size=1, max_size=40)
value = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**63), max_value=2**64 - 1),
    st.floats(allow_nan=False),
    text,
)


def _round_trip(typed: Any, code: int) -> Any:
    header, body = typed.encode()
    (frame,) = FrameDecoder().feed(encode_frame(request(code, 1, header, body)))
    return type(typed).parse(frame.header, frame.body)


@given(key, key)
def test_any_update_round_trips(k: str, v: str) -> None:
    update = UpdateBrokerConfig(key=k, value=v)
    assert _round_trip(update, update.code) == update


changed_live = st.builds(ChangedLive, start_value=value, set_at=text, set_by=text)


@given(
    st.dictionaries(key, value, max_size=8),
    st.lists(key, max_size=5),
    st.none() | text,
    st.none() | text,
    st.dictionaries(key, changed_live, max_size=4),
)
def test_any_config_table_round_trips(
    config: dict[str, Any],
    live: list[str],
    path: str | None,
    live_path: str | None,
    changed: dict[str, ChangedLive],
) -> None:
    table = BrokerConfigTable(
        config=config,
        live_keys=tuple(live),
        config_file=path,
        live_file=live_path,
        changed_live=changed,
    )
    assert _round_trip(table, 1) == table


@given(key, value, value, st.booleans(), st.none() | text, st.none() | text, value)
def test_any_change_round_trips(
    k: str, old: Any, new: Any, persisted: bool, path: str | None, live: str | None, start: Any
) -> None:
    changed = BrokerConfigChanged(
        key=k,
        old=old,
        new=new,
        persisted=persisted,
        config_file=path,
        live_file=live,
        start_value=start,
    )
    assert _round_trip(changed, 1) == changed


@pytest.mark.parametrize(
    ("cls", "header", "body", "message"),
    [
        (UpdateBrokerConfig, {"value": "1"}, None, "'key'"),
        (UpdateBrokerConfig, {"key": "", "value": "1"}, None, "'key' must be a non-empty"),
        (UpdateBrokerConfig, {"key": "k"}, None, "'value'"),
        (BrokerConfigTable, {}, msgpack.packb({"config": [1]}), "'config' must map"),
        (BrokerConfigTable, {}, msgpack.packb({"config": {"k": [1]}}), "'k' must be a scalar"),
        (BrokerConfigTable, {}, msgpack.packb({"liveKeys": "k"}), "'liveKeys' must be a list"),
        (BrokerConfigTable, {}, msgpack.packb({"configFile": 3}), "'configFile' must be text"),
        (BrokerConfigTable, {}, msgpack.packb({"liveFile": 3}), "'liveFile' must be text"),
        (
            BrokerConfigTable,
            {},
            msgpack.packb({"changedLive": [1]}),
            "'changedLive' must map keys to changes",
        ),
        (
            BrokerConfigTable,
            {},
            msgpack.packb({"changedLive": {"k": {"startValue": 1, "setAt": "t"}}}),
            "'changedLive' of 'k' needs setAt and setBy as text",
        ),
        (
            BrokerConfigChanged,
            {},
            msgpack.packb({"key": "k", "persisted": True, "startValue": [1]}),
            "'startValue' must be a scalar",
        ),
        (BrokerConfigChanged, {}, msgpack.packb({"persisted": True}), "'key' must be text"),
        (BrokerConfigChanged, {}, msgpack.packb({"key": "k"}), "'persisted' must be true"),
        (BrokerConfigChanged, {}, b"\xc1", "malformed config change"),
    ],
)
def test_a_bad_field_raises_one_field_error(
    cls: Any, header: dict[str, Any], body: bytes | None, message: str
) -> None:
    with pytest.raises(FieldError, match=re.escape(message)):
        cls.parse(header, body)
