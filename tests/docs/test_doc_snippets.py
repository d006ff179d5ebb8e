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

A snippet passes when it exits with status 0 within 90 s and writes nothing to stderr (the SDK
logs warnings and errors there). A block that cannot run against such a cluster says so on its fence line, with the reason:
```` ```python not-run: <why> ````. GitHub shows the block as Python all the same.
"""

from __future__ import annotations

import asyncio
import re
import shlex
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from client.bootstrap import Bootstrap
from rmqctl.cli import cli
from rmqctl.common import Settings
from tests.cluster.support import create_topic, group_masters
from tests.support.cluster import Cluster
from tests.support.procs import free_port

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
BLOCK = re.compile(r"^```python(?P<info>[^\n]*)\n(?P<code>.*?)^```\s*$", re.S | re.M)
NOT_RUN = re.compile(r"^\s*not-run:\s*(?P<why>\S.*)$")
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
            assert not info or why, f"{page.name}: unknown fence info {info!r}"
            line = text.count("\n", 0, m.start()) + 1
            found.append(Snippet(page, line, m["code"], why["why"] if why else None))
    return found


SNIPPETS = snippets()


@dataclass
class LocalCluster:
    cluster: Cluster
    grpc_endpoint: str

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


@pytest.fixture(scope="module")
def local(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """make run's layout on ephemeral ports: three controllers, broker-a with three replicas,
    each serving gRPC; the first replica's endpoint stands for 127.0.0.1:10913."""
    cluster = Cluster(tmp_path_factory.mktemp("snippets"))
    grpc_ports = [free_port() for _ in range(3)]
    try:
        cluster.start_controllers()
        cluster.add_group(
            "broker-a", per_broker=[["--grpc-listen", f"127.0.0.1:{p}"] for p in grpc_ports]
        )

        async def prepare() -> None:
            boot = Bootstrap(cluster.controller_addresses, timeout=2.0)
            try:
                master = (await group_masters(boot, cluster, "broker-a"))["broker-a"]
                for topic in TOPICS:
                    await create_topic(boot, master, topic)
            finally:
                boot.close()

        asyncio.run(prepare())
        yield LocalCluster(cluster, f"127.0.0.1:{grpc_ports[0]}")
    finally:
        cluster.stop()


def test_the_pages_have_python_snippets_and_few_are_not_run() -> None:
    assert len(SNIPPETS) >= 15, [s.where for s in SNIPPETS]
    skipped = [f"{s.where}: {s.not_run}" for s in SNIPPETS if s.not_run]
    assert len(skipped) <= 5, skipped


@pytest.mark.multiprocess
@pytest.mark.parametrize("snippet", SNIPPETS, ids=lambda s: s.where)
def test_the_snippet_runs_as_pasted(snippet: Snippet, local: LocalCluster, tmp_path: Path) -> None:
    if snippet.not_run:
        pytest.skip(f"marked not-run: {snippet.not_run}")
    script = tmp_path / "snippet.py"
    script.write_text(local.localize(snippet))
    try:
        done = subprocess.run(
            [sys.executable, str(script)],
            capture_output=True,
            text=True,
            timeout=SNIPPET_TIMEOUT,
            cwd=tmp_path,
            env={"HOME": str(tmp_path), "PATH": "/usr/bin:/bin"},
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
    at = next((i for i, a in enumerate(argv) if a in cli.commands), None)
    assert at is not None, f"{where}: no rmqctl command in {command!r}"
    try:
        with CliRunner().isolation(input="a-secret\na-secret\n"):
            ctx = cli.make_context("rmqctl", argv[: at + 1], obj=Settings(addresses=CONTROLLERS[0]))
            cli.commands[argv[at]].make_context(argv[at], argv[at + 1 :], parent=ctx)
    except click.exceptions.Exit:
        pass  # --help, --version
    except (click.ClickException, click.exceptions.Abort) as exc:
        message = exc.format_message() if isinstance(exc, click.ClickException) else "aborted"
        raise AssertionError(f"{where}: rmqctl refuses {command!r}: {message}") from exc
