"""A broker whose log pipe was full and unread, read again, gets every line, whole, in order
(daemon/logs.py). A broker or controller whose log pipe lost its reader, or is full and unread,
stopping cleanly on SIGTERM: tests/deploy/test_daemon_log_pipe.py.
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
