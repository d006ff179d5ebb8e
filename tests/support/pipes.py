"""A daemon whose stdout and stderr go to a pipe the test holds the read end of, as
``make run``'s launcher gives each daemon (deploy/local_cluster.py): the test can read it, close
it (the launcher died), or leave it full and unread (``| less`` on its first page).

Readiness comes over ``$NOTIFY_SOCKET`` (READY=1, as systemd gets it), not from the log: a full
pipe shows nothing, and a SIGTERM before READY=1 would find no handler in place yet."""

from __future__ import annotations

import os
import socket
import subprocess
import time
import uuid

from tests.support.procs import ROOT, Daemon


def fill_pipe(write_fd: int) -> int:
    """Write to the pipe's ``write_fd`` until the pipe is full; the bytes written (no newline
    among them). ``write_fd`` is left blocking, as it was."""
    os.set_blocking(write_fd, False)
    written = 0
    try:
        while True:
            written += os.write(write_fd, b"x" * 4096)
    except BlockingIOError:
        pass
    finally:
        os.set_blocking(write_fd, True)
    return written


def read_available(read_fd: int) -> bytes:
    """What the pipe's ``read_fd`` holds now, without waiting (it is left non-blocking)."""
    os.set_blocking(read_fd, False)
    chunks: list[bytes] = []
    try:
        while chunk := os.read(read_fd, 65536):
            chunks.append(chunk)
    except BlockingIOError:
        pass
    return b"".join(chunks)


class LogPipe:
    """A pipe for ``daemon``'s output: the daemon writes, the test reads. :meth:`fill` leaves
    no room in it."""

    def __init__(self, daemon: Daemon) -> None:
        self.daemon = daemon
        self.read_fd, self.write_fd = os.pipe()
        self.read_open = True
        self._notify = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self._notify_name = f"rmq-test-logpipe-{uuid.uuid4().hex}"
        self._notify.bind("\0" + self._notify_name)

    def fill(self) -> int:
        """Write until the pipe is full; returns the bytes written (no newline among them).
        The daemon gets an ordinary blocking pipe."""
        return fill_pipe(self.write_fd)

    def start(self) -> None:
        """Start the daemon writing to the pipe; this process keeps only the read end."""
        d = self.daemon
        env = dict(os.environ, **(d.env or {}))
        env.setdefault("PYTHONUNBUFFERED", "1")
        env["NOTIFY_SOCKET"] = "@" + self._notify_name
        d.proc = subprocess.Popen(
            d.argv, stdout=self.write_fd, stderr=self.write_fd, cwd=ROOT, env=env
        )
        os.close(self.write_fd)

    def wait_ready(self, timeout: float = 30.0) -> None:
        """Wait for READY=1 (the daemon serves and SIGTERM stops it cleanly)."""
        deadline = time.monotonic() + timeout
        while True:
            if not self.daemon.alive():
                assert self.daemon.proc is not None
                raise AssertionError(
                    f"{self.daemon.name} exited early with {self.daemon.proc.returncode}"
                )
            self._notify.settimeout(0.2)
            try:
                if self._notify.recv(4096).startswith(b"READY=1"):
                    return
            except TimeoutError:
                if time.monotonic() > deadline:
                    raise AssertionError(
                        f"{self.daemon.name} never sent READY=1 within {timeout:g}s"
                    ) from None

    def read_available(self) -> bytes:
        """What the pipe holds now, without waiting."""
        return read_available(self.read_fd)

    def close_read_end(self) -> None:
        if self.read_open:
            os.close(self.read_fd)
            self.read_open = False

    def exit_status(self, timeout: float) -> int | None:
        """The daemon's exit status once it exited, None if it still runs after ``timeout``."""
        assert self.daemon.proc is not None
        try:
            return self.daemon.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return None

    def close(self) -> None:
        """End the daemon by its PID (SIGTERM, then SIGKILL) and close what is left."""
        self.daemon.stop()
        self.close_read_end()
        self._notify.close()
