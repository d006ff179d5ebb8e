"""Every Python snippet of README.md and docs/ runs as pasted: each ```python block is written to a
file and run as its own process against a real local cluster (three controllers, one broker group
``broker-a`` of three replicas with their gRPC endpoints), started here on ephemeral ports.

The snippets name the addresses ``make run`` listens on (controllers ``127.0.0.1:9878``,
``9868``, ``9858``; the first broker's gRPC endpoint ``127.0.0.1:10913``); the test replaces
each with its cluster's address and refuses a snippet that still names another address after
that, so no snippet reaches a cluster of ``make run`` on this host.

The ``rmqctl`` lines of the pages' shell blocks are parsed by rmqctl's own command line (every
command and option exists and takes the value given), without running them: many need a
second cluster, a file or a secret of the reader's.

A block fenced ```` ```python secure ```` runs against a second cluster, with authentication and
TLS on every port as ``make run SECURE=1`` starts it (its files and settings made by make run's
own code: the cluster's auth key, a CA and a certificate, mutual TLS inside the cluster; the
super user ``admin`` created as the cluster itself, its credentials in a file of mode 600), with
the variables ``var/secure/env`` exports set in its environment: ``RMQCTL_ADDRESSES`` (that cluster's controllers), ``RMQ_CREDENTIALS_FILE``
and ``RMQ_CA_FILE``. No other snippet gets them.

A snippet passes when it exits with status 0 within 90 s and writes nothing to stderr (the SDK
logs warnings and errors there). A block that cannot run against such a cluster says so on its fence line, with the reason:
```` ```python not-run: <why> ````. GitHub shows the block as Python all the same.
"""

from __future__ import annotations

import asyncio
import importlib.util
import os
import re
import shlex
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click
import pytest
from click.testing import CliRunner

from client import Credentials
from client.bootstrap import Bootstrap
from client.errors import ClientError
from protocol.codes import RequestCode
from remoting.client import ConnectionPool
from remoting.errors import RemotingError
from remoting.tls import client_context
from rmqctl.cli import COMMANDS, cli
from rmqctl.common import Settings
from tests.cluster.support import create_topic, group_masters
from tests.support.cluster import Cluster
from tests.support.procs import free_port, rmqctl
from tests.support.wait import wait_until_async

ROOT = Path(__file__).resolve().parents[2]
LAUNCHER = ROOT / "deploy" / "local_cluster.py"
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
BLOCK = re.compile(r"^```python(?P<info>[^\n]*)\n(?P<code>.*?)^```\s*$", re.S | re.M)
NOT_RUN = re.compile(r"^\s*not-run:\s*(?P<why>\S.*)$")
SECURE = "secure"
"""The fence info of a block that runs against the cluster with authentication and TLS on."""
ADDRESS = re.compile(r"\b\d{1,3}(?:\.\d{1,3}){3}:\d+\b")
CONTROLLERS = ("127.0.0.1:9878", "127.0.0.1:9868", "127.0.0.1:9858")
GRPC_ENDPOINT = "127.0.0.1:10913"
TOPICS = ("TopicTest", "Orders", "orders")
"""The topics the snippets use (the README's `rmqctl updateTopic` lines create them)."""
SNIPPET_TIMEOUT = 90
SHELL_BLOCK = re.compile(r"^```(?:sh|bash|shell)[^\n]*\n(?P<code>.*?)^```\s*$", re.S | re.M)
RMQCTL_LINE = re.compile(r"^(?:\S*/)?rmqctl\s")


@dataclass(frozen=True)
class Snippet:
    page: Path
    line: int
    code: str
    not_run: str | None
    secure: bool = False

    @property
    def where(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"


def snippets(pages: list[Path] = PAGES) -> list[Snippet]:
    found: list[Snippet] = []
    for page in pages:
        text = page.read_text()
        for m in BLOCK.finditer(text):
            info = m["info"].strip()
            why = NOT_RUN.match(info)
            assert info in ("", SECURE) or why, f"{page.name}: unknown fence info {info!r}"
            line = text.count("\n", 0, m.start()) + 1
            not_run = why["why"] if why else None
            found.append(Snippet(page, line, m["code"], not_run, secure=info == SECURE))
    return found


SNIPPETS = snippets()


@dataclass
class LocalCluster:
    cluster: Cluster
    grpc_endpoint: str
    env: dict[str, str]
    """What the snippet's environment adds (secure mode: the variables of var/secure/env)."""

    def localize(self, snippet: Snippet) -> str:
        """The snippet with ``make run``'s addresses replaced by this cluster's."""
        code = snippet.code.replace(GRPC_ENDPOINT, self.grpc_endpoint)
        for default, node in zip(CONTROLLERS, self.cluster.controllers, strict=True):
            code = code.replace(default, node.address)
        ours = {self.grpc_endpoint, *(c.address for c in self.cluster.controllers)}
        strangers = sorted(set(ADDRESS.findall(code)) - ours)
        assert not strangers, (
            f"{snippet.where} names {strangers}: not an address of make run's cluster that the "
            f"test knows ({', '.join(CONTROLLERS)}, gRPC {GRPC_ENDPOINT})"
        )
        return code


def start_local(
    cluster: Cluster,
    replicas: int,
    controller_config: str = "",
    *,
    tls: bool = False,
    broker_config: str = "",
) -> str:
    """make run's layout on ephemeral ports: the three controllers of ``cluster`` reading
    ``controller_config``, then broker-a with ``replicas`` replicas reading ``broker_config``,
    each serving gRPC (over TLS only with ``tls``, which the configs turn on, as make run
    SECURE=1 does). The first replica's gRPC endpoint: it stands for 127.0.0.1:10913."""
    if controller_config:
        cluster.configure_controllers(controller_config)
    grpc_ports = [free_port() for _ in range(replicas)]
    grpc_flag = "--grpc-tls-listen" if tls else "--grpc-listen"
    cluster.start_controllers()
    cluster.add_group(
        "broker-a",
        replicas,
        config=broker_config,
        per_broker=[[grpc_flag, f"127.0.0.1:{p}"] for p in grpc_ports],
    )
    return f"127.0.0.1:{grpc_ports[0]}"


@pytest.fixture(scope="module")
def local(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """make run's cluster: broker-a with three replicas, no authentication, no TLS."""
    cluster = Cluster(tmp_path_factory.mktemp("snippets"))
    try:
        grpc = start_local(cluster, 3)

        async def prepare() -> None:
            boot = Bootstrap(cluster.controller_addresses, timeout=2.0)
            try:
                master = (await group_masters(boot, cluster, "broker-a"))["broker-a"]
                for topic in TOPICS:
                    await create_topic(boot, master, topic)
            finally:
                boot.close()

        asyncio.run(prepare())
        yield LocalCluster(cluster, grpc, {})
    finally:
        cluster.stop()


def make_run_launcher() -> Any:
    """deploy/local_cluster.py (make run) as a module: its secure mode's files and settings."""
    spec = importlib.util.spec_from_file_location("local_cluster", LAUNCHER)
    assert spec is not None and spec.loader is not None
    launcher = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(launcher)
    return launcher


@pytest.fixture(scope="module")
def secure_local(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """make run SECURE=1's cluster, made by make run's own code (deploy/local_cluster.py's
    Security and make_security_files, which runs deploy/security.sh): the cluster's auth key,
    a CA and a certificate for 127.0.0.1, every daemon with authentication and TLS on (mutual
    inside the cluster); the super user ``admin`` created as the cluster itself, its
    credentials file (mode 600) and the variables var/secure/env exports. broker-a has one
    replica: the secure snippets need its TLS ports, not replication, and the host runs the
    open cluster beside it."""
    tmp = tmp_path_factory.mktemp("secure-snippets")
    launcher = make_run_launcher()
    security = launcher.Security(tmp / "secure")
    launcher.make_security_files(security, None)
    cluster = Cluster(tmp)
    try:
        grpc = start_local(
            cluster, 1, security.controller_config.read_text(), tls=True,
            broker_config=security.broker_config.read_text(),
        )  # fmt: skip
        admin = Credentials("admin", os.urandom(18).hex())
        made = rmqctl(
            "-a", cluster.controller_addresses, *security.cluster_rmqctl_args(),
            "createUser", "-u", admin.access_key, "-t", "Super", "-p", admin.secret_key,
        )  # fmt: skip
        assert made.returncode == 0, made.stderr + cluster.logs()
        credentials = security.credentials_file
        fd = os.open(credentials, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as out:
            out.write(f'access_key = "{admin.access_key}"\nsecret_key = "{admin.secret_key}"\n')
        env = {
            "RMQCTL_ADDRESSES": cluster.controller_addresses,
            "RMQ_CREDENTIALS_FILE": str(credentials),
            "RMQ_CA_FILE": str(security.ca),
        }
        # The topics, as the README's lines make them: rmqctl with var/secure/env's variables
        # (and none of rmqctl's of this host's environment).
        ours = {k: v for k, v in os.environ.items() if not k.startswith("RMQ")} | env
        for topic in TOPICS:
            done = rmqctl("updateTopic", "-t", topic, "-q", "4", env=ours)
            assert done.returncode == 0, done.stderr + cluster.logs()

        async def routed() -> None:
            pool = ConnectionPool(2.0, admin, client_context(security.ca))
            boot = Bootstrap(cluster.controller_addresses, pool, 2.0)
            try:
                for topic in TOPICS:

                    async def route(t: str = topic) -> bool:
                        try:
                            await boot.call(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": t})
                            return True
                        except (ClientError, RemotingError):
                            return False

                    await wait_until_async(route, f"topic {topic} routed", 30, interval=0.1)
            finally:
                boot.close()

        asyncio.run(routed())
        yield LocalCluster(cluster, grpc, env)
    finally:
        cluster.stop()


pytestmark = pytest.mark.xdist_group("tests/docs/test_doc_snippets.py")
"""One worker runs the module: its two clusters (module-scoped, reached through
``request.getfixturevalue``) start once."""


def test_the_pages_have_python_snippets_and_few_are_not_run() -> None:
    assert len(SNIPPETS) >= 15, [s.where for s in SNIPPETS]
    assert [s.where for s in SNIPPETS if s.secure], "no secure-mode snippet left to run"
    skipped = [f"{s.where}: {s.not_run}" for s in SNIPPETS if s.not_run]
    assert len(skipped) <= 5, skipped


@pytest.mark.multiprocess
@pytest.mark.parametrize("snippet", SNIPPETS, ids=lambda s: s.where)
def test_the_snippet_runs_as_pasted(
    snippet: Snippet, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    if snippet.not_run:
        pytest.skip(f"marked not-run: {snippet.not_run}")
    local: LocalCluster = request.getfixturevalue("secure_local" if snippet.secure else "local")
    script = tmp_path / "snippet.py"
    script.write_text(local.localize(snippet))
    try:
        done = subprocess.run(
            [sys.executable, str(script)],
            capture_output=True,
            text=True,
            timeout=SNIPPET_TIMEOUT,
            cwd=tmp_path,
            env={"HOME": str(tmp_path), "PATH": "/usr/bin:/bin", **local.env},
        )
    except subprocess.TimeoutExpired as exc:
        raise AssertionError(
            f"{snippet.where} still running after {SNIPPET_TIMEOUT}s\n{exc.stderr!r}"
        ) from exc
    assert done.returncode == 0, (
        f"{snippet.where} exited with {done.returncode}:\n{done.stderr[-3000:]}\n"
        f"{local.cluster.logs()[-4000:]}"
    )
    assert not done.stderr, f"{snippet.where} ran but logged:\n{done.stderr[-3000:]}"


def rmqctl_lines(pages: list[Path] = PAGES) -> list[tuple[str, str]]:
    """(page:line, command) for every rmqctl line of the pages' shell blocks, its comment cut."""
    found: list[tuple[str, str]] = []
    for page in pages:
        text = page.read_text()
        for m in SHELL_BLOCK.finditer(text):
            first = text.count("\n", 0, m.start("code")) + 1
            for offset, line in enumerate(m["code"].replace("\\\n", "  ").splitlines()):
                command = line.split(" #")[0].strip()
                if RMQCTL_LINE.match(command):
                    found.append((f"{page.relative_to(ROOT)}:{first + offset}", command))
    return found


RMQCTL_LINES = rmqctl_lines()


def test_the_pages_have_rmqctl_lines() -> None:
    assert len(RMQCTL_LINES) >= 50, RMQCTL_LINES


@pytest.mark.parametrize(("where", "command"), RMQCTL_LINES, ids=[w for w, _ in RMQCTL_LINES])
def test_the_rmqctl_line_parses(where: str, command: str) -> None:
    """``[...]`` marks optional parts: they are parsed as given. A prompt (createUser's
    secret) reads a typed answer."""
    argv = [a for a in (word.strip("[]") for word in shlex.split(command)[1:]) if a]
    at = next((i for i, a in enumerate(argv) if a in COMMANDS), None)
    assert at is not None, f"{where}: no rmqctl command in {command!r}"
    try:
        with CliRunner().isolation(input="a-secret\na-secret\n"):
            ctx = cli.make_context("rmqctl", argv[: at + 1], obj=Settings(addresses=CONTROLLERS[0]))
            command = cli.get_command(ctx, argv[at])
            assert command is not None, argv[at]
            command.make_context(argv[at], argv[at + 1 :], parent=ctx)
    except click.exceptions.Exit:
        pass  # --help, --version
    except (click.ClickException, click.exceptions.Abort) as exc:
        message = exc.format_message() if isinstance(exc, click.ClickException) else "aborted"
        raise AssertionError(f"{where}: rmqctl refuses {command!r}: {message}") from exc
