"""What the console computes itself (no cluster): a body's preview and a topic's kind."""

from __future__ import annotations

from console.reads import PREVIEW_BYTES, body_preview, topic_kind


def test_a_json_body_is_pretty_printed() -> None:
    assert body_preview(b'{"a": [1, 2], "b": "\\u00e9"}') == (
        "JSON",
        '{\n  "a": [\n    1,\n    2\n  ],\n  "b": "\u00e9"\n}',
    )


def test_text_stays_text_and_binary_is_hex() -> None:
    assert body_preview("grüße".encode()) == ("text", "grüße")
    assert body_preview(b"42 apples") == ("text", "42 apples")
    kind, text = body_preview(bytes(range(250, 256)) + b"\x00")
    assert kind == "binary" and text == "00000000  fa fb fc fd fe ff 00"


def test_a_long_body_is_cut_and_says_so() -> None:
    kind, text = body_preview(b"x" * (PREVIEW_BYTES + 10))
    assert kind == "text" and text.endswith("\n... (10 more bytes)")
    # cut through a two-byte character: still text
    kind, text = body_preview("é".encode() * (PREVIEW_BYTES // 2 + 1))
    assert kind == "text"


def test_topic_kinds() -> None:
    assert [topic_kind(t) for t in ("Orders", "%RETRY%g", "%DLQ%g", "RMQ_SYS_TRACE_TOPIC")] == [
        "normal",
        "retry",
        "dlq",
        "system",
    ]
