"""deploy/systemd/rmq-console.service: hardened as the daemons' units, and valid to systemd
(``systemd-analyze verify`` with ExecStart pointed at this environment's rmq-console)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
UNIT = ROOT / "deploy" / "systemd" / "rmq-console.service"


def directives(text: str) -> dict[str, str]:
    out = {}
    for line in text.splitlines():
        if line and not line.startswith(("#", "[")) and "=" in line:
            key, _, value = line.partition("=")
            out[key] = value
    return out


def test_the_unit_is_hardened_and_notifies_readiness() -> None:
    d = directives(UNIT.read_text())
    assert d["Type"] == "notify" and d["User"] == "rmq"
    assert d["ExecStart"] == "/opt/rmq/venv/bin/rmq-console --config /etc/rmq/console.toml"
    for key, value in {
        "NoNewPrivileges": "yes",
        "ProtectSystem": "strict",
        "RestartPreventExitStatus": "2",
        "CapabilityBoundingSet": "",
    }.items():
        assert d.get(key) == value, key
    assert "StateDirectory" not in d and "ReadWritePaths" not in d


def test_systemd_accepts_the_unit(tmp_path: Path) -> None:
    if shutil.which("systemd-analyze") is None:
        pytest.skip("systemd-analyze is not installed (package systemd)")
    console = Path(sys.executable).parent / "rmq-console"
    if not console.exists():
        pytest.skip(f"{console} is not installed (pip install -e .)")
    unit = tmp_path / "rmq-console.service"
    unit.write_text(UNIT.read_text().replace("/opt/rmq/venv/bin/rmq-console", str(console)))
    done = subprocess.run(
        ["systemd-analyze", "verify", str(unit)], capture_output=True, text=True, timeout=60
    )
    problems = [line for line in done.stderr.splitlines() if "rmq-console.service" in line]
    assert done.returncode == 0 and not problems, done.stderr
