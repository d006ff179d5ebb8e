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
def test_bad_arguments_are_usage_errors_exit_2(args: list[str], message: str) -> None:
    """A bad option value is a usage error (click's exit status 2, its last line naming it),
    said before anything is sent; these exited 1 like a refusal of the controllers."""
    result = CliRunner().invoke(cli, ["-a", NOWHERE, *args])
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert lines[0].startswith("Usage: ") and lines[-1].startswith("Error: "), lines
    assert message in lines[-1], lines
    if "-p" in args:  # the secret is never echoed
        assert args[args.index("-p") + 1] not in result.output


def test_help_says_the_commands_need_a_super_user() -> None:
    for command in ("createUser", "listAcl"):
        result = CliRunner().invoke(cli, [command, "--help"])
        assert "only a super user may do this" in result.output
