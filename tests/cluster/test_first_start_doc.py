"""docs/operations.md, "First start", step 1, as an operator pastes it: a controller started
from the shipped host1 config (deploy/config/host1/n0.toml: authentication and TLS on, mutual
TLS inside the cluster) with the files deploy/security.sh makes, then the step's shell lines run
by bash in order (``systemctl`` left out: the controller is already running; /etc/rmq, the
addresses and the home directory substituted; the secret the operator types given on stdin).
The last line, ``rmqctl getControllerMetaData``, must show the leader.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.cluster.test_grpc_tls_only import shipped
from tests.deploy.support import make_security_files, require_tool
from tests.support.procs import Daemon, free_port, port_open
from tests.support.wait import wait_until

pytestmark = pytest.mark.multiprocess

ROOT = Path(__file__).resolve().parents[2]
OPERATIONS = ROOT / "docs" / "operations.md"
SECRET = "first-Start-4242"


def step_one_lines() -> list[str]:
    """The shell lines of "First start", step 1 (up to step 2), ``systemctl`` ones left out."""
    text = OPERATIONS.read_text()
    section = text[text.index("\n## First start\n") :]
    step = section[: section.index("\n2. ")]
    lines: list[str] = []
    for block in re.findall(r"```sh\n(.*?)```", step, re.S):
        for line in block.splitlines():
            line = line.strip()
            if line and not line.startswith(("#", "systemctl ")):
                lines.append(line)
    return lines


def test_the_first_start_commands_work_against_the_shipped_configs(tmp_path: Path) -> None:
    require_tool("openssl", "openssl")
    security = make_security_files(tmp_path / "etc-rmq")
    port = free_port()
    config = shipped(
        ROOT / "deploy" / "config" / "host1" / "n0.toml", security, tmp_path / "n0.toml",
        peers=f"n0-127.0.0.1:{port}", data_dir=str(tmp_path / "n0"), metrics_port=0,
    )  # fmt: skip
    controller = Daemon(
        "n0", [sys.executable, "-m", "controller", "--config", str(config)], tmp_path / "n0.log"
    )
    lines = step_one_lines()
    assert lines and lines[-1].startswith("rmqctl getControllerMetaData"), lines
    script = "set -e\n" + "\n".join(
        line.replace("/etc/rmq/", f"{security}/").replace('"..."', f'"{SECRET}"') for line in lines
    )
    home = tmp_path / "home"
    home.mkdir()
    env = dict(os.environ)
    for name in ("RMQ_ACCESS_KEY", "RMQ_SECRET_KEY", "RMQ_CREDENTIALS_FILE", "RMQ_CA_FILE"):
        env.pop(name, None)
    env.update(
        HOME=str(home),
        PATH=f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}",
        RMQCTL_ADDRESSES=f"127.0.0.1:{port}",
    )
    try:
        controller.start()
        wait_until(
            lambda: controller.alive() and port_open(port),
            "the controller to listen",
            30,
            on_timeout=controller.log,
        )
        done = subprocess.run(
            ["bash", "-c", script],
            input=f"{SECRET}\n",
            capture_output=True,
            text=True,
            env=env,
            timeout=120,
        )
        assert done.returncode == 0, (script, done.stdout, done.stderr)
        assert re.search(r"^n0\s+127\.0\.0\.1:\d+\s+leader$", done.stdout, re.M), done.stdout
    finally:
        controller.stop()
