"""RocketMQ's ACL 1.0 signature on the classic door, and which permission each classic request
needs: pure code.

A signed request carries the extFields ``AccessKey`` (here: our username), ``Signature`` and
optionally ``SecurityToken``. The signature (RocketMQ's ``AclClientRPCHook``,
``AclUtils.combineRequestContent`` and ``AclSigner.calSignature``; ali-ons' ``beforeRequest``
does the same) is base64 of HMAC-SHA1, keyed by the UTF-8 secret, over the values of every
extField but ``Signature`` in the order of their keys, concatenated as UTF-8, followed by the
body bytes.

:func:`classic_checks` maps a classic request to the checks of
:mod:`protocol.request_permissions`: a code whose extFields carry the field names our own
header uses (``topic``, ``consumerGroup``, ``group``) goes through the same table as our own
requests (:func:`~protocol.request_permissions.broker_checks`); the codes whose resource sits
elsewhere (SEND_MESSAGE_V2 and SEND_BATCH_MESSAGE's short field ``b``, the heartbeat's and the
queue locks' JSON bodies, the subscription group's JSON body) have their own rule here.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
from collections.abc import Callable, Mapping
from typing import Final

from protocol.acl import Action, Resource, ResourceType
from protocol.remoting import KIND_REQUEST, Frame
from protocol.request_permissions import (
    ANY_USER,
    Check,
    Checks,
    broker_checks,
    controller_checks,
    topic_resource,
)
from protocol.rocketmq_remoting.codes import RequestCode

__all__ = [
    "ACCESS_KEY",
    "SECURITY_TOKEN",
    "SIGNATURE",
    "classic_checks",
    "nameserver_checks",
    "sign",
    "signature_refusal",
    "signing_content",
]

ACCESS_KEY: Final = "AccessKey"
SIGNATURE: Final = "Signature"
SECURITY_TOKEN: Final = "SecurityToken"


def signing_content(ext_fields: Mapping[str, str], body: bytes | None) -> bytes:
    """What a signature covers: the extFields' values but the signature's, in key order, then
    the body."""
    text = "".join(v for k, v in sorted(ext_fields.items()) if k != SIGNATURE)
    return text.encode() + (body or b"")


def sign(ext_fields: Mapping[str, str], body: bytes | None, secret: str) -> str:
    """The signature of a request with ``ext_fields`` (``AccessKey`` among them) and ``body``."""
    mac = hmac.new(secret.encode(), signing_content(ext_fields, body), hashlib.sha1)
    return base64.b64encode(mac.digest()).decode("ascii")


def signature_refusal(
    ext_fields: Mapping[str, str], body: bytes | None, secret_of: Callable[[str], str | None]
) -> tuple[str, str] | None:
    """Why a request's signature does not pass, as (reason, remark); None: it passes.
    ``secret_of(username)`` is the user's secret, None for an unknown user."""
    access_key = ext_fields.get(ACCESS_KEY)
    given = ext_fields.get(SIGNATURE)
    if not access_key or not given:
        return (
            "unsigned",
            "authentication is on and the request has no RocketMQ ACL signature (extFields AccessKey "
            "and Signature; the access key is a user's name, the secret key its secret)",
        )
    secret = secret_of(access_key)
    if secret is None:
        return "unknown_user", f"unknown access key {access_key!r}"
    if not hmac.compare_digest(sign(ext_fields, body, secret).encode(), given.encode()):
        return (
            "bad_signature",
            f"the signature of access key {access_key!r} does not match its secret "
            "(HMAC-SHA1 over the sorted extFields' values and the body)",
        )
    return None


def _json_field(body: bytes | None, name: str) -> str:
    try:
        doc = json.loads(body or b"")
    except (ValueError, UnicodeDecodeError):  # the handler answers a malformed body
        return ""
    value = doc.get(name) if isinstance(doc, dict) else None
    return value if isinstance(value, str) else ""


def _group(name: str, *actions: Action) -> Check:
    return Check(Resource(ResourceType.GROUP, name), actions)


def _heartbeat(body: bytes | None) -> tuple[Check, ...]:
    """Sub on each consumer group of the heartbeat and on its subscribed topics (producers'
    groups need nothing, as our own heartbeat)."""
    try:
        doc = json.loads(body or b"")
    except (ValueError, UnicodeDecodeError):
        return ANY_USER  # the handler answers the malformed body
    consumers = doc.get("consumerDataSet") if isinstance(doc, dict) else None
    checks: list[Check] = []
    for consumer in consumers if isinstance(consumers, list) else ():
        if not isinstance(consumer, dict):
            continue
        group = consumer.get("groupName")
        if isinstance(group, str):
            checks.append(_group(group, Action.SUB))
        subs = consumer.get("subscriptionDataSet")
        for sub in subs if isinstance(subs, list) else ():
            topic = sub.get("topic") if isinstance(sub, dict) else None
            if isinstance(topic, str):
                checks.append(Check(topic_resource(topic), (Action.SUB,)))
    return tuple(checks)


_Rule = Callable[[Mapping[str, str], bytes | None], tuple[Check, ...]]

_CLASSIC: Final[dict[int, _Rule]] = {
    RequestCode.SEND_MESSAGE_V2: lambda h, b: (
        Check(topic_resource(h.get("b", "")), (Action.PUB,)),
    ),
    RequestCode.SEND_BATCH_MESSAGE: lambda h, b: (
        Check(topic_resource(h.get("b", "")), (Action.PUB,)),
    ),
    RequestCode.HEART_BEAT: lambda h, b: _heartbeat(b),
    RequestCode.UNREGISTER_CLIENT: lambda h, b: (
        (_group(h["consumerGroup"], Action.SUB),) if h.get("consumerGroup") else ANY_USER
    ),
    RequestCode.LOCK_BATCH_MQ: lambda h, b: (_group(_json_field(b, "consumerGroup"), Action.SUB),),
    RequestCode.UNLOCK_BATCH_MQ: lambda h, b: (
        _group(_json_field(b, "consumerGroup"), Action.SUB),
    ),
    RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP: lambda h, b: (
        _group(_json_field(b, "groupName"), Action.CREATE, Action.UPDATE),
    ),
}


def classic_checks(
    code: int, ext_fields: Mapping[str, str], body: bytes | None, cluster: str
) -> Checks:
    """The checks a classic request needs (None: a super user only, as every code neither
    table names)."""
    rule = _CLASSIC.get(code)
    if rule is not None:
        return rule(ext_fields, body)
    frame = Frame(kind=KIND_REQUEST, code=code, opaque=0, header=dict(ext_fields), body=body)
    return broker_checks(frame, cluster)


def nameserver_checks(code: int, ext_fields: Mapping[str, str], body: bytes | None) -> Checks:
    """The checks of a NameServer request on the controllers: our controllers' own table
    (:func:`~protocol.request_permissions.controller_checks`): the route query needs pub, sub
    or get on the topic, the cluster's brokers any user, the topic list (no code of ours) a
    super user."""
    frame = Frame(kind=KIND_REQUEST, code=code, opaque=0, header=dict(ext_fields), body=body)
    return controller_checks(frame, "")
