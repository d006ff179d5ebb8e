"""The local cluster's secure mode (``make run SECURE=1``): its files under ``<var>/secure``.

The auth key, a CA and a certificate (``deploy/security.sh``), the daemons' config files with
authentication and TLS on, and once the controllers answer, the super user ``admin``: its
credentials file (mode 600) and the ``env`` file that sets the variables rmqctl reads.
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

from deploy.cluster_layout import CONTROLLER_ADDRESSES, ROOT, LaunchRefused, rmqctl


class Security:
    """The files of secure mode, under ``<var>/secure``."""

    def __init__(self, directory: Path) -> None:
        self.dir = directory

    @property
    def auth_key(self) -> Path:
        return self.dir / "auth.key"

    @property
    def ca(self) -> Path:
        return self.dir / "tls" / "ca.crt"

    @property
    def cert(self) -> Path:
        return self.dir / "tls" / "node.crt"

    @property
    def key(self) -> Path:
        return self.dir / "tls" / "node.key"

    @property
    def credentials_file(self) -> Path:
        return self.dir / "admin.toml"

    @property
    def env_file(self) -> Path:
        return self.dir / "env"

    @property
    def controller_config(self) -> Path:
        return self.dir / "controller.toml"

    @property
    def broker_config(self) -> Path:
        return self.dir / "broker.toml"

    def settings(self) -> str:
        """The keys every controller and broker of secure mode sets."""
        return (
            "auth_enabled = true\n"
            f"auth_key_file = {json.dumps(str(self.auth_key.resolve()))}\n"
            "tls_enabled = true\n"
            f"tls_cert = {json.dumps(str(self.cert.resolve()))}\n"
            f"tls_key = {json.dumps(str(self.key.resolve()))}\n"
            f"tls_ca_file = {json.dumps(str(self.ca.resolve()))}\n"
            "tls_verify_client = true\n"
        )

    def cluster_rmqctl_args(self) -> list[str]:
        """rmqctl's options to act as the cluster itself (a super user, with the client
        certificate mutual TLS asks of it): the launcher's own requests."""
        return [
            "--auth-key-file", str(self.auth_key),
            "--ca-file", str(self.ca),
            "--cert", str(self.cert),
            "--key", str(self.key),
        ]  # fmt: skip


def make_security_files(
    security: Security, broker_config: Path | None, controller_config: Path | None = None
) -> list[str]:
    """The auth key, CA and certificate (``deploy/security.sh``, which keeps any that exist),
    then the daemons' config files: what security.sh printed."""
    argv = [
        "bash", str(ROOT / "deploy" / "security.sh"), "--dir", str(security.dir),
        "--address", "127.0.0.1", "--address", "localhost", "--name", "localhost",
    ]  # fmt: skip
    done = subprocess.run(
        argv,
        capture_output=True,
        text=True,
        timeout=60,
    )
    if done.returncode != 0:
        raise LaunchRefused(f"deploy/security.sh failed: {done.stderr.strip()}")
    # The security keys first: keys after a [table] of the operator's file would land in it.
    for merged, extra in (
        (security.controller_config, controller_config),
        (security.broker_config, broker_config),
    ):
        merged.write_text(security.settings() + (extra.read_text() if extra is not None else ""))
    return done.stdout.splitlines()


def create_super_user(
    security: Security,
    timeout: float = 60.0,
    say: Callable[[str], None] = print,
    stopping: Callable[[], bool] = lambda: False,
) -> None:
    """Create the super user ``admin`` as the cluster (once: an existing credentials file is
    kept) and write its credentials file and the env file rmqctl's variables come from."""
    creds = security.credentials_file
    if not creds.exists():
        secret = secrets.token_urlsafe(24)
        deadline = time.monotonic() + timeout
        while True:
            create = ["createUser", "-u", "admin", "-t", "Super", "-p", secret]
            done = rmqctl(*create, options=security.cluster_rmqctl_args())
            if done is not None and done.returncode != 0 and "exist" in done.stderr:
                # The user outlived its file (var/secure/admin.toml removed): a new secret.
                update = ["updateUser", "-u", "admin", "-p", secret]
                done = rmqctl(*update, options=security.cluster_rmqctl_args())
            if done is not None and done.returncode == 0:
                break
            if stopping():  # Ctrl-C while the controllers were not answering yet
                return
            if time.monotonic() >= deadline:
                why = done.stderr.strip() if done is not None else "timed out"
                raise LaunchRefused(f"could not create the super user admin: {why}")
            time.sleep(0.5)
        fd = os.open(creds, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as out:
            out.write(f'access_key = "admin"\nsecret_key = "{secret}"\n')
        say(f"local cluster: super user admin created; its credentials are in {creds}")
    security.env_file.write_text(
        "# secure mode of make run: source this file, then use rmqctl as the super user admin\n"
        f'export RMQCTL_ADDRESSES="{CONTROLLER_ADDRESSES}"\n'
        f'export RMQ_CREDENTIALS_FILE="{creds.resolve()}"\n'
        f'export RMQ_CA_FILE="{security.ca.resolve()}"\n'
    )
