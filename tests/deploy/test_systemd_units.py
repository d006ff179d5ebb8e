"""The systemd units and deploy/install.sh.

install.sh runs for real into a staging root (``--destdir``): it creates the service user in
the staged /etc/passwd (useradd --prefix), the directories with their owners, the configs and the
units pointing at this checkout's environment; ``systemd-analyze verify`` then checks the units
as installed (it insists that ExecStart exists, which is why the installed ones are checked),
and ``systemd-analyze security --offline`` bounds their exposure.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from broker.config import BrokerConfig
from tests.deploy.support import load_example, require_tool

ROOT = Path(__file__).resolve().parents[2]
UNITS = ROOT / "deploy" / "systemd"
INSTALL = ROOT / "deploy" / "install.sh"
VENV = Path(sys.executable).parent.parent
TEMPLATES = ["rmq-controller@.service", "rmq-broker@.service"]
# systemd-analyze security --offline: 10 is fully exposed; these units score 3.0 ("OK").
MAX_EXPOSURE = 3.5

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="install.sh creates users: needs root")
needs_useradd = pytest.mark.skipif(shutil.which("useradd") is None, reason="no useradd")


def directives(path: Path) -> dict[str, list[str]]:
    """``Key=value`` lines of a unit file (every section), values by key in order."""
    out: dict[str, list[str]] = {}
    for line in path.read_text().splitlines():
        if line and not line.startswith(("#", ";", "[")) and "=" in line:
            key, _, value = line.partition("=")
            out.setdefault(key.strip(), []).append(value.strip())
    return out


@pytest.mark.parametrize("unit", TEMPLATES)
def test_templates_run_hardened_as_an_unprivileged_user_and_notify_readiness(unit: str) -> None:
    d = directives(UNITS / unit)
    one = {k: v[-1] for k, v in d.items()}
    assert one["Type"] == "notify" and one["NotifyAccess"] == "main"
    assert one["User"] == "rmq" and one["Group"] == "rmq"
    for key, value in {
        "NoNewPrivileges": "yes",
        "ProtectSystem": "strict",
        "ProtectHome": "yes",
        "PrivateTmp": "yes",
        "Restart": "on-failure",
        "KillSignal": "SIGTERM",
        "RestartPreventExitStatus": "2",
        "CapabilityBoundingSet": "",
    }.items():
        assert one.get(key) == value, f"{unit}: {key}={one.get(key)!r}, want {value!r}"
    assert int(one["LimitNOFILE"]) >= 65536
    assert one["RestartSec"] and one["TimeoutStopSec"] and one["StartLimitBurst"]
    # The data directory is the only writable path: systemd makes it (StateDirectory) and the
    # daemon is pointed at it; no ReadWritePaths= widens ProtectSystem=strict.
    name = unit.split("@")[0]
    assert one["StateDirectory"] == "rmq/%i"
    assert "ReadWritePaths" not in d
    assert one["ExecStart"] == (
        f"/opt/rmq/venv/bin/{name} --config /etc/rmq/%i.toml --data-dir /var/lib/rmq/%i"
    )


def run_install(destdir: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", str(INSTALL), "--destdir", str(destdir), "--venv", str(VENV), *extra],
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.fixture
def staged(tmp_path: Path) -> Path:
    """A staging root holding copies of this host's account files (for useradd --prefix)."""
    root = tmp_path / "root"
    (root / "etc").mkdir(parents=True)
    for name in ("passwd", "group", "shadow", "gshadow", "login.defs"):
        if (Path("/etc") / name).exists():
            shutil.copy(Path("/etc") / name, root / "etc" / name)
    return root


@needs_root
@needs_useradd
def test_install_creates_user_directories_configs_and_units(staged: Path) -> None:
    configs = ROOT / "deploy" / "config" / "host2"
    result = run_install(staged, "--configs", str(configs), "--tls-address", "10.0.0.2")
    assert result.returncode == 0, result.stderr
    users = {
        line.split(":")[0]: line.split(":")
        for line in (staged / "etc/passwd").read_text().splitlines()
    }
    assert "rmq" in users, "the service user was not created"
    rmq = users["rmq"]
    uid, gid, shell = int(rmq[2]), int(rmq[3]), rmq[6]
    assert uid < 1000 and shell.endswith("nologin")
    assert "rmq" not in Path("/etc/passwd").read_text().split(":"), "touched the real /etc/passwd"
    state = (staged / "var/lib/rmq").stat()
    assert (state.st_uid, state.st_gid, state.st_mode & 0o777) == (uid, gid, 0o750)
    etc = (staged / "etc/rmq").stat()
    assert (etc.st_uid, etc.st_gid, etc.st_mode & 0o777) == (0, gid, 0o750)
    for name in ("n1.toml", "broker-a.toml", "broker-b.toml"):
        installed = staged / "etc/rmq" / name
        assert installed.read_text() == (configs / name).read_text()
        assert installed.stat().st_mode & 0o777 == 0o640 and installed.stat().st_gid == gid
    unit = (staged / "etc/systemd/system/rmq-broker@.service").read_text()
    assert f"ExecStart={VENV}/bin/rmq-broker --config /etc/rmq/%i.toml" in unit
    console = (staged / "etc/systemd/system/rmq-console.service").read_text()
    assert f"ExecStart={VENV}/bin/rmq-console --config /etc/rmq/console.toml" in console
    assert os.readlink(staged / "usr/local/bin/rmqctl") == f"{VENV}/bin/rmqctl"
    # Every page of docs/, so the links between them resolve in the installed copy.
    pages = {p.name for p in (ROOT / "docs").glob("*.md")}
    assert {"operations.md", "design.md"} <= pages
    assert {p.name for p in (staged / "opt/rmq/doc").glob("*.md")} == pages

    # The cluster's auth key, a self-signed CA and this host's certificate, the daemons' user
    # owning what they read, no key readable by others; the example configs load with them.
    etc_rmq = staged / "etc/rmq"
    for name, mode, owner in [
        ("auth.key", 0o600, uid),
        ("tls/node.key", 0o600, uid),
        ("tls/node.crt", 0o644, uid),
        ("tls/ca.crt", 0o644, 0),
        ("tls/ca.key", 0o600, 0),
    ]:
        st = (etc_rmq / name).stat()
        assert (st.st_mode & 0o777, st.st_uid) == (mode, owner), name
    verified = subprocess.run(
        [
            "openssl",
            "verify",
            "-CAfile",
            str(etc_rmq / "tls/ca.crt"),
            str(etc_rmq / "tls/node.crt"),
        ],
        capture_output=True,
        text=True,
    )
    assert verified.returncode == 0, verified.stdout + verified.stderr
    san = subprocess.run(
        [
            "openssl",
            "x509",
            "-noout",
            "-ext",
            "subjectAltName",
            "-in",
            str(etc_rmq / "tls/node.crt"),
        ],
        capture_output=True,
        text=True,
    )
    assert "IP Address:10.0.0.2" in san.stdout, san.stdout
    made = {
        name: (etc_rmq / name).read_bytes() for name in ("auth.key", "tls/ca.crt", "tls/node.crt")
    }
    config = load_example(BrokerConfig, etc_rmq / "broker-a.toml", etc_rmq)
    assert config.auth_enabled and config.tls_files is not None

    # Again: idempotent, and an operator's edited config is kept.
    edited = staged / "etc/rmq/broker-a.toml"
    edited.write_text(edited.read_text() + '\nflush = "sync"\n')
    again = run_install(staged, "--configs", str(configs))
    assert again.returncode == 0, again.stderr
    assert "user rmq exists" in again.stdout
    assert "kept" in again.stdout and "auth.key (already there)" in again.stdout
    for name, content in made.items():  # never overwritten
        assert (etc_rmq / name).read_bytes() == content, name
    assert (staged / "etc/passwd").read_text().count("\nrmq:") == 1
    assert edited.read_text().endswith('flush = "sync"\n')


@needs_root
def test_install_refuses_what_it_cannot_do(tmp_path: Path) -> None:
    bad = run_install(tmp_path, "--configs", str(tmp_path))
    assert bad.returncode == 1 and "holds no *.toml" in bad.stderr
    nodestvenv = subprocess.run(
        ["bash", str(INSTALL), "--destdir", str(tmp_path)], capture_output=True, text=True
    )
    assert nodestvenv.returncode == 1 and "--destdir needs --venv" in nodestvenv.stderr


@pytest.fixture
def installed_units(staged: Path) -> Path:
    if os.geteuid() != 0 or shutil.which("useradd") is None:
        pytest.skip("install.sh needs root and useradd")
    result = run_install(staged)
    assert result.returncode == 0, result.stderr
    return staged / "etc/systemd/system"


def analyze(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    binary = require_tool("systemd-analyze", "systemd")
    return subprocess.run([binary, *args], cwd=cwd, capture_output=True, text=True, timeout=120)


def test_systemd_analyze_verify_passes_on_the_installed_units(installed_units: Path) -> None:
    instances = [
        "./rmq-controller@n0.service",
        "./rmq-broker@broker-a.service",
        "./rmq.target",
        "./rmq-controllers.target",
        "./rmq-console.service",
    ]
    result = analyze("verify", *instances, cwd=installed_units)
    # verify exits 0 on warnings (an unknown key, a bad value): any output is a failure too.
    assert result.returncode == 0 and not (result.stdout + result.stderr).strip(), (
        result.stdout + result.stderr
    )


def test_systemd_analyze_verify_catches_a_broken_unit(installed_units: Path) -> None:
    """The check above can fail: a typo and a missing binary are both reported."""
    unit = installed_units / "rmq-broker@.service"
    unit.write_text(
        unit.read_text()
        .replace("PrivateTmp=yes", "PrivateTmpp=yes")
        .replace(str(VENV), "/nonexistent")
    )
    result = analyze("verify", "./rmq-broker@broker-a.service", cwd=installed_units)
    output = result.stdout + result.stderr
    assert "PrivateTmpp" in output and "/nonexistent" in output


@pytest.mark.parametrize(
    "instance",
    ["rmq-controller@n0.service", "rmq-broker@broker-a.service", "rmq-console.service"],
)
def test_exposure_stays_low(installed_units: Path, instance: str) -> None:
    result = analyze("security", "--offline=true", f"./{instance}", cwd=installed_units)
    found = re.search(r"Overall exposure level for \S+: (\d+\.\d+)", result.stdout)
    assert found is not None, result.stdout + result.stderr
    assert float(found.group(1)) <= MAX_EXPOSURE, result.stdout
