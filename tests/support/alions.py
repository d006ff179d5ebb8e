"""The classic Node.js client ali-ons in tests: tests/alions (its package.json, lockfile and
alions_client.js, whose modes its header lists), installed with ``npm ci --ignore-scripts``."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

from client.admin import Admin
from client.errors import ClientError
from tests.support.cluster import Cluster
from tests.support.official_client import client_env, npm_modules, run_to_end
from tests.support.procs import ROOT
from tests.support.wait import wait_until_async

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
    async with Admin(cluster.controller_addresses, timeout=2.0) as admin:

        async def created() -> bool:
            try:
                return bool(await admin.create_topic(topic, queues))
            except ClientError:
                return False

        await wait_until_async(
            created, f"topic {topic} to be created", 30, interval=0.2, on_timeout=cluster.logs
        )


async def run_alions(cluster: Cluster, tmp: Path, *args: str) -> dict[str, Any]:
    """``node alions_client.js MODE NAMESRV ARGS..`` (``args[0]`` the mode, the nameSrv a
    controller) run to its end; its JSON."""
    name_srv = cluster.controllers[0].address
    return await run_to_end(
        [node(), str(SCRIPT), args[0], name_srv, *args[1:]],
        tmp,
        env=alions_env(tmp),
        timeout=120,
    )
