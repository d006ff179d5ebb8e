"""Users and access rules through rmqctl against three ``rmq-controller`` processes: created on
the leader, still there (secrets never shown, never stored in clear) after a kill -9 of the
leader, on the new leader and on the old one restarted from its snapshot."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.controller.support import ControllerCluster, agreed_leader
from tests.support.cli import rmqctl_run
from tests.support.wait import wait_until_async

pytestmark = pytest.mark.multiprocess

SECRET = "alice-Secret-42"
ROOT_SECRET = "root-Secret-4242"


@pytest.fixture
def controllers(tmp_path: Path) -> Iterator[ControllerCluster]:
    key = tmp_path / "auth.key"
    key.write_bytes(os.urandom(32).hex().encode())
    key.chmod(0o600)
    with ControllerCluster(
        tmp_path, config={"auth_key_file": str(key), "snapshot_every": 3}
    ) as cluster:
        yield cluster


def rmqctl(addresses: str, *args: str) -> subprocess.CompletedProcess[str]:
    """``rmqctl -a addresses *args`` in this process (tests/support/cli.py), not a Python start
    per command."""
    return rmqctl_run("-a", addresses, *args)


def ok(addresses: str, *args: str) -> Any:
    done = rmqctl(addresses, "--json", *args)
    assert done.returncode == 0, done.stderr
    assert SECRET not in done.stdout + done.stderr and ROOT_SECRET not in done.stdout
    return json.loads(done.stdout)


EXPECTED_ACLS = [
    {
        "username": "alice",
        "userType": "normal",
        "version": 4,
        "rules": [
            {"resource": "Group:g*", "actions": ["sub"], "decision": "allow", "sources": []},
            {
                "resource": "Topic:orders",
                "actions": ["pub", "sub"],
                "decision": "allow",
                "sources": ["10.0.0.0/8"],
            },
            {"resource": "Topic:secret-*", "actions": ["sub"], "decision": "deny", "sources": []},
        ],
    }
]


async def test_users_and_rules_survive_a_leader_kill(controllers: ControllerCluster) -> None:
    addrs = controllers.addresses
    ok(addrs, "createUser", "-u", "alice", "-p", SECRET)
    ok(addrs, "createUser", "-u", "root", "-p", ROOT_SECRET, "-t", "Super")
    ok(addrs, "createAcl", "-s", "User:alice", "-r", "Topic:orders", "-A", "pub,sub",
       "-i", "10.0.0.0/8")  # fmt: skip
    ok(addrs, "createAcl", "-s", "alice", "-r", "Topic:secret-*,Group:g*", "-A", "sub",
       "-d", "Deny")  # fmt: skip
    ok(addrs, "updateAcl", "-s", "alice", "-r", "Group:g*", "-A", "sub", "-d", "allow")

    # Refused by the controllers: one clear line, exit 1, nothing stored (rmqctl's own checks
    # of the arguments: tests/rmqctl/test_auth_cli.py).
    for args, message in [
        (["createUser", "-u", "alice", "-p", SECRET], "USER_ALREADY_EXISTS"),
        (["createAcl", "-s", "bob", "-r", "Topic:x", "-A", "pub"], "user bob does not exist"),
        (["updateAcl", "-s", "alice", "-r", "Topic:x", "-A", "pub"], "has no rule on Topic:x"),
    ]:  # fmt: skip
        done = rmqctl(addrs, *args)
        assert done.returncode == 1, (args, done.stdout, done.stderr)
        assert message in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr

    users = ok(addrs, "listUser")
    assert users == {
        "users": [
            {"username": "alice", "userType": "normal", "version": 4},
            {"username": "root", "userType": "super", "version": 1},
        ]
    }
    assert ok(addrs, "listAcl") == {"acls": EXPECTED_ACLS}
    assert (
        ok(addrs, "listAcl", "-s", "User:alice", "-r", "Topic")["acls"][0]["rules"]
        == (EXPECTED_ACLS[0]["rules"][1:])
    )

    leader_id = await agreed_leader([p.address for p in controllers.procs.values()])
    leader = controllers.procs[leader_id]
    leader.kill9()
    survivors = [p.address for p in controllers.procs.values() if p is not leader]
    new_leader = await agreed_leader(survivors, timeout=30)
    assert new_leader != leader_id
    new_address = controllers.procs[new_leader].address
    assert ok(new_address, "listUser") == users
    assert ok(new_address, "listAcl") == {"acls": EXPECTED_ACLS}
    # The new leader takes changes: the version compare-and-set carries on where it was.
    ok(";".join(survivors), "updateUser", "-u", "alice", "-t", "super")

    # The old leader restarts (from its snapshot: snapshot_every = 3) and catches up.
    leader.start()

    async def caught_up() -> bool:
        done = rmqctl(leader.address, "--json", "listUser")
        return done.returncode == 0 and json.loads(done.stdout)["users"][0] == {
            "username": "alice", "userType": "super", "version": 5
        }  # fmt: skip

    await wait_until_async(caught_up, "the restarted controller to list alice as super", 30)
    snapshots = list(leader.data_dir.rglob("*snap*"))
    assert snapshots, sorted(p.name for p in leader.data_dir.rglob("*"))

    # Never in clear: not in any controller's files (log, snapshots) nor in its log output.
    for proc in controllers.procs.values():
        for path in [p for p in proc.data_dir.rglob("*") if p.is_file()]:
            data = path.read_bytes()
            assert SECRET.encode() not in data and ROOT_SECRET.encode() not in data, path
        assert SECRET not in proc.log() and ROOT_SECRET not in proc.log()
