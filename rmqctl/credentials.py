"""Where rmqctl takes its credentials from: flags, then environment, then a credentials file.

``--access-key`` / ``--secret-key`` (or ``$RMQ_ACCESS_KEY`` / ``$RMQ_SECRET_KEY``), or
``--credentials-file FILE`` (or ``$RMQ_CREDENTIALS_FILE``): a TOML file with ``access_key`` and
``secret_key``, readable by its owner only, read by the SDK's ``client.read_credentials_file``
(applications read the same file). A flag on the command line is visible to other users of the
host (``ps``): prefer the environment or the file. With credentials every request rmqctl
sends is signed (docs/protocol.md, "Authentication"); without, nothing is signed.

``--auth-key-file FILE`` signs as the cluster itself, with the credentials derived from the
cluster's auth key (a super user): how the first super user is created on a cluster with
authentication on, from a host that holds the key.
"""

from __future__ import annotations

from pathlib import Path

import click

from client.credentials import CredentialsFileError
from client.credentials import read_credentials_file as client_read_credentials_file
from protocol.request_auth import Credentials, cluster_credentials
from protocol.sealing import SealError
from rmqctl.common import CommandError

ACCESS_KEY_ENV = "RMQ_ACCESS_KEY"
SECRET_KEY_ENV = "RMQ_SECRET_KEY"
CREDENTIALS_FILE_ENV = "RMQ_CREDENTIALS_FILE"


def read_credentials_file(path: Path) -> Credentials:
    """The SDK's reader (client.read_credentials_file), its refusal as rmqctl's one line."""
    try:
        return client_read_credentials_file(path)
    except CredentialsFileError as exc:
        raise CommandError(str(exc)) from None


def read_auth_key_file(path: Path) -> Credentials:
    try:
        mode = path.stat().st_mode
        data = path.read_bytes()
    except OSError as exc:
        raise CommandError(f"auth key file {path}: {exc.strerror}") from None
    if mode & 0o077:
        raise CommandError(f"auth key file {path} may be read by others; chmod 600 it")
    try:
        return cluster_credentials(data)
    except SealError as exc:
        raise CommandError(f"auth key file {path}: {exc}") from None


def resolve_credentials(
    access_key: str | None,
    secret_key: str | None,
    credentials_file: Path | None,
    auth_key_file: Path | None = None,
) -> Credentials | None:
    """The credentials to sign with (None: sign nothing); click.UsageError (exit status 2) for
    half a pair or for two sources at once."""
    if auth_key_file is not None:
        if access_key or secret_key or credentials_file is not None:
            raise click.UsageError(
                "--auth-key-file signs as the cluster: give no other credentials"
            )
        return read_auth_key_file(auth_key_file)
    if access_key or secret_key:
        if not access_key or not secret_key:
            raise click.UsageError(
                f"give both --access-key and --secret-key (or ${ACCESS_KEY_ENV} and "
                f"${SECRET_KEY_ENV}), not one"
            )
        return Credentials(access_key, secret_key)
    if credentials_file is not None:
        return read_credentials_file(credentials_file)
    return None
