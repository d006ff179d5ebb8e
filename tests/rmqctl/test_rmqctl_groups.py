"""rmqctl's consumer group commands (in-process, through click) against a real lone broker, which
the tests share (module scope), each with a group of its own."""

from __future__ import annotations

import subprocess

import pytest

from tests.support.cli import ok_json
from tests.support.cli import rmqctl as invoke
from tests.support.procs import BrokerProc, module_broker

pytestmark = pytest.mark.multiprocess


broker = module_broker("rmqctl-groups")


def rmqctl(*args: str) -> subprocess.CompletedProcess[str]:
    code, out, err = invoke(*args)
    assert "Traceback" not in err, err
    return subprocess.CompletedProcess(list(args), code, out, err)


def test_update_and_get_sub_group(broker: BrokerProc) -> None:
    a = broker.address
    stored = ok_json(
        "updateSubGroup", "-a", a, "-g", "G", "--retry-max-times", "3",
        "--retry-delays", "1s 1s 2s", "--no-consume-retry",
    )  # fmt: skip
    settings = {
        "groupName": "G",
        "retryMaxTimes": 3,
        "retryDelays": "1s 1s 2s",
        "consumeRetryEnable": False,
        "consumeMessageOrderly": False,
    }
    assert stored == {"group": "G", "brokers": {"broker-a": settings}}
    # Settings not given keep their value.
    ok_json("updateSubGroup", "-a", a, "-g", "G", "--consume-retry", "-b", "broker-a")
    shown = ok_json("getSubGroup", "-a", a, "-g", "G")
    assert shown == {
        "group": "G",
        "brokers": {"broker-a": {**settings, "consumeRetryEnable": True, "configured": True}},
    }
    # A FIFO group: the setting is stored with the others and shown.
    fifo = ok_json("updateSubGroup", "-a", a, "-g", "G", "--fifo")
    assert fifo["brokers"]["broker-a"]["consumeMessageOrderly"] is True
    assert "FIFO" in rmqctl("getSubGroup", "-a", a, "-g", "G").stdout
    # A group that exists (it committed an offset) and was never configured: the defaults.
    ok_json("updateTopic", "-a", a, "-t", "OtherTopic", "-q", "1")
    ok_json("sendMessage", "-a", a, "-t", "OtherTopic", "-p", "x")
    ok_json("consumeMessage", "-a", a, "-t", "OtherTopic", "-g", "Other", "--count", "1")
    human = rmqctl("getSubGroup", "-a", a, "-g", "Other")
    assert human.returncode == 0, human.stderr
    assert "10s 30s 1m" in human.stdout and "16" in human.stdout


def test_a_group_created_ahead_has_its_retry_topic_routed(broker: BrokerProc) -> None:
    """A classic client (ali-ons) looks up its group's retry topic before its first heartbeat,
    which created the topic: found nothing, it retried failed messages only after its next poll
    of the routes (30 s by default). updateSubGroup creates it now; not for a group that does
    not consume retries."""
    a = broker.address
    ok_json("updateSubGroup", "-a", a, "-g", "Ahead")
    route = ok_json("topicRoute", "-a", a, "-t", "%RETRY%Ahead")
    assert [(b["brokerName"], b["queues"]) for b in route["brokers"]] == [("broker-a", 1)], route
    ok_json("updateSubGroup", "-a", a, "-g", "NoRetry", "--no-consume-retry")
    none = rmqctl("topicRoute", "-a", a, "-t", "%RETRY%NoRetry")
    assert none.returncode == 1 and "does not exist" in none.stderr, none


def test_bad_settings_are_one_line_and_exit_1(broker: BrokerProc) -> None:
    for args, says in (
        (["--retry-max-times", "-1"], "retryMaxTimes must be an integer 0..10000"),
        (["--retry-delays", "1s soon"], "'soon' is not a delay"),
        (["-b", "nope", "--retry-max-times", "1"], "broker group 'nope' has no master"),
    ):
        proc = rmqctl("updateSubGroup", "-a", broker.address, "-g", "Refused", *args)
        assert proc.returncode == 1 and proc.stdout == "", args
        assert proc.stderr.startswith("rmqctl: ") and says in proc.stderr, proc.stderr
        assert proc.stderr.count("\n") == 1
    # Nothing was stored: the group does not exist.
    missing = rmqctl("getSubGroup", "-a", broker.address, "-g", "Refused")
    assert missing.returncode == 1 and "consumer group Refused does not exist" in missing.stderr


def test_a_group_that_does_not_exist_is_one_line_and_exit_1(broker: BrokerProc) -> None:
    """getSubGroup and queryDLQ of a group no broker knows said nothing was wrong (the
    defaults; "no DLQ messages", exit 0): an operator's typo looked like a real group."""
    for command in ("getSubGroup", "queryDLQ"):
        for json_flag in ([], ["--json"]):
            proc = rmqctl(*json_flag, command, "-a", broker.address, "-g", "NoSuchGroup")
            assert proc.returncode == 1 and proc.stdout == "", (command, proc.stdout)
            assert proc.stderr == (
                "rmqctl: consumer group NoSuchGroup does not exist on any broker group (no "
                "settings, offsets, members, retry or dead-letter topic)\n"
            ), proc.stderr
    on_b = rmqctl("queryDLQ", "-a", broker.address, "-g", "NoSuchGroup", "-b", "broker-a")
    assert on_b.returncode == 1 and "does not exist on broker group broker-a" in on_b.stderr


def test_dlq_commands_on_an_empty_dlq(broker: BrokerProc) -> None:
    a = broker.address
    ok_json("updateSubGroup", "-a", a, "-g", "Empty")  # the group exists, its DLQ is empty
    assert ok_json("queryDLQ", "-a", a, "-g", "Empty") == {"group": "Empty", "messages": []}
    human = rmqctl("queryDLQ", "-a", a, "-g", "Empty")
    assert human.returncode == 0 and human.stdout == "no DLQ messages for Empty\n"
    assert ok_json("resendDLQ", "-a", a, "-g", "Empty", "--all") == {
        "group": "Empty",
        "resent": [],
        "skipped": [],
    }
    usage = rmqctl("resendDLQ", "-a", a, "-g", "Empty")
    assert usage.returncode == 2 and "exactly one of --msg-id ID and --all" in usage.stderr
    not_parked = "7F00000100001F900000000000000000"
    missing = rmqctl("--json", "resendDLQ", "-a", a, "-g", "Empty", "--msg-id", not_parked)
    assert missing.returncode == 1
    assert "is not a message of the DLQ of 'Empty'" in missing.stderr
