"""A broker whose log output is a pipe stops cleanly on SIGTERM however that pipe is (daemon/logs.py).

- The reader is gone (``make run``'s launcher was killed -9): the broker used to exit 1 on the
  ``BrokenPipeError`` of its ``stopping`` log line, before its clean stop, leaving the abort
  marker (its next start recovered as after a crash).
- The pipe is full and nobody reads it: the broker used to block its event loop on the first
  log line that did not fit, and not stop on SIGTERM.
- Read again, the full pipe gets every line, whole, in order.
"""

from __future__ import annotations

import json
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.pipes import LogPipe
from tests.support.procs import BrokerProc

pytestmark = pytest.mark.multiprocess

STOP_DEADLINE = 15.0


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[tuple[BrokerProc, LogPipe]]:
    proc = BrokerProc(tmp_path)
    pipe = LogPipe(proc)
    try:
        yield proc, pipe
    finally:
        pipe.close()


def test_a_broker_whose_log_reader_died_stops_cleanly(
    broker: tuple[BrokerProc, LogPipe],
) -> None:
    proc, pipe = broker
    pipe.start()
    pipe.wait_ready()
    pipe.close_read_end()  # the launcher died: every further write is EPIPE
    assert (proc.data_dir / "abort").exists()
    proc.signal(signal.SIGTERM)
    assert pipe.exit_status(STOP_DEADLINE) == 0
    assert not (proc.data_dir / "abort").exists(), "the broker did not stop cleanly"


def test_a_broker_whose_log_pipe_is_full_serves_and_stops_cleanly(
    broker: tuple[BrokerProc, LogPipe],
) -> None:
    proc, pipe = broker
    assert pipe.fill() > 0
    pipe.start()
    pipe.wait_ready()  # its start-up lines did not fit: it serves anyway
    proc.signal(signal.SIGTERM)
    assert pipe.exit_status(STOP_DEADLINE) == 0
    assert not (proc.data_dir / "abort").exists(), "the broker did not stop cleanly"


def test_a_broker_whose_full_log_pipe_is_read_again_writes_its_lines_whole(
    broker: tuple[BrokerProc, LogPipe],
) -> None:
    proc, pipe = broker
    filler = pipe.fill()
    pipe.start()
    pipe.wait_ready()
    proc.signal(signal.SIGTERM)
    out = b""
    status = None
    deadline = time.monotonic() + STOP_DEADLINE
    while status is None and time.monotonic() < deadline:  # a reader back on the pipe
        out += pipe.read_available()
        status = pipe.exit_status(0.05)
    out += pipe.read_available()
    assert status == 0
    events = [json.loads(line)["event"] for line in out[filler:].decode().splitlines()]
    assert "log lines dropped" not in events
    assert events.index("broker serving") < events.index("stopping"), events
    assert events[-1] == "broker stopped", events
