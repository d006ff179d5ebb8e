"""A client that speaks the other protocol than the port it reached says so, against real
controllers: one with TLS on (a test CA), one without. Without --tls, rmqctl against the TLS
port says ``this port speaks TLS`` and names its flags (the port closes a plaintext connection
without a byte; the client asks it for a TLS handshake to tell); the SDK names its ``tls``
argument. With --ca-file against the plaintext port, rmqctl says ``this port does not speak
TLS``. Neither is the obscure ``the peer closed the connection without answering`` or
``ConnectionResetError`` it was.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from functools import partial
from pathlib import Path

import pytest

from client.admin import Admin
from client.errors import ClientError
from remoting.tls import client_context
from tests.support.procs import Daemon, free_port, port_open, rmqctl
from tests.support.tls import Pki, make_ca
from tests.support.wait import wait_until

pytestmark = pytest.mark.multiprocess


def controller(tmp: Path, name: str, config: str) -> tuple[Daemon, str]:
    port = free_port()
    (tmp / f"{name}.toml").write_text(config)
    argv = [
        sys.executable, "-m", "controller", "--id", "n0", "--peers", f"n0-127.0.0.1:{port}",
        "--data-dir", str(tmp / name), "--metrics-port", "0", "--config", str(tmp / f"{name}.toml"),
    ]  # fmt: skip
    return Daemon(name, argv, tmp / f"{name}.log"), f"127.0.0.1:{port}"


@pytest.fixture(scope="module")
def ports(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str, Pki]]:
    """(a TLS controller's address, a plaintext controller's, the CA)."""
    tmp = tmp_path_factory.mktemp("tls-errors")
    pki = make_ca(tmp / "pki")
    cert, key = pki.issue("node")
    tls, tls_at = controller(
        tmp, "tls", f'tls_enabled = true\ntls_cert = "{cert}"\ntls_key = "{key}"\n'
    )
    plain, plain_at = controller(tmp, "plain", "")
    try:
        for daemon, at in ((tls, tls_at), (plain, plain_at)):
            daemon.start()
            listening = partial(port_open, int(at.rpartition(":")[2]))
            wait_until(listening, f"{daemon.name} to listen", 30, on_timeout=daemon.log)
        yield tls_at, plain_at, pki
    finally:
        tls.stop()
        plain.stop()


def test_rmqctl_without_tls_at_a_tls_port_says_it_speaks_tls(
    ports: tuple[str, str, Pki],
) -> None:
    tls_at, _, pki = ports
    done = rmqctl("-a", tls_at, "clusterList")
    assert (done.returncode, done.stdout) == (1, ""), done.stderr
    assert done.stderr == (
        f"rmqctl: cannot reach any of {tls_at}: this port speaks TLS (use --tls, or --ca-file "
        "with a private CA)\n"
    )
    ok = rmqctl("-a", tls_at, "--ca-file", str(pki.ca), "clusterList")
    assert ok.returncode == 0, ok.stderr


def test_rmqctl_with_tls_at_a_plaintext_port_says_it_does_not(
    ports: tuple[str, str, Pki],
) -> None:
    _, plain_at, pki = ports
    done = rmqctl("-a", plain_at, "--ca-file", str(pki.ca), "clusterList")
    assert (done.returncode, done.stdout) == (1, ""), done.stderr
    assert done.stderr == (
        f"rmqctl: cannot reach any of {plain_at}: this port does not speak TLS (drop --tls "
        "and --ca-file)\n"
    )


async def test_the_sdk_names_its_tls_argument(ports: tuple[str, str, Pki]) -> None:
    tls_at, plain_at, pki = ports
    async with Admin(tls_at, 3.0) as admin:
        with pytest.raises(ClientError) as plain:
            await admin.cluster_info()
    assert str(plain.value).endswith(
        f"{tls_at}: this port speaks TLS (pass tls=remoting.tls.client_context(CA file))"
    ), plain.value
    async with Admin(tls_at, 3.0, tls=client_context(pki.ca)) as admin:
        assert await admin.cluster_info() == {}
    async with Admin(plain_at, 3.0, tls=client_context(pki.ca)) as admin:
        with pytest.raises(ClientError) as over_tls:
            await admin.cluster_info()
    assert str(over_tls.value).endswith(
        f"{plain_at}: this port does not speak TLS (connect without tls)"
    ), over_tls.value
