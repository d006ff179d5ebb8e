"""What the deploy tests share: system tools that .ci/run installs."""

from __future__ import annotations

import os
import shutil

import pytest


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
