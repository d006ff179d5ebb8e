"""SIGHUP reloads the certificate of a broker's gRPC TLS port (``grpc_tls_listen``) as it does
its other ports' (docs/operations.md, "Rotating certificates"): a broker process, with
``tls_enabled`` and with only the gRPC TLS port, serves the new certificate to the connections
made after the reload; a reload with a key of another certificate is logged and keeps the pair
loaded before, the process serving on.
"""

from __future__ import annotations

import shutil
import signal
from pathlib import Path

import pytest

from remoting.tls import client_context
from tests.deploy.support import require_tool
from tests.support.cluster import BrokerNode
from tests.support.procs import free_port, port_open
from tests.support.tls import make_ca, peer_name
from tests.support.wait import wait_until_async

pytestmark = pytest.mark.multiprocess


@pytest.mark.parametrize("tls_enabled", [True, False], ids=["tls_enabled", "grpc_tls_only"])
async def test_sighup_reloads_the_grpc_tls_certificate(tmp_path: Path, tls_enabled: bool) -> None:
    require_tool("openssl", "openssl")
    pki = make_ca(tmp_path / "pki")
    cert, key = tmp_path / "node.crt", tmp_path / "node.key"
    for src, dst in zip(pki.issue("first"), (cert, key), strict=True):
        shutil.copy(src, dst)
    key.chmod(0o600)
    tls_port = free_port()
    settings = f'grpc_tls_listen = "127.0.0.1:{tls_port}"\ntls_cert = "{cert}"\ntls_key = "{key}"\n'
    if tls_enabled:
        settings += f'tls_enabled = true\ntls_ca_file = "{pki.ca}"\n'
    broker = BrokerNode(tmp_path, "broker-a", 0, "", [], config=settings)
    trust = client_context(pki.ca)
    trust.set_alpn_protocols(["h2"])
    broker.start()
    try:
        await wait_until_async(
            lambda: broker.alive() and port_open(tls_port),
            "the gRPC TLS port",
            30,
            on_timeout=broker.log,
        )
        assert await peer_name(tls_port, trust) == "first"
        for src, dst in zip(pki.issue("second"), (cert, key), strict=True):
            shutil.copy(src, dst)
        broker.signal(signal.SIGHUP)

        async def reloaded() -> bool:
            return await peer_name(tls_port, trust) == "second"

        await wait_until_async(
            reloaded, "the new certificate on the gRPC TLS port", 20, on_timeout=broker.log
        )
        # A key of another certificate: the reload fails, the old pair stays, the process too.
        shutil.copy(pki.issue("third")[1], key)
        broker.signal(signal.SIGHUP)
        await wait_until_async(
            lambda: "gRPC TLS reload failed" in broker.log(),
            "the failed reload logged",
            20,
            on_timeout=broker.log,
        )
        assert broker.alive() and await peer_name(tls_port, trust) == "second"
    finally:
        broker.stop()
