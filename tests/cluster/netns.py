"""Test hosts in Linux network namespaces, joined by a bridge, with partitions between them.

Each host is a namespace with one veth leg on a bridge in the root namespace and one address in
a /24 of its own (10.<a>.<b>.0/24, picked per run). A partition of host X from addresses Y is a
blackhole route for Y inside X: X can neither send to Y nor answer Y, so TCP between them stops
in both directions while X still reaches everyone else. Needs root and iproute2 (``ip``);
:func:`available` tells whether this machine allows it, and :func:`require` skips a test where it
does not, except under CI (``CI=true``), where it fails: .ci/run installs iproute2 and runs as
root, so a test that cannot make namespaces there is a broken set-up, not a pass.
"""

from __future__ import annotations

import itertools
import os
import shutil
import subprocess
from dataclasses import dataclass, field

import pytest


def _ip(*args: str, netns: str | None = None) -> None:
    argv = ["ip", *(["-n", netns] if netns else []), *args]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=20)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)}: {done.stderr.strip()}")


def available() -> str | None:
    """None when namespaces can be made here, else why not."""
    if shutil.which("ip") is None:
        return "iproute2 ('ip') is not installed"
    if os.geteuid() != 0:
        return "network namespaces need root"
    probe = f"rmqprobe{os.getpid()}"
    try:
        _ip("netns", "add", probe)
    except (RuntimeError, OSError) as exc:
        return f"cannot create a network namespace: {exc}"
    _ip("netns", "del", probe)
    return None


def require() -> None:
    """Return when namespaces can be made here; else skip the calling test, or fail it under
    CI (``$CI`` set, as .ci/run's callers set it)."""
    why = available()
    if why is None:
        return
    if os.environ.get("CI"):
        pytest.fail(
            f"no network namespaces here: {why}. CI must run these tests: .ci/run installs "
            "iproute2; run it as root, with CAP_SYS_ADMIN and CAP_NET_ADMIN"
        )
    pytest.skip(f"no network namespaces here: {why}")


_made = itertools.count()
"""HostNets made by this process: each names its namespaces and links anew."""


@dataclass
class HostNet:
    """A bridge and namespaces named after this process and the count of HostNets it made
    before, removed by :meth:`close`.

    Not after the process alone: the kernel destroys a deleted namespace, and the veth legs in
    it, in the background, so the next test of this process (a pytest-xdist worker runs many in
    a row) could not make its ``rv<tag>10`` yet ("RTNETLINK answers: File exists")."""

    hosts: dict[str, str] = field(default_factory=dict)  # namespace -> address
    _tag: str = ""
    _bridge: str = ""
    _subnet: str = ""

    def __post_init__(self) -> None:
        pid = os.getpid()
        self._tag = f"{pid % 100000}x{next(_made) % 100}"  # "rvi", tag, index: 13 of 15 bytes
        self._subnet = f"10.{200 + pid % 50}.{(pid // 50) % 250}"  # free again once closed
        self._bridge = f"rmqbr{self._tag}"
        _ip("link", "add", self._bridge, "type", "bridge")
        _ip("addr", "add", f"{self._subnet}.1/24", "dev", self._bridge)
        _ip("link", "set", self._bridge, "up")

    def add_host(self, name: str) -> str:
        """A namespace ``rmq<tag><name>`` on the bridge; returns its address."""
        netns = f"rmq{self._tag}{name}"
        index = len(self.hosts) + 10
        address = f"{self._subnet}.{index}"
        outside, inside = f"rv{self._tag}{index}", f"rvi{self._tag}{index}"
        _ip("netns", "add", netns)
        self.hosts[netns] = address
        _ip("link", "add", outside, "type", "veth", "peer", "name", inside)
        _ip("link", "set", inside, "netns", netns)
        _ip("link", "set", outside, "master", self._bridge)
        _ip("link", "set", outside, "up")
        _ip("addr", "add", f"{address}/24", "dev", inside, netns=netns)
        _ip("link", "set", inside, "up", netns=netns)
        _ip("link", "set", "lo", "up", netns=netns)
        return address

    def netns_of(self, address: str) -> str:
        return next(ns for ns, a in self.hosts.items() if a == address)

    @staticmethod
    def exec_prefix(netns: str) -> list[str]:
        return ["ip", "netns", "exec", netns]

    def partition(self, host: str, away_from: list[str]) -> None:
        """Cut ``host`` (an address) off from the addresses ``away_from``, both directions."""
        for other in away_from:
            _ip("route", "add", "blackhole", f"{other}/32", netns=self.netns_of(host))

    def heal(self, host: str, away_from: list[str]) -> None:
        for other in away_from:
            _ip("route", "del", "blackhole", f"{other}/32", netns=self.netns_of(host))

    def close(self) -> None:
        """Remove every namespace (their veth legs go with them) and the bridge."""
        for netns in self.hosts:
            subprocess.run(["ip", "netns", "del", netns], capture_output=True, timeout=20)
        subprocess.run(["ip", "link", "del", self._bridge], capture_output=True, timeout=20)
