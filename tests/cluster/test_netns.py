"""The network-namespace tests skip where namespaces cannot be made, and fail there under CI
(``CI=true``: .ci/run installs iproute2 and runs as root, so a skip would hide a broken set-up);
where they can be made, a bridge and a host come up and go away again."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.cluster import netns
from tests.support.wait import wait_until


def test_without_ip_the_tests_skip_on_a_developer_machine(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # no ip here
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(pytest.skip.Exception, match="iproute2 \\('ip'\\) is not installed"):
        netns.require()


def test_without_ip_the_tests_fail_under_ci(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="CI must run these tests"):
        netns.require()


def test_a_host_comes_up_and_goes_away() -> None:
    netns.require()
    net = netns.HostNet()
    try:
        address = net.add_host("probe")
        name = net.netns_of(address)
        shown = subprocess.run(["ip", "-n", name, "-4", "addr"], capture_output=True, text=True)
        assert address in shown.stdout
    finally:
        net.close()
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert name not in listed


def test_a_host_net_comes_up_while_the_last_ones_namespace_is_still_going_away() -> None:
    """The kernel destroys a deleted namespace (and its veth pair) in the background; a process
    still inside keeps it, as here, for as long as it lives. A worker running the namespace
    tests one after another made the same link names again and failed with 'File exists'."""
    netns.require()
    first = netns.HostNet()
    lingering: subprocess.Popen[bytes] | None = None
    try:
        name = first.netns_of(first.add_host("probe"))
        lingering = subprocess.Popen([*first.exec_prefix(name), "sleep", "60"])
        pid = lingering.pid
        wait_until(  # ip netns exec enters the namespace, then becomes sleep
            lambda: os.readlink(f"/proc/{pid}/exe").endswith("/sleep"), "sleep in the namespace", 10
        )
        first.close()  # the name is gone; the namespace and its links are not yet
        second = netns.HostNet()
        try:
            address = second.add_host("probe")
            shown = subprocess.run(
                ["ip", "-n", second.netns_of(address), "-4", "addr"],
                capture_output=True,
                text=True,
            )
            assert address in shown.stdout
        finally:
            second.close()
    finally:
        if lingering is not None:
            lingering.kill()
            lingering.wait()
        first.close()
