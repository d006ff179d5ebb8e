"""sd_notify (daemon/systemd.py): datagrams on a real unix socket, and the daemons' readiness.

The daemon tests start a real broker and a real controller with ``$NOTIFY_SOCKET`` pointing at a
socket the test owns, as systemd would under ``Type=notify``: READY=1 must arrive once the
daemon serves (its port accepts connections) and STOPPING=1 when SIGTERM starts a clean stop.
"""

from __future__ import annotations

import os
import signal
import socket
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from daemon import systemd
from tests.support.cluster import ControllerNode
from tests.support.procs import BrokerProc, Daemon, free_port, port_open


@pytest.fixture
def abstract_socket() -> Iterator[tuple[socket.socket, str]]:
    """A bound datagram socket in the abstract namespace and its ``@name`` spelling."""
    name = f"rmq-test-notify-{uuid.uuid4().hex}"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind("\0" + name)
    try:
        yield sock, "@" + name
    finally:
        sock.close()


def receive(sock: socket.socket, timeout: float) -> list[str]:
    """The assignments of the next datagram, or AssertionError after ``timeout``."""
    sock.settimeout(timeout)
    try:
        data = sock.recv(4096)
    except TimeoutError:
        raise AssertionError(f"no sd_notify datagram within {timeout:g}s") from None
    return data.decode().split("\n")


def test_notify_sends_one_datagram_to_a_socket_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "notify.sock"
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.bind(str(path))
        monkeypatch.setenv("NOTIFY_SOCKET", str(path))
        assert systemd.ready("serving broker-a")
        assert receive(sock, 5) == ["READY=1", "STATUS=serving broker-a"]
        assert systemd.stopping("stopping on SIGTERM")
        assert receive(sock, 5) == ["STOPPING=1", "STATUS=stopping on SIGTERM"]


def test_notify_reaches_an_abstract_socket(
    abstract_socket: tuple[socket.socket, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    sock, name = abstract_socket
    monkeypatch.setenv("NOTIFY_SOCKET", name)
    assert systemd.notify("READY=1")
    assert receive(sock, 5) == ["READY=1"]


def test_notify_without_systemd_sends_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NOTIFY_SOCKET", raising=False)
    assert not systemd.ready("serving")


def test_notify_to_a_missing_socket_or_other_transport_fails_softly(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("NOTIFY_SOCKET", str(tmp_path / "nobody-listens.sock"))
    assert not systemd.ready("serving")
    monkeypatch.setenv("NOTIFY_SOCKET", "vsock:2:1234")
    assert not systemd.ready("serving")


def ready_then_stopping(daemon: Daemon, port: int, sock: socket.socket) -> None:
    """READY=1 arrives once ``port`` accepts connections; SIGTERM brings STOPPING=1, exit 0."""
    daemon.start()
    try:
        deadline = time.monotonic() + 60
        while True:
            if not daemon.alive():
                raise AssertionError(f"{daemon.name} exited early:\n{daemon.log()[-3000:]}")
            sock.settimeout(0.2)
            try:
                first = sock.recv(4096).decode().split("\n")
                break
            except TimeoutError:
                if time.monotonic() > deadline:
                    raise AssertionError(f"{daemon.name} never sent READY=1") from None
        assert first[0] == "READY=1", first
        assert first[1].startswith("STATUS=serving"), first
        assert port_open(port), "READY=1 came before the daemon accepted connections"
        daemon.signal(signal.SIGTERM)
        assert receive(sock, 30)[0] == "STOPPING=1"
        assert daemon.proc is not None
        assert daemon.proc.wait(timeout=30) == 0, daemon.log()[-3000:]
    finally:
        daemon.stop()


@pytest.mark.multiprocess
def test_broker_reports_ready_and_stopping(
    tmp_path: Path, abstract_socket: tuple[socket.socket, str]
) -> None:
    sock, name = abstract_socket
    broker = BrokerProc(tmp_path)
    broker.env = {"NOTIFY_SOCKET": name}
    ready_then_stopping(broker, broker.port, sock)


@pytest.mark.multiprocess
def test_controller_reports_ready_and_stopping(
    tmp_path: Path, abstract_socket: tuple[socket.socket, str]
) -> None:
    sock, name = abstract_socket
    port = free_port()
    controller = ControllerNode(tmp_path, "n0", port, f"n0-127.0.0.1:{port}")
    controller.env = {"NOTIFY_SOCKET": name, "PATH": os.environ.get("PATH", "")}
    ready_then_stopping(controller, port, sock)
