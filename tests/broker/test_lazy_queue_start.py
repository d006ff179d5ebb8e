"""A broker started again after a clean stop opens none of its ConsumeQueues' files until a
queue is used (issue 34: "broker startup with 50k queues under 10 s after a clean stop"; it took
61 s, the store loading and checking every queue at the open, 0.7-0.8 ms each). After kill -9 it
still loads and checks every queue at the open.

Checked on a lone broker process: the ConsumeQueue files it maps once serving (/proc/<pid>/maps)
and its ``commitlog recovered`` log line (``queues``, ``queues_loaded``), then that every queue
serves what it held, takes the next message at the next offset and serves it by PULL, after the
clean restart and after a kill -9. The short variant runs in ``make test``; the 10x column of
bench/scale_bench.py's brokers (10,000 queues) in ``make soak``, which also prints both starts'
times."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from tests.broker.test_queue_descriptors import QUEUES, create_and_fill, one_more_everywhere
from tests.support.procs import BrokerProc
from tests.support.wait import wait_until

pytestmark = pytest.mark.multiprocess


def queue_maps(pid: int) -> int:
    """ConsumeQueue files mapped by process ``pid``."""
    with open(f"/proc/{pid}/maps") as maps:
        return sum(1 for line in maps if "/consumequeue/" in line)


def events(broker: BrokerProc, event: str) -> list[dict[str, Any]]:
    """The broker's log lines of ``event`` (``commitlog recovered``: one per open of its
    store with queues on disk)."""
    return [json.loads(line) for line in broker.log().splitlines() if f'"event": "{event}"' in line]


def start_serving(broker: BrokerProc) -> float:
    """Start ``broker``; seconds until it logs that it serves (it takes its port, where
    connections wait, before it opens its store)."""
    began = time.perf_counter()
    starts = len(events(broker, "broker serving"))
    broker.start_and_wait(120)
    wait_until(lambda: len(events(broker, "broker serving")) > starts, "the broker to serve", 120)
    return time.perf_counter() - began


async def restart_clean_then_killed(tmp: Path, topics: int) -> None:
    queues = topics * QUEUES
    broker = BrokerProc(tmp, extra_toml="consumequeue_segment_entries = 64\n")
    try:
        broker.start_and_wait(60)
        await create_and_fill(broker, topics)
        assert queue_maps(broker.pid) > 0  # the queues written are mapped

        broker.stop()
        clean_start = start_serving(broker)
        # Serving, and no queue asked for yet: none of their files is open.
        assert queue_maps(broker.pid) == 0, "ConsumeQueue files mapped at a clean start"
        opened = events(broker, "commitlog recovered")[-1]
        assert opened["clean"] is True, opened
        assert (opened["queues"], opened.get("queues_loaded")) == (queues, 0), opened
        await one_more_everywhere(broker, queues, [b"m%d"])

        broker.kill9()
        killed_start = start_serving(broker)
        opened = events(broker, "commitlog recovered")[-1]
        assert opened["clean"] is False, opened
        assert (opened["queues"], opened["queues_loaded"]) == (queues, queues), opened
        await one_more_everywhere(broker, queues, [b"m%d", b"n1-%d"])
        print(
            f"{queues:,} queues: start after a clean stop {clean_start:.2f} s, "
            f"after kill -9 {killed_start:.2f} s"
        )
    finally:
        broker.stop()


async def test_a_clean_start_opens_no_queue_and_a_kill_9_start_checks_all(tmp_path: Path) -> None:
    await restart_clean_then_killed(tmp_path, topics=32)  # 256 queues


@pytest.mark.soak
async def test_ten_thousand_queues_after_a_clean_stop_and_after_kill_9(tmp_path: Path) -> None:
    await restart_clean_then_killed(tmp_path, topics=1250)
