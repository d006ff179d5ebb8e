"""Start-up configuration: unknown keys and bad values stop the daemon with one clear line."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from broker.__main__ import load_config
from daemon.config import ConfigError


def run_broker(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "broker", *args], capture_output=True, text=True, timeout=60
    )


def test_unknown_key_stops_the_broker_naming_the_key(tmp_path: Path) -> None:
    cfg = tmp_path / "broker.toml"
    cfg.write_text('broker_name = "b"\nflush_intervall_ms = 5\n')
    proc = run_broker("--config", str(cfg), "--data-dir", str(tmp_path / "d"))
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert lines == ["rmq-broker: unknown config key 'flush_intervall_ms'"]


@pytest.mark.parametrize(
    ("text", "key"),
    [
        ('flush = "sometimes"', "flush"),
        ("flush_interval_ms = 0", "flush_interval_ms"),
        ('listen = "nowhere"', "listen"),
        ('metrics_port = "9300"', "metrics_port"),
        ("disk_max_used_ratio = 3.0", "disk_max_used_ratio"),
    ],
)
def test_bad_values_name_the_key(tmp_path: Path, text: str, key: str) -> None:
    cfg = tmp_path / "broker.toml"
    cfg.write_text(text + "\n")
    with pytest.raises(ConfigError, match=f"'{key}'"):
        load_config(cfg, {})


def test_flags_override_the_file(tmp_path: Path) -> None:
    cfg = tmp_path / "broker.toml"
    cfg.write_text('broker_name = "from-file"\nflush = "sync"\n')
    loaded = load_config(cfg, {"broker_name": "from-flag", "flush": None})
    assert loaded.broker_name == "from-flag" and loaded.flush == "sync"
    assert loaded.effective_ha_port == loaded.listen_port + 1


def test_invalid_toml_is_one_line(tmp_path: Path) -> None:
    cfg = tmp_path / "broker.toml"
    cfg.write_text("this is not toml\n")
    proc = run_broker("--config", str(cfg))
    assert proc.returncode == 2
    assert len(proc.stderr.strip().splitlines()) == 1 and "not valid TOML" in proc.stderr


def test_a_grpc_tls_port_needs_its_certificate_and_key(tmp_path: Path) -> None:
    cfg = tmp_path / "broker.toml"
    cfg.write_text('grpc_tls_listen = "127.0.0.1:0"\ntls_cert = "server.pem"\n')
    proc = run_broker("--config", str(cfg), "--data-dir", str(tmp_path / "d"))
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        "rmq-broker: config key 'grpc_tls_listen' needs tls_cert and tls_key"
    ]
    # Both given but not there: the broker refuses to start, naming the file.
    proc = run_broker(
        "--config", str(cfg), "--tls-key", str(tmp_path / "none.key"),
        "--data-dir", str(tmp_path / "d"), "--listen", "127.0.0.1:0", "--metrics-port", "0",
    )  # fmt: skip
    assert proc.returncode != 0
    assert "server.pem is not a readable file" in proc.stderr, proc.stderr[-2000:]
