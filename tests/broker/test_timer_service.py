"""The broker's timer service in process, on a real lone broker and its real store: put_at (the
retry path's API), and the timer's files treated as a cache (rebuilt from the CommitLog when
they cannot be used)."""

from __future__ import annotations

import dataclasses
import errno
import os
import time
from pathlib import Path

import pytest
import structlog

from broker.broker import Broker
from broker.config import BrokerConfig
from protocol.message import Message, decode_record
from protocol.timer import PROP_TIMER_OUT_MS, PROP_TIMER_SOURCE_OFFSET, PROP_UNIQ_KEY
from storage.timer.wheel import InvalidDeliveryTimeError
from tests.support.wait import stays_async, wait_until_async


def config(tmp_path: Path, **extra: object) -> BrokerConfig:
    return BrokerConfig(
        listen="127.0.0.1:0",
        data_dir=tmp_path / "broker-a",
        metrics_port=0,
        commitlog_segment_bytes=1 << 20,
        consumequeue_segment_entries=1024,
        **extra,  # type: ignore[arg-type]
    )


def now_ms() -> int:
    return time.time_ns() // 1_000_000


async def test_put_at_schedules_and_delivers_and_refuses_bad_times(tmp_path: Path) -> None:
    broker = Broker(config(tmp_path, timer_max_delay_ms=60_000))
    await broker.start()
    try:
        ctx = broker.ctx
        store = ctx.store
        for bad in (-1, now_ms() + 120_000):
            before = store.max_offset
            with pytest.raises(InvalidDeliveryTimeError):
                ctx.timer.put_at(Message(topic="R", body=b"x"), "%RETRY%g", 0, bad)
            assert store.max_offset == before  # nothing stored
        due = now_ms() + 200
        result = ctx.timer.put_at(Message(topic="R", body=b"again"), "%RETRY%g", 0, due)
        assert not ctx.needs_wait(result)  # a lone broker, async flush: acknowledged at once
        assert ctx.timer.pending_count == 1

        async def delivered() -> bool:
            return store.queue_max_offset("%RETRY%g", 0) == 1

        await wait_until_async(delivered, "the retry delivered", 10)
        got = store.get("%RETRY%g", 0, 0, 1, 1 << 20)
        record = decode_record(got.body)
        assert record.body == b"again" and record.store_timestamp >= due
        props = record.properties
        assert int(props[PROP_TIMER_OUT_MS]) >= due
        assert int(props[PROP_TIMER_SOURCE_OFFSET]) == result.physical_offsets[0]
        assert props[PROP_UNIQ_KEY]  # the scheduled record's id
        assert ctx.timer.pending_count == 0
    finally:
        await broker.stop()


@pytest.mark.parametrize("damage", ["progress", "geometry"])
async def test_unusable_timer_files_are_rebuilt_from_the_commitlog(
    tmp_path: Path, damage: str
) -> None:
    cfg = config(tmp_path)
    broker = Broker(cfg)
    await broker.start()
    try:
        hour = now_ms() + 3_600_000
        for i in range(20):
            broker.ctx.timer.put_at(Message(topic="T", body=b"x"), "T", 0, hour + i * 1000)
        soon = broker.ctx.timer.put_at(Message(topic="T", body=b"y"), "T", 0, now_ms())
        await wait_until_async(
            lambda: broker.ctx.store.queue_max_offset("T", 0) == 1, "the due one delivered", 10
        )
        assert soon.physical_offsets and broker.ctx.timer.pending_count == 20
    finally:
        await broker.stop()
    timer_dir = cfg.data_dir / "timer"
    if damage == "progress":
        for name in ("progress", "progress.bak"):
            path = timer_dir / name
            if path.exists():
                path.write_bytes(b"not a progress file")
        cfg = dataclasses.replace(cfg, listen="127.0.0.1:0")
    else:
        cfg = dataclasses.replace(cfg, timer_slot_ms=500)
    again = Broker(cfg)
    await again.start()
    try:
        timer = again.ctx.timer
        assert timer.pending_count == 20  # every far one, and the delivered one not again
        wheel = timer.wheel
        assert wheel is not None and wheel.oldest_offset() is not None
        assert again.ctx.store.queue_max_offset("T", 0) == 1
        # An hour later (simulated: the wheel takes time as an input) every one is due once.
        due = wheel.due(hour + 3_600_000)
        assert len(due) == len({e.commitlog_offset for e in due}) == 20
    finally:
        await again.stop()


async def test_a_delivery_append_that_fails_is_retried_and_delivered_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A full disk when the delivery needs a new ConsumeQueue file (the OS's answer to the
    allocation, as in tests/storage/test_store_disk_full.py): the entries wait, the progress
    mark does not pass them, and once there is space each is delivered once."""
    broker = Broker(config(tmp_path))
    await broker.start()
    try:
        ctx = broker.ctx
        timer = ctx.timer
        timer.put_at(Message(topic="W", body=b"warm"), "W", 0, now_ms())  # timer queue exists
        await wait_until_async(lambda: ctx.store.queue_max_offset("W", 0) == 1, "warm-up", 10)
        wheel = timer.wheel
        assert wheel is not None
        mark = wheel.delivered

        def delivered() -> tuple[int, int]:
            return ctx.store.queue_max_offset("D", 0), ctx.store.queue_max_offset("D", 1)

        def no_space(fd: int, offset: int, length: int) -> None:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

        with monkeypatch.context() as m:
            m.setattr(os, "posix_fallocate", no_space)
            for i in range(3):
                timer.put_at(Message(topic="D", body=b"d%d" % i), "D", i % 2, now_ms())
            await wait_until_async(
                # Handed out by the wheel, held by the service after a failed append.
                lambda: wheel.pending_count == 0 and timer.pending_count == 3,
                "deliveries held back by the full disk",
                10,
            )
            # A few more failed rounds: nothing lands, and the mark stays before the entries.
            await stays_async(
                lambda: delivered() == (0, 0) and wheel.delivered == mark,
                0.3,
                f"D empty and the wheel's mark at {mark}",
                on_failure=lambda: f"D/0, D/1: {delivered()}, mark {wheel.delivered}",
            )
        await wait_until_async(
            lambda: ctx.store.queue_max_offset("D", 0) + ctx.store.queue_max_offset("D", 1) == 3,
            "the deliveries once there is space",
            10,
        )
        await wait_until_async(
            lambda: timer.pending_count == 0 and wheel.delivered > mark,
            "nothing pending and the mark past the delivered entries",
            10,
        )
        await stays_async(
            lambda: delivered() == (2, 1),
            0.3,
            "each delivered once (2 in D/0, 1 in D/1)",
            on_failure=lambda: f"D/0, D/1: {delivered()}",
        )
    finally:
        await broker.stop()


async def test_put_send_admits_a_send_against_one_clock_reading(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """put_send: what the send path asks of the timer, in one call. A broker-only property or
    a delivery time past the maximum delay refuses the whole send with nothing stored; a send
    asking for no time is left to the caller (None); a mixed one stores the ordinary messages
    as usual and the others under the timer topic, every offset in the order given. The clock
    is read once per send: the relative delay and the due time count from the same instant."""
    import broker.timer.service as timer_service
    from broker.timer.schedule import ScheduleRefused

    readings: list[int] = []

    def clock() -> int:
        readings.append(now_ms())
        return readings[-1]

    monkeypatch.setattr(timer_service, "now_ms", clock)
    broker = Broker(config(tmp_path, timer_max_delay_ms=60_000))
    await broker.start()
    try:
        ctx = broker.ctx
        store = ctx.store
        timer = ctx.timer
        ctx.create_topic("T", 1)
        plain = Message(topic="T", body=b"now")
        refused = {
            "reserved": [plain, Message(topic="T", body=b"x", properties={PROP_TIMER_OUT_MS: "1"})],
            "too far": [
                plain,
                Message(topic="T", body=b"y", properties={"TIMER_DELAY_MS": "120000"}),
            ],
        }
        for why, messages in refused.items():
            before = store.max_offset
            with pytest.raises(ScheduleRefused) as exc:
                timer.put_send("T", 0, messages)
            assert store.max_offset == before, why  # nothing stored
            expected = "is reserved" if why == "reserved" else "invalid delivery time"
            assert expected in exc.value.remark
        assert timer.put_send("T", 0, [plain]) is None
        assert store.max_offset == 0  # left to the caller

        readings.clear()
        later = Message(topic="T", body=b"later", properties={"TIMER_DELAY_MS": "300"})
        result = timer.put_send("T", 0, [plain, later, plain])
        assert len(readings) == 1  # one clock reading for the whole send
        assert result is not None and result.count == 3 and result.first_queue_offset == 0
        assert store.queue_max_offset("T", 0) == 2  # the two ordinary ones, at once
        scheduled = decode_record(store.read_raw(result.physical_offsets[1], 1), 0)
        assert int(scheduled.properties[PROP_TIMER_OUT_MS]) == readings[0] + 300
        assert timer.pending_count == 1

        async def delivered() -> bool:
            return store.queue_max_offset("T", 0) == 3

        await wait_until_async(delivered, "the scheduled message delivered", 10)
        record = decode_record(store.get("T", 0, 2, 1, 1 << 20).body)
        assert record.body == b"later"
        assert int(record.properties[PROP_TIMER_SOURCE_OFFSET]) == result.physical_offsets[1]
    finally:
        await broker.stop()


@pytest.mark.parametrize("scheduled", [0, 1])
async def test_a_clean_restart_replays_the_commitlog_from_the_saved_mark(
    tmp_path: Path, scheduled: int
) -> None:
    """The timer's start replays the CommitLog from its saved mark, not from its log's last
    record: with no scheduled message (or one long before the end) that was the whole log at
    every start (issue 34: the start's cost grew with the log, not with what changed)."""
    cfg = config(tmp_path)
    broker = Broker(cfg)
    await broker.start()
    try:
        if scheduled:
            hour = now_ms() + 3_600_000
            broker.ctx.timer.put_at(Message(topic="T", body=b"later"), "T", 0, hour)
        for i in range(50):
            broker.ctx.appender.put("Plain", i % 4, [Message(topic="Plain", body=b"x" * 100)], 100)
        end = broker.ctx.store.max_offset
    finally:
        await broker.stop()
    again = Broker(dataclasses.replace(cfg, listen="127.0.0.1:0"))
    with structlog.testing.capture_logs() as logs:
        await again.start()
    try:
        (opened,) = [e for e in logs if e["event"] == "timer opened"]
        assert opened["replayed_from"] == end, opened
        assert again.ctx.timer.pending_count == scheduled
    finally:
        await again.stop()
