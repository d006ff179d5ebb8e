"""rmqctl sendMessage --trace, consumeMessage --trace (pull and --pop) and queryMsgTraceById
against a real lone broker whose trace is on: the timeline holds the broker's records and the
clients' (send cost, consumption), in time order, as a table and as JSON; an unknown id is one
clear error. rmqctl runs in this process (as test_rmqctl_lookup runs it)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from protocol.trace import TRACE_TOPIC
from tests.rmqctl.test_rmqctl_groups import rmqctl
from tests.support.procs import BrokerProc, module_broker, started
from tests.support.wait import wait_until

pytestmark = pytest.mark.multiprocess


@pytest.fixture
def traced_broker(tmp_path: Path) -> Iterator[BrokerProc]:
    with started(BrokerProc(tmp_path, extra_toml="trace_enabled = true\n")) as b:
        yield b


def test_send_and_consume_with_trace_then_query_the_timeline(traced_broker: BrokerProc) -> None:
    a = traced_broker.address
    made = rmqctl("updateTopic", "-a", a, "-t", "T", "-q", "1")
    assert made.returncode == 0, made.stderr
    sent = rmqctl("--json", "sendMessage", "-a", a, "-t", "T", "-p", "hi", "-k", "K1", "--trace")
    assert sent.returncode == 0, sent.stderr
    msg_id = json.loads(sent.stdout)["results"][0]["msgId"]
    for extra in (["-g", "PULL"], ["-g", "POPG", "--pop"]):
        consumed = rmqctl(
            "--json", "consumeMessage", "-a", a, "-t", "T", "--count", "1", "--timeout", "30",
            "--trace", *extra,
        )  # fmt: skip
        assert consumed.returncode == 0 and msg_id in consumed.stdout, consumed.stderr

    def steps() -> list[tuple[str, str, str]]:
        q = rmqctl("--json", "queryMsgTraceById", "-a", a, "-i", msg_id)
        assert q.returncode == 0, q.stderr
        doc = json.loads(q.stdout)
        assert doc["msgId"] == msg_id and doc["traceTopic"] == TRACE_TOPIC
        return [(s["type"], s.get("group", ""), s["source"]) for s in doc["steps"]]

    want = {
        ("Pub", "", "client"),
        ("Pub", "", "broker"),
        ("SubBefore", "PULL", "client"),
        ("SubAfter", "PULL", "client"),
        ("SubBefore", "POPG", "broker"),
        ("SubBefore", "POPG", "client"),
        ("SubAfter", "POPG", "client"),
        ("SubAfter", "POPG", "broker"),
    }
    last: list[object] = []

    def complete() -> bool:
        got = steps()
        last[:] = got
        return sorted(got) == sorted(want)

    wait_until(
        complete, "every record of the message", 30, interval=0.3, on_timeout=lambda: str(last)
    )
    order = steps()
    assert order.index(("SubBefore", "PULL", "client")) < order.index(
        ("SubAfter", "PULL", "client")
    )
    assert order.index(("SubBefore", "POPG", "broker")) < order.index(
        ("SubAfter", "POPG", "broker")
    )
    assert min(order.index(("Pub", "", "client")), order.index(("Pub", "", "broker"))) == 0

    table = rmqctl("queryMsgTraceById", "-a", a, "-i", msg_id)
    assert table.returncode == 0, table.stderr
    lines = table.stdout.splitlines()
    assert lines[0].split()[:4] == ["TIME", "(UTC)", "STEP", "GROUP"]
    assert len(lines) == 1 + len(want)
    assert any("send" in x and "q0@0" in x for x in lines)
    assert any("consumed" in x and "POPG" in x and "acked" in x for x in lines)

    none = rmqctl("queryMsgTraceById", "-a", a, "-i", "7F000001000000000000000000000999")
    assert none.returncode == 1
    assert "no trace of message 7F000001000000000000000000000999" in none.stderr


broker = module_broker("rmqctl-untraced")  # trace_enabled off


def test_traces_off_says_so(broker: BrokerProc) -> None:
    """A broker without trace_enabled and no client tracing: no trace topic. queryMsgTraceById
    printed the route lookup's 'TOPIC_NOT_EXIST (17) from ...: topic 'RMQ_SYS_TRACE_TOPIC' does
    not exist', which reads as if the message's topic were missing."""
    for args in ([], ["--trace-topic", "MyTraces"]):
        proc = rmqctl(
            "queryMsgTraceById", "-a", broker.address, "-i", "7F000001000000000000000000000999",
            *args,
        )  # fmt: skip
        topic = args[1] if args else TRACE_TOPIC
        assert proc.returncode == 1 and proc.stdout == ""
        assert proc.stderr == (
            "rmqctl: no trace found: message traces are off on this cluster (topic "
            f"{topic} does not exist: no broker has trace_enabled, and no client traced to it; "
            "docs/traces.md)\n"
        ), proc.stderr
