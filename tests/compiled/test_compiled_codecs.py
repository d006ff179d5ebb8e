"""Every compiled codec gives byte-identical output to its pure-Python source (docs/compiled.md).

The same hypothesis inputs go to the compiled module (what the suite imports) and to its ``.py``
loaded beside it (rmqbuild.hook.load_pure); outputs are compared byte for byte, and bad input
must fail the same way (same error type and message). In the pure build (RMQ_PURE_PYTHON=1, or
no C compiler) there is nothing to compare: skipped, except under CI=true where the suite must
run compiled.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from types import ModuleType
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import protocol.broker_requests.send as send_c
import protocol.ha as ha_c
import protocol.message as message_c
import protocol.pop as pop_c
import protocol.pull as pull_c
import protocol.raft as raft_c
import protocol.remoting as remoting_c
from rmqbuild import hook
from rmqbuild.modules import COMPILED
from tests.hypothesis_profiles import examples
from tests.raft.test_raft_codec import _message_strategy

CODECS = (
    "protocol.remoting",
    "protocol.message",
    "protocol.broker_requests.send",
    "protocol.pull",
    "protocol.ha",
    "protocol.raft",
    "protocol.pop",
)

pytestmark = pytest.mark.skipif(
    not hook.compiled_modules(), reason="the pure build: no compiled module to compare"
)
SETTINGS = settings(
    max_examples=examples(200), deadline=None, suppress_health_check=[HealthCheck.too_slow]
)


def pure(module: str) -> ModuleType:
    return hook.load_pure(module)


def outcome(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> tuple[str, Any]:
    """("ok", result) or ("error", type name, message): what a call gave."""
    try:
        return ("ok", fn(*args, **kwargs))
    except Exception as exc:  # compared, not swallowed: the other side must fail the same
        return ("error", f"{type(exc).__name__}: {exc}")


def test_the_codecs_run_compiled() -> None:
    for name in CODECS:
        assert name in COMPILED
        mod = __import__(name, fromlist=["_"])
        assert not (mod.__file__ or "").endswith(".py"), f"{name} imported from {mod.__file__}"
        assert pure(name).__file__.endswith(".py")


# -- remoting frames -----------------------------------------------------------------------

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**63), 2**64 - 1),
    st.floats(allow_nan=False),
    st.text(max_size=20),
)
headers = st.dictionaries(st.text(max_size=12), scalars, max_size=6)


def frame_fields(f: Any) -> tuple[Any, ...]:
    return (f.kind, f.code, f.opaque, f.flags, f.header, f.body)


@SETTINGS
@given(
    kind=st.sampled_from([0, 1]),
    code=st.integers(0, 2**31),
    opaque=st.integers(0, 2**31),
    flags=st.integers(0, 3),
    header=headers,
    body=st.none() | st.binary(max_size=300),
)
def test_frames_encode_and_decode_alike(
    kind: int, code: int, opaque: int, flags: int, header: dict[str, Any], body: bytes | None
) -> None:
    p = pure("protocol.remoting")
    fields = dict(kind=kind, code=code, opaque=opaque, flags=flags, header=header, body=body)
    wire = remoting_c.encode_frame(remoting_c.Frame(**fields))
    assert wire == p.encode_frame(p.Frame(**fields))
    frames_c = remoting_c.FrameDecoder().feed(wire * 2)
    frames_p = p.FrameDecoder().feed(wire * 2)
    assert [frame_fields(f) for f in frames_c] == [frame_fields(f) for f in frames_p]


@SETTINGS
@given(st.binary(max_size=200), st.integers(8, 200))
def test_garbage_frames_fail_alike(raw: bytes, max_bytes: int) -> None:
    p = pure("protocol.remoting")

    def feed(mod: ModuleType) -> Any:
        return [frame_fields(f) for f in mod.FrameDecoder(max_bytes).feed(raw)]

    assert outcome(feed, remoting_c) == outcome(feed, p)


# -- message records -------------------------------------------------------------------------

texts = st.text(
    st.characters(blacklist_characters="\x01\x02", blacklist_categories=("Cs",)), max_size=20
)
messages = st.fixed_dictionaries(
    {
        "topic": st.text(st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=30),
        "body": st.binary(max_size=400),
        "keys": texts,
        "tags": texts,
        "properties": st.dictionaries(texts.filter(bool), texts, max_size=4),
        "flag": st.integers(-(2**31), 2**31 - 1),
        "born_timestamp": st.integers(0, 2**62),
        "born_host": st.sampled_from(["", "10.0.0.1:1234", "not a host", "1.2.3.4:65535"]),
    }
)
offsets = st.fixed_dictionaries(
    {
        "queue_id": st.integers(0, 2**31 - 1),
        "queue_offset": st.integers(0, 2**62),
        "physical_offset": st.integers(0, 2**62),
        "store_timestamp": st.integers(0, 2**62),
    }
)


def record_fields(r: Any) -> tuple[Any, ...]:
    return (
        r.topic, r.queue_id, r.queue_offset, r.physical_offset, r.size, r.flag,
        r.born_timestamp, r.store_timestamp, r.born_host, r.store_host, r.body,
        r.properties, r.producer_seq, r.keys, r.tags, r.msg_id,
    )  # fmt: skip


def info_fields(i: Any) -> tuple[Any, ...]:
    return (i.size, i.topic, i.queue_id, i.queue_offset, i.physical_offset, i.store_timestamp,
            i.tags_hash)  # fmt: skip


def encode(mod: ModuleType, msg: dict[str, Any], at: dict[str, Any]) -> bytes:
    enc = mod.RecordEncoder("192.168.7.9:10911")
    out: bytes = enc.encode(mod.Message(**msg), **at)
    return out


@SETTINGS
@given(st.lists(st.tuples(messages, offsets), min_size=1, max_size=4), st.data())
def test_records_encode_and_parse_alike(
    batch: list[tuple[dict[str, Any], dict[str, Any]]], data: st.DataObject
) -> None:
    p = pure("protocol.message")
    body = b""
    for msg, at in batch:
        rec = encode(message_c, msg, at)
        assert rec == encode(p, msg, at)
        body += rec
    body += p.encode_blank(16)
    # Damage one byte now and then: the parsers must then fail alike.
    if data.draw(st.booleans()):
        i = data.draw(st.integers(0, len(body) - 1))
        body = body[:i] + bytes([body[i] ^ data.draw(st.integers(1, 255))]) + body[i + 1 :]

    def parse_all(mod: ModuleType) -> Any:
        return [record_fields(r) for r in mod.iter_records(body)]

    def dispatch(mod: ModuleType) -> Any:
        size = mod.check_record(body, 0, len(body))
        return info_fields(mod.read_info(body, 0, size)), mod.record_tags(body, 0)

    assert outcome(parse_all, message_c) == outcome(parse_all, p)
    assert outcome(dispatch, message_c) == outcome(dispatch, p)


@SETTINGS
@given(messages, offsets, st.integers(0, 64))
def test_encode_into_writes_the_same_bytes(
    msg: dict[str, Any], at: dict[str, Any], pos: int
) -> None:
    p = pure("protocol.message")
    props = message_c.encode_properties(message_c.Message(**msg).all_properties())
    assert props == p.encode_properties(p.Message(**msg).all_properties())
    topic = msg["topic"].encode()
    assert outcome(message_c.check_sizes, topic, props) == outcome(p.check_sizes, topic, props)
    args = dict(
        topic_raw=topic, props_raw=props, body=msg["body"], flag=msg["flag"],
        born_timestamp=msg["born_timestamp"], born_host_raw=message_c.pack_host(msg["born_host"]),
        **at,
    )  # fmt: skip
    bufs = []
    for mod in (message_c, p):
        buf = bytearray(pos + 2000)
        size = mod.RecordEncoder("10.1.2.3:9876").encode_into(buf, pos, **args)
        bufs.append((size, bytes(buf)))
    assert bufs[0] == bufs[1]
    for fn in ("pack_host", "tag_hash"):
        arg = msg["born_host"] if fn == "pack_host" else msg["tags"]
        assert getattr(message_c, fn)(arg) == getattr(p, fn)(arg)
    assert message_c.make_msg_id(msg["born_host"], at["physical_offset"]) == p.make_msg_id(
        msg["born_host"], at["physical_offset"]
    )


# -- typed requests: send, pull --------------------------------------------------------------


@SETTINGS
@given(
    messages,
    st.integers(-1, 1000),
    st.none() | st.tuples(st.integers(0, 2**40), st.integers(0, 2**20), st.integers(0, 2**40)),
)
def test_send_requests_encode_and_parse_alike(
    msg: dict[str, Any], queue_id: int, producer: tuple[int, int, int] | None
) -> None:
    p = pure("protocol.broker_requests.send")
    from protocol.idempotence import ProducerSeq

    seq = None if producer is None else ProducerSeq(*producer)
    props = message_c.encode_properties(msg["properties"]).decode()
    fields = dict(
        topic=msg["topic"], body=msg["body"], queue_id=queue_id, keys=msg["keys"],
        tags=msg["tags"], properties=props, flag=msg["flag"],
        born_timestamp=msg["born_timestamp"], born_host=msg["born_host"], producer=seq,
    )  # fmt: skip
    wire_c = send_c.SendRequest(**fields).encode()
    assert wire_c == p.SendRequest(**fields).encode()
    header, body = wire_c
    got_c = outcome(send_c.SendRequest.parse, header, body)
    got_p = outcome(p.SendRequest.parse, header, body)
    assert got_c[0] == got_p[0] == "ok"
    assert tuple(got_c[1]) == tuple(got_p[1])
    # A batch's messages have bodies (an empty one is refused), its flag is not sent.
    batch = [message_c.Message(**{**msg, "body": msg["body"] or b"x", "flag": 0})]
    req_c = send_c.SendBatchRequest(topic=msg["topic"], queue_id=queue_id, messages=tuple(batch))
    req_p = p.SendBatchRequest(topic=msg["topic"], queue_id=queue_id, messages=tuple(batch))
    assert req_c.encode() == req_p.encode()
    header, body = req_c.encode()
    parse_c = outcome(send_c.SendBatchRequest.parse, header, body, born_host="1.2.3.4:5")
    parse_p = outcome(p.SendBatchRequest.parse, header, body, born_host="1.2.3.4:5")
    assert parse_c[0] == "ok"
    assert repr(parse_c) == repr(parse_p).replace("_pure.", "")


@SETTINGS
@given(st.binary(min_size=0, max_size=24), st.sampled_from(["", "legacy"]))
def test_a_send_request_s_producer_seq_field_is_parsed_alike(packed: bytes, extra: str) -> None:
    # producerSeq of any length and value (the ranges' tops: a first byte of 0x80 and above),
    # alone or beside the three fields of earlier SDKs: the same request or the same refusal.
    p = pure("protocol.broker_requests.send")
    header: dict[str, Any] = {"topic": "T", "queueId": 0, "producerSeq": packed}
    if extra:
        header.update(producerId=1, producerEpoch=0, sequence=0)
    got_c = outcome(send_c.SendRequest.parse, header, b"x")
    got_p = outcome(p.SendRequest.parse, header, b"x")
    assert repr(got_c) == repr(got_p).replace("_pure.", "")


@SETTINGS
@given(headers, st.none() | st.binary(max_size=40))
def test_any_header_parses_alike(header: dict[str, Any], body: bytes | None) -> None:
    """Request parsers given arbitrary headers: the same request or the same refusal."""
    for name, cls in (
        ("protocol.broker_requests.send", "SendRequest"),
        ("protocol.pull", "PullRequest"),
    ):
        c, p = __import__(name, fromlist=["_"]), pure(name)
        got_c = outcome(getattr(c, cls).parse, header, body)
        got_p = outcome(getattr(p, cls).parse, header, body)
        assert repr(got_c) == repr(got_p).replace("_pure.", "")


@SETTINGS
@given(
    st.fixed_dictionaries(
        {
            "group": st.text(min_size=1, max_size=10),
            "topic": st.text(min_size=1, max_size=10),
            "queue_id": st.integers(0, 2**31 - 1),
            "offset": st.integers(0, 2**62),
            "max_count": st.integers(1, 1000),
            "max_bytes": st.none() | st.integers(1, 2**30),
            "suspend_ms": st.integers(0, 60_000),
            "subscription": st.sampled_from(["*", "TagA || TagB", "a > 1"]),
        }
    )
)
def test_pull_requests_encode_alike(fields: dict[str, Any]) -> None:
    p = pure("protocol.pull")
    got_c = outcome(lambda: pull_c.PullRequest(**fields).encode())
    got_p = outcome(lambda: p.PullRequest(**fields).encode())
    assert got_c == got_p


# -- HA headers, Raft messages, POP receipt handles -------------------------------------------


@SETTINGS
@given(
    st.integers(0, 2**62),
    st.integers(0, 2**31 - 1),
    st.integers(0, 2**62),
    st.binary(max_size=300),
    st.lists(st.integers(0, 400), max_size=5),
)
def test_ha_transfers_encode_and_decode_alike(
    offset: int, epoch: int, confirm: int, body: bytes, cuts: list[int]
) -> None:
    p = pure("protocol.ha")
    t = ha_c.MasterTransfer(
        offset=offset,
        epoch=epoch,
        epoch_start_offset=offset // 2,
        confirm_offset=confirm,
        body=body,
    )
    wire = ha_c.encode_master_transfer(t)
    assert wire == p.encode_master_transfer(t)
    assert ha_c.encode_transfer_header(t) == p.encode_transfer_header(t)
    ack = ha_c.SlaveAck(max_offset=offset)
    assert ha_c.encode_slave_ack(ack) == p.encode_slave_ack(ack)

    def decode(mod: ModuleType, cls: str, data: bytes) -> Any:
        dec = getattr(mod, cls)()
        out = []
        pos = 0
        for cut in [*sorted(cuts), len(data)]:
            got, err = dec.feed_until_error(data[pos : max(pos, cut)])
            out += [repr(m) for m in got]
            if err is not None:
                return out, f"{type(err).__name__}: {err}"
            pos = max(pos, cut)
        return out, None

    for cls, data in (
        ("MasterStreamDecoder", wire * 2),
        ("SlaveStreamDecoder", ha_c.encode_slave_ack(ack) + body),
        ("MasterStreamDecoder", body),
    ):
        assert repr(outcome(decode, ha_c, cls, data)) == repr(
            outcome(decode, p, cls, data)
        ).replace("_pure.", "")


@SETTINGS
@given(_message_strategy())
def test_raft_messages_encode_alike(message: Any) -> None:
    p = pure("protocol.raft")
    wire = raft_c.encode(message)
    assert wire == p.encode(message)
    assert repr(raft_c.decode(wire)) == repr(p.decode(wire))


@SETTINGS
@given(st.binary(max_size=120))
def test_raft_garbage_fails_alike(raw: bytes) -> None:
    p = pure("protocol.raft")
    assert repr(outcome(raft_c.decode, raw)) == repr(outcome(p.decode, raw))


names = st.text(
    alphabet=st.characters(min_codepoint=33, max_codepoint=0x2FF), min_size=1, max_size=20
)


@SETTINGS
@given(
    names, names, names,
    st.integers(0, 65535), st.integers(0, 2**62), st.integers(0, 2**50),
    st.integers(0, 2**32 - 1), st.integers(0, 2**62), st.integers(0, 40), st.integers(0, 255),
)  # fmt: skip
def test_receipt_handles_encode_and_decode_alike(
    broker: str, group: str, topic: str, qid: int, off: int, pop_ms: int, inv: int, ck: int,
    cut: int, flip: int,
) -> None:  # fmt: skip
    p = pure("protocol.pop")
    key = pop_c.HandleKey(b"k" * 16)
    handle = pop_c.ReceiptHandle(broker, group, topic, qid, off, pop_ms, inv, ck)
    text = pop_c.encode_handle(handle, key)
    assert text == p.encode_handle(handle, p.HandleKey(b"k" * 16))
    altered = text[:cut] + chr(ord(text[cut % len(text)]) ^ (flip & 1)) + text[cut + 1 :]
    for t in (text, altered, text[:cut]):
        got_c = outcome(pop_c.decode_handle, t, key, broker)
        got_p = outcome(p.decode_handle, t, p.HandleKey(b"k" * 16), broker)
        assert repr(got_c) == repr(got_p)
        assert repr(outcome(pop_c.peek_handle, t)) == repr(outcome(p.peek_handle, t))


def test_ci_runs_the_compiled_build() -> None:
    """Under CI=true the suite must run compiled (CI installs gcc and python3-dev): a build
    that silently fell back to pure Python would leave the compiled modules untested."""
    if os.environ.get("CI") != "true" or hook.pure_requested():
        pytest.skip("only under CI=true, not in the pure run")
    assert hook.compiled_modules(), "CI=true but the hot modules are not compiled"
