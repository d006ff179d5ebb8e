"""A credentials file: an access key and its secret kept out of the command line and the code.

A TOML file with two strings, readable by its owner only (``chmod 600``)::

    access_key = "orders-app"
    secret_key = "..."

``make run SECURE=1`` writes its super user's to ``var/secure/admin.toml`` and names it in
``$RMQ_CREDENTIALS_FILE``; rmqctl reads ``--credentials-file`` with this reader too::

    producer = Producer(addresses, credentials=read_credentials_file("var/secure/admin.toml"))
"""

from __future__ import annotations

import os
import tomllib
from pathlib import Path

from client.errors import ClientError
from protocol.request_auth import Credentials


class CredentialsFileError(ClientError):
    """A credentials file that cannot be used: unreadable, readable by others, not TOML, or
    without its two keys. The message names the file."""


def read_credentials_file(path: str | os.PathLike[str]) -> Credentials:
    """The credentials in the TOML file at ``path`` (``access_key``, ``secret_key``);
    :class:`CredentialsFileError` when the file cannot be read, when its mode lets anyone but its
    owner read it (``mode & 0o077``), when it is not TOML, or when a key is missing or empty."""
    path = Path(path)
    try:
        with path.open("rb") as file:  # the mode checked is the one of the file read
            mode = os.fstat(file.fileno()).st_mode
            data = file.read()
    except OSError as exc:
        raise CredentialsFileError(f"credentials file {path}: {exc.strerror}") from None
    if mode & 0o077:
        raise CredentialsFileError(
            f"credentials file {path} may be read by others (mode {mode & 0o777:o}); chmod 600 it"
        )
    try:
        doc = tomllib.loads(data.decode())
    except UnicodeDecodeError:
        raise CredentialsFileError(f"credentials file {path}: not UTF-8 text") from None
    except tomllib.TOMLDecodeError as exc:
        raise CredentialsFileError(f"credentials file {path}: {exc}") from None
    access, secret = doc.get("access_key"), doc.get("secret_key")
    if not isinstance(access, str) or not isinstance(secret, str) or not access or not secret:
        raise CredentialsFileError(
            f"credentials file {path} needs access_key and secret_key strings"
        )
    return Credentials(access, secret)
