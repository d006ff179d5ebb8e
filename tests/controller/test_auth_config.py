"""auth_key_file: a controller refuses to start on a key file it cannot use (one line, exit 2)."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from controller.__main__ import main


@pytest.mark.parametrize(
    ("content", "mode", "message"),
    [
        (b"x" * 40, 0o644, "may be read by others (mode 644); chmod 600 it"),
        (b"x" * 40, 0o640, "may be read by others (mode 640)"),
        (b"short key\n", 0o600, "at least 32 bytes, not 9"),
        (None, 0o600, "cannot read"),
    ],
)
def test_unusable_key_files_are_refused(
    tmp_path: Path, content: bytes | None, mode: int, message: str
) -> None:
    key = tmp_path / "auth.key"
    if content is not None:
        key.write_bytes(content)
        key.chmod(mode)
    result = CliRunner().invoke(
        main, ["--auth-key-file", str(key), "--data-dir", str(tmp_path / "d")]
    )
    assert result.exit_code == 2, result.output
    assert "auth_key_file" in result.output and message in result.output, result.output
