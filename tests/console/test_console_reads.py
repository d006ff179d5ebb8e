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


def test_tps_history_keeps_an_hour_and_scales_to_the_highest() -> None:
    from console.reads import BrokerGroup, ClusterView, Replica, TpsHistory

    def view(put: float, get: float) -> ClusterView:
        r = Replica(1, "b:1", "MASTER", True, True, put_tps=put, get_tps=get)
        return ClusterView([], [BrokerGroup("broker-a", "C", 1, "b:1", 1, [1], 1, [r])])

    history = TpsHistory()
    history.record("c", view(10.0, 5.0), now=0.0)
    history.record("c", view(20.0, 0.0), now=1800.0)
    history.record("c", view(40.0, 10.0), now=3700.0)  # the first sample is now past the hour
    chart = history.chart("c", "b:1", now=3700.0, width=100, height=10)
    assert chart["top"] == "40.0"
    assert chart["put"] == "47.2,5.0 100.0,0.0"
    assert chart["get"] == "47.2,10.0 100.0,7.5"
    assert history.chart("c", "elsewhere:1", now=3700.0)["put"] == ""
