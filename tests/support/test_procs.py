"""free_port (tests/support/procs.py): ports below the kernel's range of source ports, so no
outgoing connection of any process can take one before (or while) the daemon it is meant for
binds it."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from tests.support.procs import ephemeral_ports, free_port, worker_share


def test_free_ports_are_distinct_bindable_and_below_the_source_port_range() -> None:
    ephemeral = ephemeral_ports()
    ports = [free_port() for _ in range(50)]
    assert len(set(ports)) == len(ports)
    for port in ports:
        assert port < ephemeral.start
        with socket.socket() as s:
            s.bind(("127.0.0.1", port))


def test_the_source_port_range_is_read_from_the_kernel_or_defaults(tmp_path: Path) -> None:
    custom = tmp_path / "range"
    custom.write_text("40000\t50000\n")
    assert ephemeral_ports(custom) == range(40000, 50001)
    assert ephemeral_ports(tmp_path / "missing") == range(32768, 61000)


def test_parallel_workers_hand_out_ports_from_shares_that_do_not_overlap(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("PYTEST_XDIST_WORKER_COUNT", "3")
    shares = []
    for i in range(3):
        monkeypatch.setenv("PYTEST_XDIST_WORKER", f"gw{i}")
        shares.append(worker_share(12_000, 32_768))
        assert all(free_port() in shares[i] for _ in range(20))
    assert [(s.start, s.stop) for s in shares] == [
        (12_000, 18_922),
        (18_922, 25_844),
        (25_844, 32_766),
    ]
    monkeypatch.delenv("PYTEST_XDIST_WORKER")  # not a worker: every port
    assert worker_share(12_000, 32_768) == range(12_000, 32_768)
