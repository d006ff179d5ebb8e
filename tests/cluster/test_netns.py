"""The network-namespace tests skip where namespaces cannot be made, and fail there under CI
(``CI=true``: .ci/run installs iproute2 and runs as root, so a skip would hide a broken set-up);
where they can be made, a bridge and a host come up and go away again."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.cluster import netns


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
