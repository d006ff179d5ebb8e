"""The official RocketMQ 5 clients (the Python one from PyPI, the Node.js one from npm) in
processes of their own, with HOME at a test's temp dir: they write their logs and caches under
HOME, and nothing of the developer's environment reaches them but what is named here."""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

import msgpack
import pytest

from protocol.codes import RequestCode
from remoting.client import ConnectionPool
from tests.support.procs import communicate

PATH = "/usr/bin:/bin"


def client_env(home: Path, **extra: str) -> dict[str, str]:
    """The whole environment of an official client's process: HOME, PATH and ``extra``."""
    return {"HOME": str(home), "PATH": PATH, **extra}


def run_script(
    script: str,
    home: Path,
    *args: str,
    env: dict[str, str] | None = None,
    timeout: float = 90,
    logs: Callable[[], str] | None = None,
) -> str:
    """``script`` (Python, with ``args``) run to its end in ``home``; its last stdout line.

    A non-zero exit fails the test with the tail of its stderr (and ``logs()``, the servers'
    logs, when given)."""
    done = subprocess.run(
        [sys.executable, "-c", script, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=client_env(home) if env is None else env,
        cwd=home,
    )
    assert done.returncode == 0, done.stderr[-3000:] + (f"\n{logs()}" if logs else "")
    return done.stdout.strip().splitlines()[-1]


async def run_to_end(
    argv: Sequence[str], home: Path, env: dict[str, str] | None = None, timeout: float = 90
) -> dict[str, Any]:
    """``argv`` run to its end in ``home`` without blocking the event loop; its last stdout
    line, a JSON object. A non-zero exit fails the test with the tails of its output."""
    code, out, err = await communicate(
        argv, timeout, cwd=home, env=client_env(home) if env is None else env
    )
    assert code == 0, err.decode()[-3000:] + out.decode()[-2000:]
    result: dict[str, Any] = json.loads(out.decode().strip().splitlines()[-1])
    return result


SQL92_CONSUMER = """
import json, sys, time
from rocketmq import ClientConfiguration, Credentials, FilterExpression, SimpleConsumer
from rocketmq.grpc_protocol import FilterType

endpoint, topic, group, want, expr = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5]
deadline_s, wait_s = int(sys.argv[6]), int(sys.argv[7])
out = {"bodies": [], "error": None}
consumer = SimpleConsumer(
    ClientConfiguration(endpoint, Credentials(), request_timeout=10),
    group,
    {topic: FilterExpression(expr, FilterType.SQL)},
    await_duration=2,
)
consumer.startup()
try:
    deadline = time.time() + deadline_s
    while len(out["bodies"]) < want and time.time() < deadline:
        try:
            msgs = consumer.receive(32, wait_s)
        except Exception as e:
            out["error"] = f"{type(e).__name__}: {e}"
            break
        for m in msgs:
            out["bodies"].append(m.body.decode())
            consumer.ack(m)
    if out["error"] is None:
        out["left"] = [m.body.decode() for m in consumer.receive(32, wait_s)]
finally:
    consumer.shutdown()
print(json.dumps(out))
"""
"""The official SimpleConsumer with a SQL92 filter, as a script run with the arguments
``endpoint topic group want expression deadline_s wait_s``: it receives (32 at a time, each
receive waiting ``wait_s`` seconds) and acks until ``want`` bodies came or ``deadline_s`` seconds
passed, then receives once more. Its output, one JSON line: ``bodies``, ``left`` (what the last
receive got) and ``error`` (None; else the exception a receive raised, and no ``left``)."""


class StreamingClient:
    """``script`` (Python) running until a stop file exists, which it gets as its last
    argument. Its stdout is one JSON object a line, gathered in ``lines`` as they come; its
    stderr in ``errors``. Leaving the ``with`` block creates the stop file, waits for the
    process (kills it after 30 s) and for the readers; ``returncode`` is then its exit code.
    ``runner`` runs the script (default: Python's ``-c``; ``(node,)`` runs a .js file's path),
    with ``env`` added to :func:`client_env`'s."""

    def __init__(
        self,
        script: str,
        home: Path,
        *args: str,
        runner: Sequence[str] = (sys.executable, "-c"),
        env: dict[str, str] | None = None,
    ) -> None:
        self.stop_file = home / "stop"
        self.lines: list[dict[str, Any]] = []
        self.errors: list[str] = []
        self.proc = subprocess.Popen(
            [*runner, script, *args, str(self.stop_file)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=client_env(home, **(env or {})),
            cwd=home,
        )
        proc = self.proc
        self._readers = [
            threading.Thread(target=lambda: self.lines.extend(map(json.loads, proc.stdout or ()))),
            threading.Thread(target=lambda: self.errors.extend(proc.stderr or ())),
        ]
        for r in self._readers:
            r.start()

    @property
    def returncode(self) -> int | None:
        return self.proc.returncode

    def stderr_tail(self, lines: int = 30) -> str:
        return "".join(self.errors[-lines:])

    def stop(self) -> None:
        self.stop_file.touch()
        try:
            self.proc.wait(30)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait(10)
            for r in self._readers:
                r.join(10)

    def __enter__(self) -> StreamingClient:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self.stop()


async def pop_inflight(address: str, group: str) -> int:
    """How many of ``group``'s POP deliveries (the official SimpleConsumer receives by POP) the
    broker at ``address`` holds in flight, not acked: GET_CONSUME_STATS' popInflight."""
    pool = ConnectionPool()
    try:
        conn = await pool.get(address)
        resp = await conn.request(RequestCode.GET_CONSUME_STATS, {"consumerGroup": group})
        doc = msgpack.unpackb(resp.body or b"", raw=False)
        rows = doc["groups"].get(group, [])
        return sum(int(r.get("popInflight", 0)) for r in rows)
    finally:
        pool.close()


def npm_modules(package: Path, what: str) -> Path:
    """node_modules with the packages of ``package``'s lockfile (``npm ci --ignore-scripts``
    into a cache directory named by the lockfile's hash, once per machine). Without node or
    npm the test is skipped, except under CI=true, where that is a failure."""
    node, npm = shutil.which("node"), shutil.which("npm")
    if node is None or npm is None:
        why = f"node and npm are needed for {what}"
        if os.environ.get("CI"):
            pytest.fail(f"{why} (.ci/run installs them)")
        pytest.skip(why)
    lock = (package / "package-lock.json").read_bytes()
    home = (
        Path(tempfile.gettempdir())
        / f"rmq-test-{package.name}-{hashlib.sha256(lock).hexdigest()[:16]}"
    )
    home.mkdir(exist_ok=True)
    done = home / "node_modules" / ".rmq-installed"
    with open(home / ".lock", "w") as guard:
        fcntl.flock(guard, fcntl.LOCK_EX)  # one install at a time on this machine
        if not done.exists():
            for name in ("package.json", "package-lock.json"):
                shutil.copy(package / name, home / name)
            run = subprocess.run(
                [
                    npm,
                    "ci",
                    "--ignore-scripts",
                    "--no-audit",
                    "--no-fund",
                    "--cache",
                    str(home / ".npm"),
                ],
                cwd=home,
                capture_output=True,
                text=True,
                timeout=600,
                env={**os.environ, "HOME": str(home)},
            )
            assert run.returncode == 0, (
                f"npm ci failed:\n{run.stdout[-2000:]}\n{run.stderr[-3000:]}"
            )
            done.touch()
    return home / "node_modules"
