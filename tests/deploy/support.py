"""What the deploy tests share: system tools that .ci/run installs, the example configs loaded
with the security files deploy/install.sh makes."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import TypeVar

import pytest

from daemon.cli import load_config

C = TypeVar("C")


def require_tool(name: str, package: str) -> str:
    """The path of ``name``; without it, skip (a developer machine) or fail (CI, where .ci/run
    installs ``package`` with apt-get, so a missing tool is a broken CI set-up)."""
    binary = shutil.which(name)
    if binary is None:
        how = f"{name} is not installed (apt-get install {package}; .ci/run does)"
        if os.environ.get("CI"):
            pytest.fail(f"{how}: CI must have it")
        pytest.skip(how)
    return binary


ROOT = Path(__file__).resolve().parents[2]
SECURITY_SH = ROOT / "deploy" / "security.sh"


def make_security_files(directory: Path) -> Path:
    """What deploy/install.sh makes in /etc/rmq (deploy/security.sh), made in ``directory``."""
    done = subprocess.run(
        ["bash", str(SECURITY_SH), "--dir", str(directory), "--address", "127.0.0.1"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return directory


def load_example(cls: type[C], path: Path, security: Path) -> C:
    """An example config as its daemon loads it, its /etc/rmq files (auth key, certificates)
    taken from ``security`` instead (made by :func:`make_security_files`)."""
    text = path.read_text().replace('"/etc/rmq/', f'"{security}/')
    copy = security / f"{path.parent.name}-{path.name}"
    copy.write_text(text)
    return load_config(cls, copy, {})
