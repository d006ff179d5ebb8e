"""SEND_BATCH_MESSAGE bodies: entries with a body only (the fast path) and with every optional
field decode to the same messages as before; mistyped entries are refused."""

from __future__ import annotations

import msgpack
import pytest

from protocol.broker_requests.send import SendBatchRequest
from protocol.fields import FieldError
from protocol.message import Message


def _decode_batch(topic: str, body: bytes | None, peer: str) -> list[Message]:
    """What the broker's SEND_BATCH_MESSAGE stores for ``body`` (the codec's parse)."""
    return list(SendBatchRequest.parse({"topic": topic}, body, born_host=peer).messages)


def test_body_only_and_full_entries() -> None:
    body = msgpack.packb(
        [
            {"body": b"a"},
            {
                "body": b"b",
                "keys": "k",
                "tags": "t",
                "properties": {"p": "v"},
                "bornTimestamp": 7,
            },
            {"body": b"c", "keys": None, "properties": None},
        ]
    )
    assert _decode_batch("T", body, "1.2.3.4:5") == [
        Message(topic="T", body=b"a", born_host="1.2.3.4:5"),
        Message(
            topic="T",
            body=b"b",
            keys="k",
            tags="t",
            properties={"p": "v"},
            born_timestamp=7,
            born_host="1.2.3.4:5",
        ),
        Message(topic="T", body=b"c", born_host="1.2.3.4:5"),
    ]


@pytest.mark.parametrize(
    "entries",
    [
        [],
        ["not a map"],
        [{"keys": "no body"}],
        [{"body": b""}],
        [{"body": "text, not bytes"}],
        [{"body": b"x"}, {"body": b"y", "keys": 5}],
        [{"body": b"x", "properties": {"p": 1}}],
        [{"body": b"x", "bornTimestamp": "soon"}],
    ],
)
def test_bad_entries_are_refused(entries: list[object]) -> None:
    with pytest.raises(FieldError):
        _decode_batch("T", msgpack.packb(entries), "peer")


def test_bad_bodies_are_refused() -> None:
    for raw in (None, b"", b"\xc1garbage", msgpack.packb({"body": b"x"})):
        with pytest.raises(FieldError):
            _decode_batch("T", raw, "peer")
