"""The cluster most benchmarks run against: 3 controllers and one broker group of 3 replicas
(``broker-a``, all-ack, flush async, 1 GiB segments) in a temporary directory, plus what those
benchmarks share around it (message bodies, fast client settings)."""

from __future__ import annotations

import os
import tempfile
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from client.bootstrap import Bootstrap
from protocol.request_auth import Credentials
from remoting.client import use_credentials, use_tls
from remoting.tls import client_context
from tests.cluster.support import full_sync_state_set
from tests.support.cluster import Cluster
from tests.support.procs import rmqctl
from tests.support.tls import make_ca

FAST_CONSUMER: dict[str, Any] = {
    "heartbeat_interval": 0.5,
    "commit_interval": 0.5,
    "suspend_ms": 1000,
    "route_refresh_interval": 1.0,
}
"""Consumer settings that make a benchmark's consumer join and rebalance within a second."""


def payload(size: int) -> bytes:
    """``size`` bytes of random hex digits: a body no compression shrinks to nothing."""
    return os.urandom(size // 2).hex().encode()[:size]


@dataclass(frozen=True, slots=True)
class GroupOfThree:
    cluster: Cluster
    boot: Bootstrap
    master: str
    """The master's address once all three replicas were in the sync state set."""
    sync_state: dict[str, Any]
    credentials: Credentials | None = None
    """With ``auth``: the super user's credentials (every pool of this process signs with them
    while the cluster runs)."""

    @property
    def addresses(self) -> str:
        """The controllers' addresses, the bootstrap a client is given."""
        return self.cluster.controller_addresses


SUPER_USER = Credentials("bench-admin", "bench-admin-Secret-1")


def _secure(cluster: Cluster, tmp: Path) -> str:
    """Authentication on for the controllers (before they start); the brokers' config text."""
    key = tmp / "auth.key"
    key.write_bytes(os.urandom(32).hex().encode())
    key.chmod(0o600)
    settings = f'auth_key_file = "{key}"\nauth_enabled = true\n'
    path = tmp / "controller-auth.toml"
    path.write_text(settings)
    for c in cluster.controllers:
        c.argv += ["--config", str(path)]
    return settings


def _tls(cluster: Cluster, tmp: Path) -> str:
    """TLS on every port with a test CA (made here), mutual TLS inside the cluster: the
    controllers read it (before they start); the brokers' config text. rmqctl runs of this
    process trust the CA ($RMQ_CA_FILE) until the cluster stops."""
    pki = make_ca(tmp / "pki")
    cert, key = pki.issue("node")
    settings = (
        f'tls_enabled = true\ntls_cert = "{cert}"\ntls_key = "{key}"\n'
        f'tls_ca_file = "{pki.ca}"\ntls_verify_client = true\n'
    )
    path = tmp / "controller-auth.toml"  # the controllers read one file: _secure's, if any
    if path.exists():
        path.write_text(path.read_text() + settings)
    else:
        path.write_text(settings)
        for c in cluster.controllers:
            c.argv += ["--config", str(path)]
    os.environ["RMQ_CA_FILE"] = str(pki.ca)
    use_tls(client_context(pki.ca))
    return settings


def _create_super_user(cluster: Cluster, tmp: Path) -> None:
    # Signed as the cluster: with mutual TLS that needs a certificate of the cluster's CA.
    cert = ["--cert", str(tmp / "pki/node.crt"), "--key", str(tmp / "pki/node.key")]
    done = rmqctl(
        "-a", cluster.controller_addresses, "--auth-key-file", str(tmp / "auth.key"),
        *(cert if (tmp / "pki/node.crt").exists() else []),
        "createUser", "-u", SUPER_USER.access_key, "-p", SUPER_USER.secret_key, "-t", "Super",
    )  # fmt: skip
    if done.returncode != 0:
        raise SystemExit(f"creating the super user failed: {done.stderr}")


@asynccontextmanager
async def group_of_three(
    prefix: str,
    per_broker: list[list[str]] | None = None,
    *,
    auth: bool = False,
    tls: bool = False,
) -> AsyncIterator[GroupOfThree]:
    """Start the cluster in a temporary directory named ``prefix``..., yield it once all three
    replicas are in sync, and stop every process it started on the way out (also on errors).
    ``per_broker[i]``: flags of broker ``i`` only (a gRPC port, say). ``auth``: authentication
    on (``auth_enabled`` everywhere, a super user :data:`SUPER_USER` that every connection pool
    of this process signs with until the cluster stops). ``tls``: TLS on every port, mutual TLS
    inside the cluster, a test CA every connection of this process trusts until the cluster
    stops."""
    with tempfile.TemporaryDirectory(prefix=prefix) as tmp:
        cluster = Cluster(Path(tmp))
        config = _secure(cluster, Path(tmp)) if auth else ""
        try:
            config += _tls(cluster, Path(tmp)) if tls else ""
            cluster.start_controllers()
            if auth:
                _create_super_user(cluster, Path(tmp))
                use_credentials(SUPER_USER)
            boot = Bootstrap(cluster.controller_addresses, timeout=2.0)
            try:
                cluster.add_group(
                    "broker-a", 3, per_broker=per_broker, config=config, segment_bytes=1 << 30
                )
                doc = await full_sync_state_set(boot, cluster, timeout=120)
                yield GroupOfThree(
                    cluster, boot, doc["masterAddress"], doc, SUPER_USER if auth else None
                )
            finally:
                boot.close()
        finally:
            use_credentials(None)
            use_tls(None)
            os.environ.pop("RMQ_CA_FILE", None)
            cluster.stop()
