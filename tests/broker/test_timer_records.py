"""The timer's classification of CommitLog records (broker.timer.records): pure, on real records
written by a real store."""

from __future__ import annotations

from pathlib import Path

from broker.timer.records import Delivered, Recalled, Scheduled, timer_events
from protocol.message import Message, make_msg_id
from storage.store import MessageStore, StoreConfig

HOST = "127.0.0.1:10911"


def store(tmp_path: Path) -> MessageStore:
    s = MessageStore(
        StoreConfig(data_dir=tmp_path, store_host=HOST, commitlog_segment_bytes=1 << 20)
    )
    s.open()
    return s


def put(s: MessageStore, topic: str, body: bytes, props: dict[str, str], ts: int = 1000) -> int:
    return s.put(
        topic, 0, [Message(topic=topic, body=body, properties=props)], ts
    ).physical_offsets[0]


def test_each_timer_record_kind_is_found_and_others_are_skipped(tmp_path: Path) -> None:
    s = store(tmp_path)
    try:
        put(s, "T", b"plain", {})
        put(s, "T", b"TIMER_OUT_MS\x01 in a body is not a property", {"a": "b"})
        sched = put(
            s,
            "rmq_sys_wheel_timer",
            b"x",
            {"REAL_TOPIC": "T", "REAL_QID": "0", "TIMER_OUT_MS": "5000"},
            1200,
        )
        put(s, "T", b"user", {"TIMER_OUT_MS": "7"})  # no source offset: not a delivery
        recall_id = make_msg_id(HOST, sched)
        recall = put(
            s,
            "rmq_sys_wheel_timer",
            b"recall",
            {"TIMER_DEL_UNIQKEY": recall_id, "TIMER_OUT_MS": "5000"},
            1300,
        )
        put(s, "T", b"x", {"TIMER_OUT_MS": "5000", "TIMER_SOURCE_OFFSET": str(sched)})
        end = s.max_offset
        raw = bytes(s.read_raw(0, end))
        events = timer_events(raw, 0)
        sched_size = s.read_raw(sched, 1).nbytes
        assert events == [
            Scheduled(sched, sched_size, 5000, 1200),
            Recalled(sched, 5000, recall + s.read_raw(recall, 1).nbytes, 1300),
            Delivered(5000, sched),
        ]
        # A chunk that starts mid-log carries its base offset through.
        assert timer_events(raw[recall:], recall)[0] == events[1]
        # The property name only inside a body: nothing.
        assert timer_events(raw[:sched], 0) == []
    finally:
        s.close()
