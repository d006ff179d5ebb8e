"""A cluster with authentication on, as the authentication tests start it: a cluster key of
its own, the settings that turn authentication on (the controllers' config file, and the
brokers' config), the first super user created with the key, and requests signed by it."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import msgpack

from client import Credentials
from protocol.remoting import Frame, Scalar
from remoting.client import ConnectionPool
from remoting.failover import AddressFailover
from tests.support.cluster import Cluster
from tests.support.procs import rmqctl

ROOT = Credentials("root", "root-Secret-4242")
"""The first super user."""
WINDOW_MS = 30_000
"""auth_timestamp_window_ms: how far a request's signed time may be from the server's."""


def secured_cluster(tmp: Path) -> tuple[Cluster, Path, str]:
    """A Cluster in ``tmp`` (not started) whose controllers run with authentication on: the
    cluster, its key file (0600) and the settings lines that turn it on (a broker's config
    needs them too)."""
    key = tmp / "auth.key"
    key.write_bytes(os.urandom(32).hex().encode())
    key.chmod(0o600)
    settings = (
        f'auth_key_file = "{key}"\nauth_enabled = true\nauth_timestamp_window_ms = {WINDOW_MS}\n'
    )
    controller_config = tmp / "controller-auth.toml"
    controller_config.write_text(settings)
    cluster = Cluster(tmp)
    for c in cluster.controllers:
        c.argv += ["--config", str(controller_config)]
    return cluster, key, settings


def create_root(cluster: Cluster, key: Path) -> None:
    """The first super user (ROOT), created as the cluster itself (the operator holds the
    key)."""
    done = rmqctl(
        "-a", cluster.controller_addresses, "--auth-key-file", str(key),
        "createUser", "-u", ROOT.access_key, "-p", ROOT.secret_key, "-t", "Super",
        timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr + cluster.logs()


async def admin_call(
    addresses: str, code: int, header: Mapping[str, Scalar], doc: dict[str, Any] | None = None
) -> Frame:
    """One request to the controllers at ``addresses`` (the leader for a change), signed by
    ROOT, ``doc`` its msgpack body; a refusal raises ResponseError."""
    body = None if doc is None else msgpack.packb(doc, use_bin_type=True)
    controllers = AddressFailover(addresses, ConnectionPool(3.0, ROOT), 3.0)
    try:
        return await controllers.call(code, header, body)
    finally:
        controllers.pool.close()
