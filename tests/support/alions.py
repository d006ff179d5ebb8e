"""The classic Node.js client ali-ons in tests: tests/alions (its package.json, lockfile and
alions_client.js, whose modes its header lists), installed with ``npm ci --ignore-scripts``."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

from tests.support.cluster import Cluster
from tests.support.messages import create_once_registered
from tests.support.official_client import client_env, npm_modules, run_to_end
from tests.support.procs import ROOT

PACKAGE = ROOT / "tests" / "alions"
SCRIPT = PACKAGE / "alions_client.js"


def node() -> str:
    return str(shutil.which("node"))


def alions_env(home: Path) -> dict[str, str]:
    """The environment of an ali-ons process (installs the package once per machine)."""
    modules = npm_modules(PACKAGE, "the ali-ons client")
    return client_env(home, PATH=os.environ.get("PATH", ""), NODE_PATH=str(modules))


async def create_topic(cluster: Cluster, topic: str, queues: int) -> None:
    """``topic`` with ``queues`` queues, created through the controllers (retried until they
    commit it)."""
    await create_once_registered(cluster, topic, queues, f"topic {topic} to be created")


async def run_alions(cluster: Cluster, tmp: Path, *args: str) -> dict[str, Any]:
    """``node alions_client.js MODE NAMESRV ARGS..`` (``args[0]`` the mode, the nameSrv every
    controller, as an array as the README gives it) run to its end; its JSON."""
    name_srv = ",".join(c.address for c in cluster.controllers)
    return await run_to_end(
        [node(), str(SCRIPT), args[0], name_srv, *args[1:]],
        tmp,
        env=alions_env(tmp),
        timeout=120,
    )
