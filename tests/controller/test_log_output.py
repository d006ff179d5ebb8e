"""Log output that is not read never stops a daemon (daemon/logs.py): the writer's own
behaviour on a real pipe (lines whole and in order, a full queue drops and counts, a broken pipe
discards, nothing raises or blocks the caller). A controller or broker whose log pipe lost its
reader, or is full and unread, stopping cleanly on SIGTERM: tests/deploy/test_daemon_log_pipe.py."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator

import pytest

from daemon.logs import LogWriter
from tests.support.pipes import fill_pipe, read_available
from tests.support.wait import wait_until


class Pipe:
    def __init__(self) -> None:
        self.r, self.w = os.pipe()

    def fill(self) -> None:
        fill_pipe(self.w)

    def drain(self) -> bytes:
        return read_available(self.r)

    def close(self) -> None:
        for fd in (self.r, self.w):
            try:
                os.close(fd)
            except OSError:
                pass


@pytest.fixture
def pipe() -> Iterator[Pipe]:
    p = Pipe()
    yield p
    p.close()


def test_lines_are_written_whole_and_in_order(pipe: Pipe) -> None:
    writer = LogWriter(pipe.w)
    for i in range(1000):
        writer.write(f"line {i}")
    assert writer.flush(10)
    assert pipe.drain().decode().splitlines() == [f"line {i}" for i in range(1000)]


def test_a_full_pipe_blocks_no_caller_and_drops_past_the_queue_then_says_how_many(
    pipe: Pipe,
) -> None:
    reports: list[int] = []
    writer = LogWriter(pipe.w, capacity=10, on_dropped=reports.append)
    pipe.fill()
    returned = threading.Event()

    def caller() -> None:
        for i in range(100):  # the writer thread is stuck on the full pipe: nothing waits for it
            writer.write(f"line {i}")
        returned.set()

    # A caller that waited for room would wait for ever: nobody reads the pipe until below.
    threading.Thread(target=caller, daemon=True).start()
    wait_until(returned.is_set, "100 writes to return with the pipe full and unread", 30)
    assert not writer.flush(0.1)  # nobody reads
    assert writer.dropped > 0
    out = b""

    def all_out() -> bool:
        nonlocal out
        out += pipe.drain()
        return writer.flush(0) and bool(reports)

    wait_until(all_out, "the queued lines written and the drop reported")
    lines = out.lstrip(b"x").decode().splitlines()
    numbers = [int(line.removeprefix("line ")) for line in lines]
    assert numbers == sorted(numbers) and numbers[0] == 0
    assert reports == [100 - len(lines)]  # every line is written whole, or counted dropped


def test_a_broken_pipe_discards_and_never_raises(pipe: Pipe) -> None:
    writer = LogWriter(pipe.w)
    writer.write("first")
    assert writer.flush(10)
    os.close(pipe.r)
    for i in range(100):
        writer.write(f"line {i}")  # raised BrokenPipeError with print() on a broken stream
    assert writer.flush(10)
    assert writer.broken


def test_many_threads_write_whole_lines(pipe: Pipe) -> None:
    writer = LogWriter(pipe.w)

    def lines_of(t: int) -> None:
        for i in range(50):
            writer.write(f"{t} {'y' * 5000} {i}")  # longer than PIPE_BUF (4096)

    threads = [threading.Thread(target=lines_of, args=(t,)) for t in range(4)]
    out = b""
    for t in threads:
        t.start()

    def done() -> bool:
        nonlocal out
        out += pipe.drain()
        return not any(t.is_alive() for t in threads) and writer.flush(0)

    wait_until(done, "every thread's lines written")
    out += pipe.drain()
    lines = out.decode().splitlines()
    assert len(lines) == 200
    assert all(len(line.split(" ")) == 3 for line in lines)
