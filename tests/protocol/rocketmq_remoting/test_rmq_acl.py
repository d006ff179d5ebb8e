"""RocketMQ's ACL 1.0 signature (HMAC-SHA1, base64, over the sorted extFields' values but the
signature's, then the body): golden vectors computed by hand and one made by ali-ons' own
signer; the refusals; and which permission each classic request needs."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import struct

import pytest

from protocol.acl import Action, Resource, ResourceType
from protocol.request_permissions import ANY_USER, Check
from protocol.rocketmq_remoting.acl import (
    classic_checks,
    sign,
    signature_refusal,
    signing_content,
)
from protocol.rocketmq_remoting.codes import RequestCode
from protocol.rocketmq_remoting.frame import decode_frame

# -- the signature ---------------------------------------------------------------------------


def test_signing_content_is_sorted_values_then_body() -> None:
    fields = {"topic": "T", "AccessKey": "alice", "queueId": "0", "Signature": "ignored"}
    # keys in order: AccessKey, Signature (left out), queueId, topic
    assert signing_content(fields, b"hi") == b"alice0Thi"
    assert signing_content(fields, b"") == b"alice0T"
    assert signing_content(fields, None) == b"alice0T"


def test_golden_signature_by_hand() -> None:
    fields = {"topic": "T", "AccessKey": "alice", "queueId": "0"}
    by_hand = base64.b64encode(hmac.new(b"k3y", b"alice0Thi", hashlib.sha1).digest()).decode()
    assert by_hand == "twIEakQka+vB4zwtrli8GeeGKC0="
    assert sign(fields, b"hi", "k3y") == by_hand
    assert sign({**fields, "Signature": by_hand}, b"hi", "k3y") == by_hand


def test_security_token_is_signed_and_utf8_values() -> None:
    fields = {"AccessKey": "bob", "SecurityToken": "tok", "topic": "tōpic"}
    content = "bob" + "tok" + "tōpic"
    expected = base64.b64encode(
        hmac.new("sëcret".encode(), content.encode() + b"\x00\x01", hashlib.sha1).digest()
    ).decode()
    assert sign(fields, b"\x00\x01", "sëcret") == expected


# A SEND_MESSAGE_V2 signed by ali-ons 2.x (lib/channel.js beforeRequest, run with node on
# access key "alice", secret "s3cret-key"): its extFields as it writes them (numbers and
# booleans as JSON scalars, OnsChannel added), body "hello, ACL".
ALIONS_EXT_FIELDS = {
    "Signature": "in+VzeQfLLqBQ62jJyNYrt+mGjw=",
    "AccessKey": "alice",
    "OnsChannel": "ALIYUN",
    "a": "pg",
    "b": "TopicA",
    "c": "TBW102",
    "d": 4,
    "e": 1,
    "f": 0,
    "g": 1700000000000,
    "h": 0,
    "i": "TAGS\u0001t1\u0002",
    "j": 0,
    "k": False,
    "m": False,
}


def _alions_frame() -> bytes:
    header = json.dumps(
        {
            "code": 310,
            "language": "JAVA",
            "opaque": 1,
            "flag": 0,
            "version": 0,
            "remark": "",
            "extFields": ALIONS_EXT_FIELDS,
        }
    ).encode()
    body = b"hello, ACL"
    return struct.pack(">II", 4 + len(header) + len(body), len(header)) + header + body


def test_alions_signature_verifies_through_our_decoder() -> None:
    cmd = decode_frame(_alions_frame()[4:])
    assert cmd.ext_fields["k"] == "false" and cmd.ext_fields["g"] == "1700000000000"
    assert sign(cmd.ext_fields, cmd.body, "s3cret-key") == ALIONS_EXT_FIELDS["Signature"]
    assert signature_refusal(cmd.ext_fields, cmd.body, {"alice": "s3cret-key"}.get) is None


# -- refusals --------------------------------------------------------------------------------


def _signed(secret: str = "k3y", **extra: str) -> dict[str, str]:
    fields = {"AccessKey": "alice", "topic": "T", **extra}
    fields["Signature"] = sign(fields, b"hi", secret)
    return fields


SECRETS = {"alice": "k3y"}.get


def test_good_signature_passes() -> None:
    assert signature_refusal(_signed(), b"hi", SECRETS) is None


@pytest.mark.parametrize(
    ("fields", "body", "reason", "says"),
    [
        ({"topic": "T"}, b"hi", "unsigned", "AccessKey and Signature"),
        ({"topic": "T", "AccessKey": "alice"}, b"hi", "unsigned", "AccessKey and Signature"),
        ({"topic": "T", "Signature": "x"}, b"hi", "unsigned", "AccessKey and Signature"),
        ({**_signed(), "AccessKey": "mallory"}, b"hi", "unknown_user", "'mallory'"),
        (_signed(secret="wrong"), b"hi", "bad_signature", "does not match"),
        (_signed(), b"ho", "bad_signature", "does not match"),
        ({**_signed(), "topic": "U"}, b"hi", "bad_signature", "does not match"),
    ],
)
def test_refusals(fields: dict[str, str], body: bytes, reason: str, says: str) -> None:
    refusal = signature_refusal(fields, body, SECRETS)
    assert refusal is not None
    assert refusal[0] == reason
    assert says in refusal[1]


# -- permissions -----------------------------------------------------------------------------


def _topic(name: str, *actions: Action) -> Check:
    return Check(Resource(ResourceType.TOPIC, name), actions)


def _group(name: str, *actions: Action) -> Check:
    return Check(Resource(ResourceType.GROUP, name), actions)


PUB, SUB = Action.PUB, Action.SUB


def test_sends_need_pub_on_the_topic() -> None:
    assert classic_checks(RequestCode.SEND_MESSAGE, {"topic": "T"}, b"", "c") == (_topic("T", PUB),)
    for code in (RequestCode.SEND_MESSAGE_V2, RequestCode.SEND_BATCH_MESSAGE):
        assert classic_checks(code, {"a": "pg", "b": "T"}, b"", "c") == (_topic("T", PUB),)
    # a send back into the group's retry topic is the group's
    assert classic_checks(RequestCode.SEND_MESSAGE_V2, {"b": "%RETRY%g"}, b"", "c") == (
        _group("g", PUB),
    )


def test_pull_and_offsets_need_sub_on_topic_and_group() -> None:
    fields = {"topic": "T", "consumerGroup": "g", "queueId": "0"}
    for code in (
        RequestCode.PULL_MESSAGE,
        RequestCode.QUERY_CONSUMER_OFFSET,
        RequestCode.UPDATE_CONSUMER_OFFSET,
    ):
        assert classic_checks(code, fields, b"", "c") == (_topic("T", SUB), _group("g", SUB))
    assert classic_checks(RequestCode.GET_MAX_OFFSET, fields, b"", "c") == (_topic("T", SUB),)
    assert classic_checks(RequestCode.CONSUMER_SEND_MSG_BACK, {"group": "g"}, b"", "c") == (
        _group("g", SUB),
    )


def test_json_bodies() -> None:
    heartbeat = json.dumps(
        {
            "clientID": "c1",
            "producerDataSet": [{"groupName": "pg"}],
            "consumerDataSet": [
                {"groupName": "g", "subscriptionDataSet": [{"topic": "T"}, {"topic": "%RETRY%g"}]}
            ],
        }
    ).encode()
    assert classic_checks(RequestCode.HEART_BEAT, {}, heartbeat, "c") == (
        _group("g", SUB),
        _topic("T", SUB),
        _group("g", SUB),
    )
    producer_only = json.dumps({"clientID": "c1", "producerDataSet": [{"groupName": "pg"}]})
    assert classic_checks(RequestCode.HEART_BEAT, {}, producer_only.encode(), "c") == ANY_USER
    lock = json.dumps({"consumerGroup": "g", "clientId": "c1", "mqSet": []}).encode()
    for code in (RequestCode.LOCK_BATCH_MQ, RequestCode.UNLOCK_BATCH_MQ):
        assert classic_checks(code, {}, lock, "c") == (_group("g", SUB),)
    assert classic_checks(RequestCode.UNREGISTER_CLIENT, {"producerGroup": "pg"}, b"", "c") == (
        ANY_USER
    )
    assert classic_checks(RequestCode.UNREGISTER_CLIENT, {"consumerGroup": "g"}, b"", "c") == (
        _group("g", SUB),
    )


def test_other_codes() -> None:
    assert classic_checks(RequestCode.END_TRANSACTION, {}, b"", "c") == ANY_USER
    # a code neither table names needs a super user
    assert classic_checks(RequestCode.UPDATE_BROKER_CONFIG, {}, b"", "c") is None
    assert classic_checks(RequestCode.HEART_BEAT, {}, b"not json", "c") == ANY_USER
