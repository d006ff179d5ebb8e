"""rmqctl reads --credentials-file with the SDK's reader (client.read_credentials_file) and turns
its refusal into its own one-line error, with the SDK's words."""

from __future__ import annotations

from pathlib import Path

import pytest

from client import CredentialsFileError, read_credentials_file
from protocol.request_auth import Credentials
from rmqctl.common import CommandError
from rmqctl.credentials import resolve_credentials


@pytest.mark.parametrize(
    ("text", "mode"),
    [
        ('access_key = "a"\nsecret_key = "s"\n', 0o644),
        ("access_key = a\n", 0o600),
        ('access_key = "a"\n', 0o600),
        (b"access_key = \xff\n", 0o600),  # not UTF-8: a traceback before the SDK's reader
    ],
)
def test_rmqctl_says_what_the_sdk_says(tmp_path: Path, text: str | bytes, mode: int) -> None:
    path = tmp_path / "creds.toml"
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    path.chmod(mode)
    with pytest.raises(CredentialsFileError) as sdk:
        read_credentials_file(path)
    with pytest.raises(CommandError) as cli:
        resolve_credentials(None, None, path)
    assert cli.value.format_message() == str(sdk.value)


def test_rmqctl_takes_the_file_the_sdk_takes(tmp_path: Path) -> None:
    path = tmp_path / "creds.toml"
    path.write_text('access_key = "admin"\nsecret_key = "s3cret"\n')
    path.chmod(0o600)
    assert resolve_credentials(None, None, path) == Credentials("admin", "s3cret")
    assert resolve_credentials(None, None, path) == read_credentials_file(path)
