"""rmqctl's user and ACL commands check their arguments before sending anything: a bad one is
one line on stderr and exit status 1 (no controller is running here: nothing could answer)."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from rmqctl.cli import cli

NOWHERE = "127.0.0.1:1"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["createAcl", "-s", "alice", "-r", "Topic:x", "-A", "pub", "-i", "10.0.0.1/8"],
         "malformed CIDR '10.0.0.1/8'"),
        (["createAcl", "-s", "alice", "-r", "Topic:x", "-A", "pub", "-i", "10.0.0/33"],
         "malformed CIDR '10.0.0/33'"),
        (["createAcl", "-s", "alice", "-r", "Topic:x", "-A", "publish"], "unknown action 'publish'"),
        (["updateAcl", "-s", "alice", "-r", "Topic:x", "-A", "pub", "-d", "maybe"],
         "unknown decision 'maybe'"),
        (["createAcl", "-s", "alice", "-r", "Topic:", "-A", "pub"], "empty name"),
        (["createAcl", "-s", "alice", "-r", "Queue:x", "-A", "pub"], "unknown resource type"),
        (["createAcl", "-s", "Group:alice", "-r", "Topic:x", "-A", "pub"], "must be User:name"),
        (["deleteAcl", "-s", "alice", "-r", "Topic"], "must be Type:name"),
        (["createUser", "-u", "", "-p", "long-enough"], "username must not be empty"),
        (["createUser", "-u", "alice", "-p", "short"], "secret must be 8 to 256 characters"),
        (["createUser", "-u", "alice", "-p", "long-enough", "-t", "admin"], "unknown user type"),
        (["updateUser", "-u", "alice"], "nothing to update"),
    ],
)  # fmt: skip
def test_bad_arguments_are_one_line_and_exit_1(args: list[str], message: str) -> None:
    result = CliRunner().invoke(cli, ["-a", NOWHERE, *args])
    assert result.exit_code == 1, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("rmqctl: ") and message in lines[0], lines
    if "-p" in args:  # the secret is never echoed
        assert args[args.index("-p") + 1] not in result.output


def test_help_says_the_commands_need_a_super_user() -> None:
    for command in ("createUser", "listAcl"):
        result = CliRunner().invoke(cli, [command, "--help"])
        assert "only a super user may do this" in result.output
