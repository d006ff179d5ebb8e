"""Refusals at start that must come before anything is written (issue 9, item 9).

- A broker started on another broker group's data directory refuses with one line naming both
  groups and exit status 2, alone or in controller mode (it used to serve the other group's data
  silently, or loop on 2010 with the other group's identity).
- A port in use is one line at start, and neither the broker's data directory nor the
  controller's Raft directory was created on the way.
"""

from __future__ import annotations

import socket
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from protocol.codes import RequestCode, ResponseCode
from remoting.client import RemotingClient
from tests.support.cluster import ControllerNode, lone_controller
from tests.support.procs import BrokerProc, Daemon, free_port, port_open
from tests.support.wait import wait_until

pytestmark = pytest.mark.multiprocess


def exit_status(d: Daemon, timeout: float = 20.0) -> int:
    assert d.proc is not None
    try:
        return d.proc.wait(timeout=timeout)
    except Exception:
        raise AssertionError(f"{d.name} did not exit:\n{d.log()[-3000:]}") from None


def refusal_line(d: Daemon) -> str:
    """The one line a refusal prints; nothing else the daemon printed looks like a failure."""
    log = d.log()
    assert "Traceback" not in log, log[-3000:]
    lines = [line for line in log.splitlines() if "cannot start" in line]
    assert len(lines) == 1, log[-3000:]
    return lines[0]


@pytest.fixture
def controller(tmp_path: Path) -> Iterator[ControllerNode]:
    with lone_controller(tmp_path) as c:
        yield c


async def send_one(address: str) -> None:
    conn = await RemotingClient.connect(address)
    try:
        resp = await conn.request(RequestCode.SEND_MESSAGE, {"topic": "T", "queueId": 0}, b"m")
        assert resp.code == ResponseCode.SUCCESS, resp.header
    finally:
        conn.close()


def broker_on(
    factory: type[BrokerProc], tmp: Path, data_dir: Path, name: str, extra: list[str]
) -> BrokerProc:
    b = factory(tmp, name=name, extra=extra)
    i = b.argv.index("--data-dir")
    b.argv[i + 1] = str(data_dir)
    b.data_dir = data_dir
    return b


@pytest.mark.parametrize("mode", ["standalone", "controller"])
async def test_a_broker_refuses_another_groups_data_directory(
    broker_factory: type[BrokerProc], tmp_path: Path, request: pytest.FixtureRequest, mode: str
) -> None:
    extra: list[str] = []
    if mode == "controller":
        c: ControllerNode = request.getfixturevalue("controller")
        extra = ["--controllers", c.address, "--ha-port", str(free_port())]
    data_dir = tmp_path / "store"
    first = broker_on(broker_factory, tmp_path, data_dir, "broker-a", extra).start_and_wait()
    if mode == "standalone":
        await send_one(first.address)
    else:
        wait_until(lambda: "broker id applied" in first.log(), "broker-a to register", 30)
    assert first.stop() == 0

    other = broker_on(broker_factory, tmp_path, data_dir, "broker-b", extra)
    other.start()
    assert exit_status(other) == 2
    line = refusal_line(other)
    assert "'broker-a'" in line and "'broker-b'" in line and str(data_dir) in line, line
    assert not port_open(other.port)

    # The owner still starts on it.
    again = broker_on(broker_factory, tmp_path, data_dir, "broker-a", extra).start_and_wait()
    assert again.alive()


def listening_on(port: int) -> socket.socket:
    s = socket.socket()
    s.bind(("127.0.0.1", port))
    s.listen()
    return s


@pytest.mark.parametrize("which", ["listen", "ha", "metrics"])
def test_a_broker_whose_port_is_in_use_writes_nothing(
    broker_factory: type[BrokerProc], tmp_path: Path, which: str
) -> None:
    ha_port, metrics_port = free_port(), free_port()
    extra = [
        # Controller mode (it has an HA port); it exits before it would contact them.
        "--controllers", f"127.0.0.1:{free_port()}",
        "--ha-port", str(ha_port),
        "--metrics-port", str(metrics_port),
    ]  # fmt: skip
    b = broker_factory(tmp_path, extra=extra)
    taken = {"listen": b.port, "ha": ha_port, "metrics": metrics_port}[which]
    with listening_on(taken):
        b.start()
        assert exit_status(b) != 0
        line = refusal_line(b)
    assert f"127.0.0.1:{taken}" in line, line
    assert not b.data_dir.exists()


@pytest.mark.parametrize("which", ["peer", "metrics"])
def test_a_controller_whose_port_is_in_use_writes_no_raft_group(tmp_path: Path, which: str) -> None:
    port, metrics_port = free_port(), free_port()
    data_dir = tmp_path / "controller-n0"
    argv = [
        sys.executable, "-m", "controller",
        "--id", "n0",
        "--peers", f"n0-127.0.0.1:{port}",
        "--data-dir", str(data_dir),
        "--metrics-port", str(metrics_port),
        "--log-format", "json",
    ]  # fmt: skip
    d = Daemon("controller-n0", argv, tmp_path / "controller-n0.log")
    taken = port if which == "peer" else metrics_port
    try:
        with listening_on(taken):
            d.start()
            assert exit_status(d) != 0
            line = refusal_line(d)
    finally:
        d.stop()
    assert f"127.0.0.1:{taken}" in line, line
    assert not data_dir.exists()
