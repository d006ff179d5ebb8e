"""rmqctl without a real broker: help, JSON shapes (against an in-memory fake), error exits."""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import json
import pkgutil
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import click
import pytest

from rmqctl import __path__ as RMQCTL_PATH
from rmqctl.cli import COMMANDS, all_commands
from tests.client.fakebroker import FakeCluster, cluster_in_thread
from tests.support.cli import rmqctl as invoke
from tests.support.procs import dead_address, python_output

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def fake() -> Iterator[tuple[FakeCluster, asyncio.AbstractEventLoop]]:
    with cluster_in_thread("broker-a", "broker-b") as served:
        yield served


def rmqctl(*args: str, timeout: float = 30) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "rmqctl", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=ROOT,
    )


def test_help_lists_every_command() -> None:
    code, out, _ = invoke("--help")
    assert code == 0
    for name in COMMANDS:
        assert name in out
        sub_code, sub_out, _ = invoke(name, "--help")
        assert sub_code == 0 and "-a, -n, --addresses ADDRS" in sub_out


def test_each_command_is_found_where_the_table_says_under_its_own_name() -> None:
    """rmqctl imports a command's module when it runs it (rmqctl.cli.COMMANDS): each entry
    names a command of that name, and every command an rmqctl module defines is an entry."""
    commands = all_commands()
    assert sorted(commands) == sorted(COMMANDS)
    assert all(command.name == name for name, command in commands.items())
    defined = {
        id(value)
        for info in pkgutil.iter_modules(RMQCTL_PATH, "rmqctl.")
        if info.name not in ("rmqctl.cli", "rmqctl.__main__")
        for value in vars(importlib.import_module(info.name)).values()
        if isinstance(value, click.Command) and not isinstance(value, click.Group)
    }
    assert defined == {id(command) for command in commands.values()}


def test_a_command_imports_its_own_area_only() -> None:
    """A run of getSyncStateSet's --help imports rmqctl.controller, not the producer, the
    consumers or the other areas' commands."""
    probe = (
        "import sys; from rmqctl.cli import cli; "
        "cli.main(['getSyncStateSet', '--help'], standalone_mode=False); "
        "print(sorted(m for m in sys.modules if m.startswith(('rmqctl.', 'client.'))))"
    )
    loaded = python_output(probe).strip().splitlines()[-1]
    assert "'rmqctl.controller'" in loaded
    for other in ("'rmqctl.message'", "'rmqctl.auth'", "'client.producer'", "'client.consumer'"):
        assert other not in loaded, loaded


def test_update_topic_creates_on_every_master_and_prints_its_document(
    fake: tuple[FakeCluster, asyncio.AbstractEventLoop],
) -> None:
    cluster, _ = fake
    addrs = f"{dead_address()};{cluster.brokers['broker-b'].address}"
    code, out, err = invoke("--json", "updateTopic", "-a", addrs, "-t", "orders", "-q", "3")
    assert (code, err) == (0, "")
    assert json.loads(out) == {"topic": "orders", "queues": 3, "brokers": ["broker-a", "broker-b"]}
    assert all(b.topics["orders"] == 3 for b in cluster.brokers.values())


def test_update_topic_with_an_unknown_cluster_fails_with_one_line(
    fake: tuple[FakeCluster, asyncio.AbstractEventLoop],
) -> None:
    cluster, _ = fake
    addr = cluster.brokers["broker-a"].address
    code, out, err = invoke("updateTopic", "-a", addr, "-t", "x", "-c", "Nope")
    assert code == 1 and out == ""
    assert err == "rmqctl: cluster 'Nope' not found (known: DefaultCluster)\n"


def test_topic_route_and_cluster_list_json_shapes(
    fake: tuple[FakeCluster, asyncio.AbstractEventLoop],
) -> None:
    cluster, _ = fake
    addr = cluster.brokers["broker-a"].address
    assert invoke("updateTopic", "-a", addr, "-t", "T", "-q", "2")[0] == 0
    code, out, _ = invoke("--json", "topicRoute", "-a", addr, "-t", "T")
    assert code == 0
    assert json.loads(out) == {
        "topic": "T",
        "brokers": [
            {
                "brokerName": name,
                "masterAddress": b.address,
                "slaves": [],
                "queues": 2,
                "perm": 6,
                "messageType": "NORMAL",
            }
            for name, b in sorted(cluster.brokers.items())
        ],
    }
    code, out, _ = invoke("--json", "clusterList", "-a", addr)
    assert code == 0
    assert json.loads(out) == {
        "clusters": {
            "DefaultCluster": [
                {"brokerName": name, "brokerId": 1, "address": b.address, "role": "MASTER"}
                for name, b in cluster.brokers.items()
            ]
        }
    }


def test_human_output_is_an_aligned_table(
    fake: tuple[FakeCluster, asyncio.AbstractEventLoop],
) -> None:
    cluster, _ = fake
    addr = cluster.brokers["broker-a"].address
    code, out, _ = invoke("clusterList", "-a", addr)
    assert code == 0
    header, *rows = out.splitlines()
    assert header.split() == ["Cluster", "Broker", "Name", "BID", "Address", "Role"]
    assert len(rows) == 2
    assert {row.index("127.0.0.1") for row in rows} == {header.index("Address")}


def test_send_then_consume_round_trip_with_json_shapes(
    fake: tuple[FakeCluster, asyncio.AbstractEventLoop],
) -> None:
    cluster, _ = fake
    addr = cluster.brokers["broker-a"].address
    assert invoke("updateTopic", "-a", addr, "-t", "T", "-q", "2")[0] == 0
    code, out, _ = invoke(
        "--json", "sendMessage", "-a", addr, "-t", "T", "-p", "héllo", "-k", "K", "--count", "10"
    )
    assert code == 0
    sent = json.loads(out)
    assert sent["sent"] == 10 and len(sent["results"]) == 10
    assert set(sent["results"][0]) == {"msgId", "brokerName", "queueId", "queueOffset"}

    code, out, _ = invoke(
        "--json",
        "consumeMessage",
        "-a",
        addr,
        "-t",
        "T",
        "-g",
        "G",
        "--count",
        "6",
        "--timeout",
        "20",
    )
    assert code == 0
    lines = [json.loads(line) for line in out.splitlines()]
    assert len(lines) == 6
    assert set(lines[0]) == {
        "msgId", "brokerName", "queueId", "queueOffset", "body", "keys", "tags", "properties",
        "messageGroup", "bornTimestamp", "storeTimestamp",
    }  # fmt: skip
    assert {(m["body"], m["keys"]) for m in lines} == {("héllo", "K")}
    # The 6 printed were committed: the next run prints exactly the other 4, then times out.
    code, out, _ = invoke(
        "--json", "consumeMessage", "-a", addr, "-t", "T", "-g", "G", "--timeout", "1.5"
    )
    rest = [json.loads(line) for line in out.splitlines()]
    assert code == 0 and len(rest) == 4
    seen = {(m["brokerName"], m["queueId"], m["queueOffset"]) for m in lines + rest}
    expected = {(r["brokerName"], r["queueId"], r["queueOffset"]) for r in sent["results"]}
    assert seen == expected


def test_unreachable_addresses_exit_1_with_one_line_and_no_traceback() -> None:
    a, b = dead_address(), dead_address()
    proc = rmqctl("--json", "clusterList", "-a", f"{a};{b}")
    assert proc.returncode == 1
    assert proc.stdout == ""
    assert proc.stderr == f"rmqctl: cannot reach any of {a};{b}: connection refused\n"


@pytest.mark.parametrize(
    "args",
    [
        ["topicRoute", "-t", "T"],
        ["updateTopic", "-t", "T"],
        ["sendMessage", "-t", "T", "-p", "x"],
        ["consumeMessage", "-t", "T", "-g", "G", "--timeout", "1"],
    ],
)
def test_every_command_reports_an_unreachable_cluster_the_same_way(args: list[str]) -> None:
    addr = dead_address()
    code, out, err = invoke(*args, "-a", addr)
    assert (code, out) == (1, "")
    assert err == f"rmqctl: cannot reach any of {addr}: connection refused\n"


def test_a_bad_address_is_a_clean_error() -> None:
    code, _, err = invoke("clusterList", "-a", "nonsense")
    assert code == 1
    assert err.startswith("rmqctl: cannot reach any of nonsense:") and err.count("\n") == 1


def test_usage_errors_keep_clicks_exit_status_2() -> None:
    proc = rmqctl("topicRoute")
    assert proc.returncode == 2
    assert "Missing option '-a'" in proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize(
    ("args", "words"),
    [
        # Bad values caught before any I/O are usage errors like any other (these were exit 1).
        (["queryMsgByOffset", "-t", "T", "-b", "b", "-q", "0", "-o", "-1"], "'-o' / '--offset'"),
        (["queryMsgByOffset", "-t", "T", "-b", "b", "-q", "-2", "-o", "0"], "'-q' / '--queue'"),
        (["queryMsgByKey", "-t", "T", "-k", "k", "--end", "noon"], "'noon' is not a time"),
        (["sendMessage", "-t", "T", "-p", "x", "--property", "color"], "'color' is not NAME=VALUE"),
        (["sendMessage", "-t", "T", "-p", "x", "--property", "=v"], "'=v' is not NAME=VALUE"),
        (["sendMessage", "-t", "T", "-p", "x", "--property", "TAGS=a"], "set with --tags"),
        (["sendMessage", "-t", "T", "-p", "x", "--property", "a=b\x01c"], "must not hold"),
    ],
)
def test_bad_values_are_usage_errors(args: list[str], words: str) -> None:
    code, out, err = invoke(*args, "-a", dead_address())
    assert (code, out) == (2, "") and words in err, err


def test_a_malformed_dlq_message_id_is_refused_before_any_io() -> None:
    """As queryMsgById and recallMessage refuse it (resendDLQ sent it to every broker group)."""
    code, out, err = invoke("resendDLQ", "-g", "G", "--msg-id", "zz", "-a", dead_address())
    assert (code, out) == (1, "")
    assert err == "rmqctl: not a message id: 'zz' (32 hex digits: store host and offset)\n"


def test_json_is_also_accepted_after_the_command_name(
    fake: tuple[FakeCluster, asyncio.AbstractEventLoop],
) -> None:
    cluster, _ = fake
    addr = cluster.brokers["broker-a"].address
    before = invoke("--json", "clusterList", "-a", addr)
    after = invoke("clusterList", "-a", addr, "--json")
    assert before == after and json.loads(after[1])["clusters"]


def test_addresses_may_come_before_the_command_as_design_section_8_shows(
    fake: tuple[FakeCluster, asyncio.AbstractEventLoop],
) -> None:
    cluster, _ = fake
    addr = cluster.brokers["broker-a"].address
    before = invoke("--json", "-a", addr, "clusterList")
    after = invoke("--json", "clusterList", "-a", addr)
    assert before == after and before[0] == 0
    # The command's own -a wins over the global one.
    assert invoke("--json", "-a", dead_address(), "clusterList", "-a", addr) == after


class Listener:
    """A TCP listener on loopback that is no rmq server: ``mode`` "close" closes every
    connection at once, "http" answers an HTTP error (a proxy in the way), "silent" accepts and
    never answers."""

    def __init__(self, mode: str) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.address = f"127.0.0.1:{self.sock.getsockname()[1]}"
        self.mode = mode
        self.held: list[socket.socket] = []
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            if self.mode == "http":
                with contextlib.suppress(OSError):
                    conn.recv(4096)
                    conn.sendall(b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\n\r\n")
            if self.mode == "silent":
                self.held.append(conn)
            else:
                conn.close()

    def close(self) -> None:
        self.sock.close()
        for conn in self.held:
            conn.close()


@pytest.mark.parametrize(
    ("mode", "reason"),
    [
        ("close", "the peer closed the connection without answering"),
        (
            "http",
            "not an rmq server: an HTTP server answered (a proxy in the way, or the wrong port?)",
        ),
    ],
)
def test_an_address_that_is_no_rmq_server_says_so(mode: str, reason: str) -> None:
    """Not "connection closed": what answered, with its address."""
    listener = Listener(mode)
    try:
        code, out, err = invoke("clusterList", "-a", listener.address)
    finally:
        listener.close()
    assert (code, out) == (1, "")
    assert err == f"rmqctl: cannot reach any of {listener.address}: {reason}\n"


def test_a_silent_address_times_out_and_each_address_gets_its_reason() -> None:
    listener = Listener("silent")
    refused = dead_address()
    try:
        code, out, err = invoke(
            "consumeMessage", "-a", f"{listener.address};{refused}", "-t", "T", "-g", "G",
            "--timeout", "1",
        )  # fmt: skip
    finally:
        listener.close()
    assert (code, out) == (1, "")
    assert err == (
        f"rmqctl: cannot reach any of {listener.address};{refused}: "
        f"{listener.address}: timed out, {refused}: connection refused\n"
    )


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["updateTopic", "-t", "T", "-c", "C", "-g", "1"], "give -c CLUSTER or -g N, not both"),
        (["updateTopic", "-t", "T", "-p", "9"], "is not 0..7"),
        (["updateTopic", "-t", "T", "-o", "true", "--attributes", "+message.type=NORMAL"],
         "-o true is a FIFO topic, not NORMAL"),
        (["updateStaticTopic", "-t", "S", "-q", "2", "-b", "broker-a", "-g", "1"],
         "give -b NAMES or -g N, not both"),
        (["remapStaticTopic", "-t", "S", "-q", "0"], "-t TOPIC, -q QUEUE and -b GROUP are required"),
        (["rebalancePlan", "--from", "plan.json", "--threshold", "5"], "--threshold applies"),
        (["queryMsgByTime", "-t", "T", "-b", "9", "-e", "3"], "is after --end"),
        (["--access-key", "alice", "clusterList"], "give both --access-key and --secret-key"),
        (["createAcl", "-s", "alice", "-r", ",", "-A", "pub"], "no resource given (-r)"),
        (["updateUser", "-u", "alice"], "nothing to update"),
    ],
)  # fmt: skip
def test_option_errors_a_command_checks_itself_are_usage_errors(args: list[str], says: str) -> None:
    """What a command checks of its options before sending anything is a usage error, exit
    status 2 as click's own (these exited 1, like a refusal of the cluster)."""
    code, out, err = invoke("-a", dead_address(), *args)
    assert (code, out) == (2, ""), (args, err)
    lines = err.strip().splitlines()
    assert lines[0].startswith("Usage: rmqctl") or lines[0].startswith("Usage: cli"), err
    assert lines[-1].startswith("Error: ") and says in lines[-1], err
