"""rmqctl sendMessage --message-group against a real lone broker: every message to the group's
queue, in order; a bad group or a scheduled one is one line and exit status 1, nothing sent."""

from __future__ import annotations

import pytest

from client.routes import MessageQueue
from protocol.fifo import group_queue
from tests.rmqctl.test_rmqctl_groups import ok_json, rmqctl
from tests.support.procs import BrokerProc

pytestmark = pytest.mark.multiprocess


def test_send_message_with_a_message_group(broker: BrokerProc) -> None:
    a = broker.address
    ok_json("updateTopic", "-a", a, "-t", "T", "-q", "4")
    sent = ok_json(
        "sendMessage", "-a", a, "-t", "T", "-p", "x", "--message-group", "order-42", "--count", "30"
    )
    home = group_queue("order-42", [MessageQueue(broker.name, q) for q in range(4)])
    assert sent["queues"] == [{"brokerName": broker.name, "queueId": home.queue_id, "messages": 30}]
    assert [r["queueOffset"] for r in sent["results"]] == list(range(30))
    bad = rmqctl("sendMessage", "-a", a, "-t", "T", "-p", "x", "--message-group", "g" * 129)
    assert bad.returncode == 1 and "exceeds the limit of 128 bytes" in bad.stderr, bad
    scheduled = rmqctl(
        "sendMessage", "-a", a, "-t", "T", "-p", "x", "--message-group", "g", "--delay", "5s"
    )
    assert scheduled.returncode != 0 and "cannot be scheduled" in scheduled.stderr, scheduled
