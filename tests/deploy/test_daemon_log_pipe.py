"""A daemon whose log output is a pipe nobody reads serves and stops cleanly on SIGTERM, broker
and controller alike (daemon/logs.py): exit status 0, and a broker's abort marker removed (its
next start is not a crash recovery; a controller's clean stop closes its Raft log).

- The reader is gone (``make run``'s launcher was killed -9): each daemon used to exit 1 on the
  ``BrokenPipeError`` of its ``stopping`` log line, before its clean stop.
- The pipe is full and nobody reads it: each used to block its event loop on the first log line
  that did not fit, and not stop on SIGTERM.

What the broker writes once the full pipe is read again is in tests/broker/test_log_output.py;
the log writer itself on a real pipe in tests/controller/test_log_output.py.
"""

from __future__ import annotations

import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.controller.support import ControllerProc
from tests.support.pipes import LogPipe
from tests.support.procs import BrokerProc, Daemon, free_port

pytestmark = pytest.mark.multiprocess

STOP_DEADLINE = 15.0


@pytest.fixture(params=["broker", "controller"])
def daemon(
    request: pytest.FixtureRequest, tmp_path: Path
) -> Iterator[tuple[Daemon, LogPipe, Path | None]]:
    """The daemon, the pipe its output goes to, and a broker's abort marker (None: a
    controller, which has none)."""
    proc: Daemon
    if request.param == "broker":
        proc = broker = BrokerProc(tmp_path)
        abort: Path | None = broker.data_dir / "abort"
    else:
        port = free_port()
        proc = ControllerProc(tmp_path, "n0", port, f"n0-127.0.0.1:{port}")
        abort = None
    pipe = LogPipe(proc)
    try:
        yield proc, pipe, abort
    finally:
        pipe.close()


def test_a_daemon_whose_log_reader_died_stops_cleanly(
    daemon: tuple[Daemon, LogPipe, Path | None],
) -> None:
    proc, pipe, abort = daemon
    pipe.start()
    pipe.wait_ready()
    pipe.close_read_end()  # the launcher died: every further write is EPIPE
    if abort is not None:
        assert abort.exists()
    proc.signal(signal.SIGTERM)
    assert pipe.exit_status(STOP_DEADLINE) == 0
    if abort is not None:
        assert not abort.exists(), "the broker did not stop cleanly"


def test_a_daemon_whose_log_pipe_is_full_serves_and_stops_cleanly(
    daemon: tuple[Daemon, LogPipe, Path | None],
) -> None:
    proc, pipe, abort = daemon
    assert pipe.fill() > 0
    pipe.start()
    pipe.wait_ready()  # its start-up lines did not fit: it serves anyway
    proc.signal(signal.SIGTERM)
    assert pipe.exit_status(STOP_DEADLINE) == 0
    if abort is not None:
        assert not abort.exists(), "the broker did not stop cleanly"
