"""The cold-read bandwidth (broker/cold_reads.py): the token bucket with the time given, and a
load through aiofiles counting reads, bytes and the time it waited."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from broker.cold_reads import BURST_S, ColdReads, TokenBucket
from storage.cold_read import ColdSpan

RATE = 1_000_000
BURST = int(RATE * BURST_S)


def test_the_first_take_within_the_burst_goes_at_once() -> None:
    bucket = TokenBucket()
    assert bucket.take(BURST, 100.0, RATE) == 0.0


def test_takes_past_the_burst_wait_their_bytes_at_the_rate_in_order() -> None:
    bucket = TokenBucket()
    assert bucket.take(BURST, 100.0, RATE) == 0.0
    assert bucket.take(250_000, 100.0, RATE) == pytest.approx(0.25)
    # A second taker at the same instant waits behind the first.
    assert bucket.take(250_000, 100.0, RATE) == pytest.approx(0.5)
    # Once the debt is waited out, the bucket refills at the rate up to one burst.
    assert bucket.take(0, 100.5, RATE) == 0.0
    assert bucket.take(BURST, 110.0, RATE) == 0.0
    assert bucket.take(1, 110.0, RATE) == pytest.approx(1 / RATE)


def test_a_take_larger_than_the_burst_waits_for_what_it_lacks() -> None:
    bucket = TokenBucket()
    assert bucket.take(4 * BURST, 0.0, RATE) == pytest.approx(3 * BURST / RATE)


def test_over_any_span_the_bytes_stay_within_the_rate_and_one_burst() -> None:
    bucket = TokenBucket()
    now, handed = 0.0, 0
    for _ in range(1000):
        wait = bucket.take(64 * 1024, now, RATE)
        now += wait  # the reader reads when its wait is over, then asks again
        handed += 64 * 1024
        assert handed <= RATE * now + BURST + 64 * 1024
    assert handed / now == pytest.approx(RATE, rel=0.05)


def test_rate_zero_is_no_limit_and_a_limit_set_later_starts_full() -> None:
    bucket = TokenBucket()
    assert bucket.take(10 * RATE, 0.0, 0) == 0.0
    assert bucket.take(BURST, 1.0, RATE) == 0.0
    assert bucket.take(RATE, 1.0, RATE) == pytest.approx(1.0)


async def test_a_load_reads_the_spans_counts_them_and_waits_for_the_bandwidth(
    tmp_path: Path,
) -> None:
    path = tmp_path / "segment"
    path.write_bytes(os.urandom(1 << 20))
    clock = [50.0]  # the bucket's time stands still: every byte past the burst waits
    reads = ColdReads(lambda: 4 << 20, lambda: clock[0])
    try:
        burst = int((4 << 20) * BURST_S)
        await reads.load([ColdSpan(path, 0, burst)])
        assert (reads.reads, reads.bytes, reads.throttled_s) == (1, burst, 0.0)
        await reads.load([ColdSpan(path, 4096, 100_000), ColdSpan(path, 600_000, 100_000)])
        assert (reads.reads, reads.bytes) == (2, burst + 200_000)
        assert reads.throttled_s == pytest.approx(300_000 / (4 << 20), rel=1e-4)
        # A file gone (retention deleted the segment meanwhile): logged, left to the read.
        await reads.load([ColdSpan(tmp_path / "gone", 0, 10)])
        assert (reads.reads, reads.bytes) == (3, burst + 200_000)
    finally:
        reads.close()


async def test_loads_at_once_of_the_same_bytes_read_them_once(tmp_path: Path) -> None:
    path = tmp_path / "segment"
    path.write_bytes(os.urandom(1 << 20))
    reads = ColdReads(lambda: 1 << 20, lambda: 0.0)  # a tenth of a second waited past the burst
    try:
        first = ColdSpan(path, 0, 300_000)
        second = ColdSpan(path, 100_000, 300_000)  # its first 200,000 bytes are the first's
        await asyncio.gather(reads.load([first]), reads.load([second]))
        assert (reads.reads, reads.bytes) == (2, 400_000)
        # Done: a later load reads again (whether the bytes are still cached is the store's
        # to say, before it asks).
        await reads.load([ColdSpan(path, 0, 1000)])
        assert reads.bytes == 401_000
    finally:
        reads.close()


async def test_a_load_reaching_into_one_in_flight_stops_where_it_starts(tmp_path: Path) -> None:
    path = tmp_path / "segment"
    path.write_bytes(os.urandom(1 << 20))
    reads = ColdReads(lambda: 1 << 20, lambda: 0.0)
    try:
        ahead = ColdSpan(path, 100_000, 300_000)
        behind = ColdSpan(path, 0, 300_000)  # its last 200,000 bytes are the first load's
        first = asyncio.create_task(reads.load([ahead]))
        await asyncio.sleep(0)  # the first load under way
        await reads.load([behind])
        await first
        assert reads.bytes == 400_000
    finally:
        reads.close()


async def test_a_load_reaching_into_one_in_flight_returns_once_that_one_is_done(
    tmp_path: Path,
) -> None:
    # The read that follows a load touches all of its span: bytes another load was still
    # reading would fault in on the event loop.
    path = tmp_path / "segment"
    path.write_bytes(os.urandom(16 << 20))
    reads = ColdReads(lambda: 0, lambda: 0.0)  # no limit: the reads alone take time
    try:
        ahead = asyncio.create_task(reads.load([ColdSpan(path, 4096, (16 << 20) - 4096)]))
        await asyncio.sleep(0)  # the first load under way
        await reads.load([ColdSpan(path, 0, 8192)])
        assert ahead.done()
        assert reads.bytes == 16 << 20
    finally:
        reads.close()
