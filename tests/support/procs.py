"""Daemons as real subprocesses for multi-process tests.

Every process started here is ended by its PID (SIGTERM, then SIGKILL after a deadline), also
when the test fails. Waits poll a condition against a deadline; there are no bare sleeps.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import signal
import socket
import subprocess
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, TypeVar

from tests.support.wait import wait_until

ROOT = Path(__file__).resolve().parents[2]


_handed_out: set[int] = set()
_random = random.Random()  # seeded from the OS: concurrent test processes pick apart


def python_output(code: str, timeout: float = 60) -> str:
    """What ``python -c code`` prints, run from the repository root in a fresh interpreter (to
    see what a start imports, say); a failure fails the test with its stderr."""
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout, cwd=ROOT
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def rmqctl(
    *args: str, timeout: float = 60, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """``python -m rmqctl *args`` from the repository root, its output captured as text. A
    traceback on stderr fails the test: rmqctl answers every error with a message."""
    proc = subprocess.run(
        [sys.executable, "-m", "rmqctl", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=ROOT,
        env=env,
    )
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc


async def communicate(
    argv: Sequence[str], timeout: float, cwd: Path = ROOT, env: dict[str, str] | None = None
) -> tuple[int, bytes, bytes]:
    """``argv`` run to its end without blocking the running loop: (exit code, stdout, stderr).
    Killed by its PID past ``timeout`` (the wait's TimeoutError fails the test)."""
    proc = await asyncio.create_subprocess_exec(
        *argv,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=env,
        cwd=cwd,
    )
    try:
        out, err = await asyncio.wait_for(proc.communicate(), timeout)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    assert proc.returncode is not None
    return proc.returncode, out, err


async def rmqctl_async(*args: str, timeout: float = 60) -> tuple[int, str, str]:
    """:func:`rmqctl` without blocking the running loop (a consumer or the cluster's members
    keep running on it): (exit code, stdout, stderr). Killed by its PID past ``timeout``."""
    code, out, err = await communicate([sys.executable, "-m", "rmqctl", *args], timeout)
    stderr = err.decode()
    assert "Traceback" not in stderr, stderr
    return code, out.decode(), stderr


_LOWEST_PORT = 12_000
"""Where the ports :func:`free_port` hands out start."""


def ephemeral_ports(path: Path = Path("/proc/sys/net/ipv4/ip_local_port_range")) -> range:
    """The kernel's range of source ports for outgoing connections (Linux's default if it cannot
    be read)."""
    try:
        low, high = (int(x) for x in path.read_text().split())
    except (OSError, ValueError):
        low, high = 32_768, 60_999
    return range(low, high + 1)


def _bindable(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def worker_share(low: int, top: int) -> range:
    """This test process's share of the ports ``[low, top)``: under pytest-xdist each worker
    (``$PYTEST_XDIST_WORKER`` gw0, gw1, ... of ``$PYTEST_XDIST_WORKER_COUNT``) gets a slice of
    its own, so two workers never hand out the same port; otherwise all of them."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    count = os.environ.get("PYTEST_XDIST_WORKER_COUNT", "")
    if not (worker.startswith("gw") and worker[2:].isdigit() and count.isdigit()):
        return range(low, top)
    index, workers = int(worker[2:]), int(count)
    if not 0 <= index < workers:
        return range(low, top)
    size = (top - low) // workers
    return range(low + index * size, low + (index + 1) * size)


def free_port() -> int:
    """A port free now, below the kernel's range of source ports, in this worker's share of them
    (:func:`worker_share`), and not handed out before in this process.

    Below that range because a port taken from it (binding port 0) may be picked again by the
    kernel as the source port of any process's outgoing connection between the moment it is
    handed out and the moment the daemon binds it, or while that daemon is down in a restart:
    then the daemon cannot bind it ("Address already in use"); on a busy machine starting many
    clusters that happened. Outgoing connections never take a port below the range, so only
    another listener could, and a random pick from thousands of ports makes that unlikely."""
    ephemeral = ephemeral_ports()
    top = min(ephemeral.start, 65_536)
    if top - _LOWEST_PORT < 2_000:  # an unusual range leaves too few ports below it
        while True:
            with socket.socket() as s:
                s.bind(("127.0.0.1", 0))
                port = int(s.getsockname()[1])
            if port not in _handed_out:
                _handed_out.add(port)
                return port
    share = worker_share(_LOWEST_PORT, top)
    if len(_handed_out) > len(share) // 2:
        # A long run: forget the ports of tests long finished (one still bound is not bindable).
        _handed_out.clear()
    while True:
        port = _random.randrange(share.start, share.stop)
        if port not in _handed_out and _bindable(port):
            _handed_out.add(port)
            return port


def dead_address() -> str:
    """A loopback address nothing listens on: a port bound, then closed."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{s.getsockname()[1]}"


def port_open(port: int, host: str = "127.0.0.1") -> bool:
    try:
        with socket.create_connection((host, port), timeout=0.2):
            return True
    except OSError:
        return False


class Daemon:
    """One daemon subprocess with its log file."""

    def __init__(
        self, name: str, argv: list[str], log_path: Path, env: dict[str, str] | None = None
    ) -> None:
        self.name = name
        self.argv = argv
        self.log_path = log_path
        self.env = env
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> Daemon:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        log = self.log_path.open("ab")
        env = dict(os.environ, **(self.env or {}))
        env.setdefault("PYTHONUNBUFFERED", "1")
        self.proc = subprocess.Popen(
            self.argv, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT, env=env
        )
        log.close()
        return self

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def kill9(self) -> None:
        if self.alive():
            assert self.proc is not None
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=10)

    def stop(self, timeout: float = 15.0) -> int | None:
        """SIGTERM and wait; SIGKILL past the deadline. Returns the exit status."""
        self.terminate()
        return self.wait_stopped(timeout)

    def terminate(self) -> None:
        """SIGTERM (and SIGCONT: a frozen process must run to stop), without waiting: several
        daemons stop side by side, then :meth:`wait_stopped` each."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            self.proc.send_signal(signal.SIGCONT)

    def wait_stopped(self, timeout: float = 15.0) -> int | None:
        """Wait for the exit :meth:`terminate` asked for; SIGKILL past the deadline. Returns the
        exit status."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        return self.proc.returncode

    def signal(self, sig: int) -> None:
        if self.alive():
            assert self.proc is not None
            os.kill(self.proc.pid, sig)


# Production segments are 1 GiB, allocated for real (posix_fallocate); tests use small ones so a
# suite of many brokers stays within a few hundred MiB of disk.
TEST_SEGMENT_BYTES = 8 << 20


def small_segments_config(
    directory: Path, name: str, extra_toml: str = "", segment_bytes: int = TEST_SEGMENT_BYTES
) -> Path:
    """A TOML file with the settings every test broker shares (small segments), then
    ``extra_toml`` (more keys for this broker). Benchmarks pass the production segment size."""
    path = directory / f"{name}-test.toml"
    directory.mkdir(parents=True, exist_ok=True)
    path.write_text(
        f"commitlog_segment_bytes = {segment_bytes}\n"
        + (
            f"consumequeue_segment_entries = {max(65536, segment_bytes // 128)}\n"
            if "consumequeue_segment_entries" not in extra_toml
            else ""
        )
        # Small key index files too (the production size is 21 MB each).
        + (
            "index_entries_per_file = 65536\nindex_slots_per_file = 16384\n"
            if segment_bytes == TEST_SEGMENT_BYTES and "index_" not in extra_toml
            else ""
        )
        + extra_toml
    )
    return path


def broker_argv(
    listen_port: int,
    data_dir: Path,
    *,
    name: str = "broker-a",
    extra: list[str] | None = None,
    segment_bytes: int = TEST_SEGMENT_BYTES,
    extra_toml: str = "",
) -> list[str]:
    config = small_segments_config(data_dir.parent, name, extra_toml, segment_bytes=segment_bytes)
    return [
        sys.executable, "-m", "broker",
        "--config", str(config),
        "--broker-name", name,
        "--listen", f"127.0.0.1:{listen_port}",
        "--data-dir", str(data_dir),
        "--metrics-port", "0",
        "--log-format", "json",
        # Their defaults, listen port + 1 and + 2, may be taken by another process's ephemeral
        # port (a Spark JVM's, say): an HA port of its own, and gRPC off unless ``extra`` turns
        # it on (the last --grpc-listen wins).
        "--ha-port", str(free_port()),
        "--grpc-listen", "0",
        *(extra or []),
    ]  # fmt: skip


class BrokerProc(Daemon):
    def __init__(
        self,
        tmp: Path,
        *,
        name: str = "broker-a",
        extra: list[str] | None = None,
        port: int | None = None,
        segment_bytes: int = TEST_SEGMENT_BYTES,
        extra_toml: str = "",
    ) -> None:
        self.port = port or free_port()
        self.data_dir = tmp / name
        self.address = f"127.0.0.1:{self.port}"
        argv = broker_argv(
            self.port,
            self.data_dir,
            name=name,
            extra=extra,
            segment_bytes=segment_bytes,
            extra_toml=extra_toml,
        )
        super().__init__(name, argv, tmp / f"{name}.log")

    def start_and_wait(self, timeout: float = 30.0) -> BrokerProc:
        self.start()

        def ready() -> bool:
            if not self.alive():
                raise AssertionError(f"{self.name} exited early:\n{self.log()[-3000:]}")
            return port_open(self.port)

        wait_until(ready, f"{self.name} to listen on {self.port}", timeout)
        return self


B = TypeVar("B", bound=BrokerProc)


@contextlib.contextmanager
def started(proc: B) -> Iterator[B]:
    """``proc`` started and listening; stopped by its PID after, also when the test fails."""
    try:
        proc.start_and_wait()
        yield proc
    finally:
        proc.stop()


def module_broker(name: str, make: Callable[[Path], BrokerProc] = BrokerProc) -> Any:
    """A module's ``broker`` fixture (``broker = module_broker("pop-process")``): one broker,
    ``make`` of a temporary directory named ``name``, started for all the module's tests (module
    scope: they then run on one xdist worker, tests/conftest.py) and stopped by its PID after
    them. Only for tests that each use topics and groups of their own and restart nothing."""
    import pytest  # here, not at the top: bench/ imports this module outside pytest

    @pytest.fixture(name="broker", scope="module")
    def shared(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProc]:
        with started(make(tmp_path_factory.mktemp(name))) as proc:
            yield proc

    return shared


class GrpcBrokerProc(BrokerProc):
    """A lone broker with its gRPC endpoint on a port of its own, ``grpc_port``."""

    def __init__(self, tmp: Path) -> None:
        self.grpc_port = free_port()
        super().__init__(tmp, extra=["--grpc-listen", f"127.0.0.1:{self.grpc_port}"])
