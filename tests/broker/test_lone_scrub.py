"""A broker without controllers scrubs too (issue 31 item 2): it finds a flipped byte before a
consumer does; with no replica to repair it from, the damage is counted as unrepairable (the
alert's metric) and a pull of it says so, with the way past."""

from __future__ import annotations

import urllib.request
from pathlib import Path

import pytest

from protocol.codes import ResponseCode
from tests.storage.test_store_corruption import (
    OnDisk,
    corrupt_count,
    filled_then_stopped,
    flip,
    pull,
)
from tests.support.procs import BrokerProc, free_port
from tests.support.wait import stays, wait_until

pytestmark = pytest.mark.multiprocess


def figure(port: int, name: str) -> float:
    """The sum of ``name``'s samples; -1 while the metrics port does not answer yet."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as resp:
            text = resp.read().decode()
    except OSError:
        return -1.0
    total = 0.0
    for line in text.splitlines():
        if line.startswith(name):
            total += float(line.rsplit(" ", 1)[1])
    return total


async def stopped_to_scrub(
    broker_factory: type[BrokerProc], tmp_path: Path, metrics_port: int
) -> tuple[BrokerProc, dict[int, OnDisk]]:
    """filled_then_stopped's broker (stopped cleanly) and its records on disk, its config file
    without ``scrub_bytes_per_s = 0`` (no scrub): started again, it scrubs with the defaults."""
    broker, on_disk = await filled_then_stopped(broker_factory, tmp_path, metrics_port, kill=False)
    config = Path(broker.argv[broker.argv.index("--config") + 1])
    config.write_text(config.read_text().replace("scrub_bytes_per_s = 0\n", ""))
    return broker, on_disk


async def test_a_lone_broker_scrub_finds_damage_it_cannot_repair(
    broker_factory: type[BrokerProc], tmp_path: Path
) -> None:
    port = free_port()
    broker, on_disk = await stopped_to_scrub(broker_factory, tmp_path, port)
    bad = on_disk[10]
    flip(bad, 200)
    since = len(broker.log())
    broker.start_and_wait()

    wait_until(
        lambda: figure(port, "rmq_broker_scrub_unrepairable_total") == 1,
        "the scrub to find the damage",
        30,
    )
    assert figure(port, "rmq_broker_scrub_damage_found_total") == 1
    assert corrupt_count(port, "scrub") == 1
    line = f"commitlog damaged: {bad.size} bytes at offset {bad.physical}"
    # Log lines are written by the daemon's log thread: the metric can come first.
    wait_until(lambda: line in broker.log()[since:], "the damage logged", 10)
    code, header, _ = await pull(broker.address, 10)
    assert code == ResponseCode.MESSAGE_CORRUPT
    assert header["physicalOffset"] == bad.physical
    remark = str(header["remark"])
    assert "no other replica to repair it from" in remark
    assert "rmqctl skipCorruptMessage -t Damaged -q 0 -o 10" in remark


async def test_an_idle_broker_rests_between_scrub_passes(
    broker_factory: type[BrokerProc], tmp_path: Path
) -> None:
    # Found on make run: with a small log, the scrub wrapped and began again at once, re-reading
    # the whole log several times a second (13% of a core per idle broker, a log line a pass).
    # A pass now starts no sooner than scrub_interval_hours (default a week) after the last.
    port = free_port()
    broker, _ = await stopped_to_scrub(broker_factory, tmp_path, port)
    since = len(broker.log())
    broker.start_and_wait()

    wait_until(lambda: "scrub pass ended" in broker.log()[since:], "the first scrub pass", 30)
    scrubbed = figure(port, "rmq_broker_scrub_bytes_total")
    assert scrubbed > 0
    stays(
        lambda: figure(port, "rmq_broker_scrub_bytes_total") == scrubbed,
        3.0,
        "the scrub to rest after its pass (no byte read again)",
    )
    assert broker.log()[since:].count("scrub pass ended") == 1
