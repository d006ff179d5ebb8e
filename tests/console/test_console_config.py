"""rmq-console's configuration: TOML and flags read as every daemon's, its [clusters] table,
and one clear line (exit status 2) for a bad file."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from console.config import load_config
from daemon.config import ConfigError
from tests.support.procs import ROOT


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "console.toml"
    path.write_text(text)
    return path


def test_clusters_table_and_controllers_flag(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        'listen = "127.0.0.1:9090"\n[clusters]\nprod = "10.0.0.1:9878;10.0.0.2:9878"\n'
        'staging = "10.1.0.1:9878"\n',
    )
    settings = load_config(path, {"controllers": "127.0.0.1:9878", "listen": None})
    assert settings.config.listen == "127.0.0.1:9090"
    assert list(settings.clusters) == ["default", "prod", "staging"]
    assert settings.clusters["prod"] == "10.0.0.1:9878;10.0.0.2:9878"


def test_defaults() -> None:
    settings = load_config(None, {"controllers": "127.0.0.1:9878"})
    assert (settings.config.host, settings.config.port) == ("127.0.0.1", 8080)


@pytest.mark.parametrize(
    ("text", "flags", "message"),
    [
        ("", {}, "no cluster to show"),
        ('[clusters]\nprod = "nowhere"\n', {}, "'clusters.prod' must be host:port"),
        ('[clusters]\n"bad name" = "h:1"\n', {}, "name 'bad name'"),
        ('listen = "8080"\n', {"controllers": "h:1"}, "'listen' must be host:port"),
        ('colour = "blue"\n', {"controllers": "h:1"}, "unknown config key 'colour'"),
        ('tls_cert_file = "c.pem"\n', {"controllers": "h:1"}, "go together"),
    ],
)
def test_bad_config_is_one_clear_error(
    tmp_path: Path, text: str, flags: dict[str, str], message: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        load_config(write(tmp_path, text), flags)
    assert message in str(caught.value)


def test_the_command_exits_2_naming_the_key(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "console", "--config", str(write(tmp_path, 'listen = "x"\n'))],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
    )
    assert done.returncode == 2
    assert done.stderr.startswith("rmq-console: config key 'listen'"), done.stderr
    assert "Traceback" not in done.stderr


def test_an_unreadable_tls_file_is_one_line_exit_2(tmp_path: Path) -> None:
    missing = tmp_path / "absent-ca.pem"
    done = subprocess.run(
        [sys.executable, "-m", "console", "--controllers", "127.0.0.1:9", "--listen",
         "127.0.0.1:0", "--cluster-ca-file", str(missing)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
    )  # fmt: skip
    assert done.returncode == 2
    # One line naming what it could not read (it was printed twice, once without the context).
    assert done.stderr.splitlines() == [
        f"rmq-console: the clusters' TLS files: cannot read CA file {missing}: "
        "No such file or directory"
    ], done.stderr


def test_docs_console_md_lists_every_key_as_the_reference_prints_it() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "console", "--print-config-reference"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() in (ROOT / "docs" / "console.md").read_text()
