"""A broker keeps the ConsumeQueue files it reads and writes past the mapped ones open, the lately
used ones (and a spare), within its descriptor limit, and loses nothing to a kill -9 (issue 34: past the mapped
limit each put and pull opened its queue's segment file by path and closed it again).

``storage.consumequeue.SegmentFiles`` keeps at most ``consumequeue_open_files`` (2,048) of them
open, an eighth of the descriptor limit when less. Checked on a lone broker process under
``prlimit --nofile=256`` (64 segments mapped, 32 files kept open) with 640 queues, twenty times
as many as it keeps open: after a put to every queue it holds 32 files open and the spare
(/proc/<pid>/fd, less the mapped ones of /proc/<pid>/maps), the spare the last written; then a
kill -9, with entries written through descriptors since closed and through ones still open, and
every message by PULL after the start."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.broker.test_queue_descriptors import QUEUES, limited_broker, one_more_everywhere
from tests.broker.test_queue_put_maps import (
    NOFILE,
    TOPICS,
    mapped_queue_files,
    put_everywhere_backwards,
    start_filled,
)
from tests.support.wait import wait_until

pytestmark = pytest.mark.multiprocess

OPEN = NOFILE // 8
"""Files the broker keeps open past the mapped ones."""


def open_queue_files(pid: int) -> list[str]:
    """The ConsumeQueue files process ``pid`` holds a descriptor of now (one a mapping too)."""
    found = []
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if "/consumequeue/" in target:
            found.append(target)
    return found


def queue_number(path: str) -> int:
    """The queue a ConsumeQueue file belongs to, numbered as the fill numbers them."""
    segment = Path(path)
    return int(segment.parent.parent.name[len("Many") :]) * QUEUES + int(segment.parent.name)


async def test_files_past_the_mapped_ones_stay_open_within_the_limit(tmp_path: Path) -> None:
    queues = TOPICS * QUEUES
    assert queues > 16 * OPEN
    broker = limited_broker(tmp_path, NOFILE)
    try:
        await start_filled(broker)
        await put_everywhere_backwards(broker.address, queues)
        mapped = mapped_queue_files(broker.pid)
        seen: list[int] = []

        def settled() -> tuple[list[str], list[str]] | None:
            held = open_queue_files(broker.pid)
            kept = [path for path in held if path not in mapped]
            seen.append(len(kept))
            return (held, kept) if len(kept) == OPEN + 1 else None

        # The flusher fsyncs each dirty segment through a descriptor of its own, opened by
        # path and closed at once (storage.segment.Segment.fsync): a look while it holds one
        # counts one file more. Once the puts are flushed the files held do not change.
        held, kept = wait_until(
            settled,
            f"{OPEN} ConsumeQueue files kept open past the mapped ones and the spare",
            30,
            on_timeout=lambda: f"files kept open past the mapped ones, as seen: {seen[-20:]}",
        )
        assert len(held) <= NOFILE // 4 + OPEN + 1, len(held)
        # All past the 64 mapped; the spare is the queue written last: the put went from the
        # last queue to the first, so the first one past the mapped (8 in flight: or a few after).
        numbers = sorted(queue_number(path) for path in kept)
        assert numbers[0] >= NOFILE // 4 and numbers[0] < NOFILE // 4 + 8, numbers

        broker.kill9()  # entries written through descriptors closed since and still open
        broker.start_and_wait(120)
        await one_more_everywhere(broker, queues, [b"m%d", b"p%d"])
        within = NOFILE // 4 + OPEN + 1
        wait_until(
            lambda: len(open_queue_files(broker.pid)) <= within,
            f"at most {within} ConsumeQueue files open once the puts are flushed",
            30,
            on_timeout=lambda: f"{len(open_queue_files(broker.pid))} open",
        )
    finally:
        broker.stop()
