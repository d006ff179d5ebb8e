"""The SDK's credentials file reader (client.read_credentials_file), shared with rmqctl: a TOML
file with access_key and secret_key, its owner's alone; every refusal one message naming the
file."""

from __future__ import annotations

from pathlib import Path

import pytest

import client
from client import ClientError, Credentials, CredentialsFileError, read_credentials_file

GOOD = 'access_key = "orders-app"\nsecret_key = "s3cret-Value"\n'


def write(path: Path, text: str | bytes, mode: int = 0o600) -> Path:
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text)
    path.chmod(mode)
    return path


def test_a_file_of_its_owner_gives_its_credentials(tmp_path: Path) -> None:
    path = write(tmp_path / "creds.toml", GOOD)
    creds = read_credentials_file(path)
    assert creds == Credentials("orders-app", "s3cret-Value")
    assert read_credentials_file(str(path)) == creds  # a str names the file too
    assert "s3cret" not in repr(creds)
    assert client.read_credentials_file is read_credentials_file


@pytest.mark.parametrize("mode", [0o644, 0o640, 0o604, 0o660, 0o700 | 0o001])
def test_a_file_others_may_read_is_refused(tmp_path: Path, mode: int) -> None:
    path = write(tmp_path / "creds.toml", GOOD, mode)
    with pytest.raises(CredentialsFileError) as caught:
        read_credentials_file(path)
    assert str(caught.value) == (
        f"credentials file {path} may be read by others (mode {mode:o}); chmod 600 it"
    )


@pytest.mark.parametrize("mode", [0o600, 0o400, 0o700])
def test_the_owners_modes_are_taken(tmp_path: Path, mode: int) -> None:
    path = write(tmp_path / "creds.toml", GOOD, mode)
    assert read_credentials_file(path).access_key == "orders-app"


def test_a_missing_file_and_a_directory_are_refused(tmp_path: Path) -> None:
    missing = tmp_path / "nowhere.toml"
    with pytest.raises(CredentialsFileError) as caught:
        read_credentials_file(missing)
    assert str(caught.value) == f"credentials file {missing}: No such file or directory"
    with pytest.raises(CredentialsFileError) as caught:
        read_credentials_file(tmp_path)
    assert str(caught.value) == f"credentials file {tmp_path}: Is a directory"


def test_a_file_that_is_not_toml_is_refused(tmp_path: Path) -> None:
    path = write(tmp_path / "creds.toml", "access_key = orders-app\n")
    with pytest.raises(CredentialsFileError) as caught:
        read_credentials_file(path)
    message = str(caught.value)
    assert message.startswith(f"credentials file {path}: Invalid value"), message
    assert "\n" not in message
    binary = write(tmp_path / "binary.toml", b"access_key = \xff\xfe\n")
    with pytest.raises(CredentialsFileError, match=r"binary\.toml: not UTF-8 text$"):
        read_credentials_file(binary)


@pytest.mark.parametrize(
    "text",
    [
        'access_key = "orders-app"\n',
        'secret_key = "s"\n',
        'access_key = ""\nsecret_key = "s"\n',
        'access_key = "a"\nsecret_key = ""\n',
        'access_key = 42\nsecret_key = "s"\n',
        'access_key = "a"\nsecret_key = ["s"]\n',
        "",
        '[credentials]\naccess_key = "a"\nsecret_key = "s"\n',
    ],
)
def test_a_missing_or_empty_key_is_refused(tmp_path: Path, text: str) -> None:
    path = write(tmp_path / "creds.toml", text)
    with pytest.raises(CredentialsFileError) as caught:
        read_credentials_file(path)
    assert str(caught.value) == (f"credentials file {path} needs access_key and secret_key strings")


def test_every_refusal_is_a_client_error(tmp_path: Path) -> None:
    """An application catching the SDK's errors (ClientError) catches this one too."""
    with pytest.raises(ClientError):
        read_credentials_file(tmp_path / "nowhere.toml")
