"""Consumer groups' retry settings: UPDATE_AND_CREATE_SUBSCRIPTIONGROUP,
GET_ALL_SUBSCRIPTIONGROUP_CONFIG and GET_SUBSCRIPTIONGROUP_CONFIG (docs/protocol.md). Pure: no
sockets, no clock.

Requests::

    UPDATE_AND_CREATE_SUBSCRIPTIONGROUP 200   body: a msgpack map of the group's settings
                                              (:data:`protocol.retry.FIELDS`; keys left out
                                              keep their value)
    GET_ALL_SUBSCRIPTIONGROUP_CONFIG 201      no fields
    GET_SUBSCRIPTIONGROUP_CONFIG 352          group

The settings' values are the broker's to check (:mod:`protocol.retry`); here the body must be
a msgpack map with string keys. GET_ALL_SUBSCRIPTIONGROUP_CONFIG's SUCCESS body is
``{"subscriptionGroupTable": {group: settings}, "dlqResent": {group: [offsets]}}``
(:class:`SubscriptionGroupTable`; a key left out reads as empty).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import msgpack

from protocol.broker_requests import body_map, pack_map
from protocol.codes import RequestCode
from protocol.fields import FieldError, req_str
from protocol.no_fields import NoFields
from protocol.remoting import Header, Scalar

__all__ = [
    "AllSubscriptionGroupsQuery",
    "SubscriptionGroupQuery",
    "SubscriptionGroupTable",
    "SubscriptionGroupUpdate",
]


@dataclass(frozen=True, slots=True, kw_only=True)
class SubscriptionGroupUpdate:
    """UPDATE_AND_CREATE_SUBSCRIPTIONGROUP: set the given settings of a group (the map names
    it: ``groupName``)."""

    code: ClassVar[RequestCode] = RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP

    settings: Mapping[str, Any]

    def encode(self) -> tuple[Header, bytes | None]:
        body: bytes = msgpack.packb(dict(self.settings))
        return {}, body

    @classmethod
    def parse(
        cls, header: Mapping[str, Scalar], body: bytes | None = None
    ) -> SubscriptionGroupUpdate:
        if not body:
            raise FieldError("the request body must be a msgpack map of the group's settings")
        try:
            doc = msgpack.unpackb(body, raw=False)
        except Exception:
            raise FieldError("the request body is not msgpack") from None
        if not isinstance(doc, dict) or not all(isinstance(k, str) for k in doc):
            raise FieldError("the request body must be a msgpack map with string keys")
        return cls(settings=doc)


@dataclass(frozen=True, slots=True, kw_only=True)
class SubscriptionGroupQuery:
    """GET_SUBSCRIPTIONGROUP_CONFIG: the settings of ``group`` as configured."""

    code: ClassVar[RequestCode] = RequestCode.GET_SUBSCRIPTIONGROUP_CONFIG

    group: str

    def encode(self) -> tuple[Header, bytes | None]:
        return {"group": self.group}, None

    @classmethod
    def parse(
        cls, header: Mapping[str, Scalar], body: bytes | None = None
    ) -> SubscriptionGroupQuery:
        return cls(group=req_str(header, "group"))


@dataclass(frozen=True, slots=True, kw_only=True)
class AllSubscriptionGroupsQuery(NoFields):
    """GET_ALL_SUBSCRIPTIONGROUP_CONFIG: every configured group and the DLQ resend ledger
    (slaves copy both; no fields)."""

    code: ClassVar[RequestCode] = RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG


@dataclass(frozen=True, slots=True, kw_only=True)
class SubscriptionGroupTable:
    """GET_ALL_SUBSCRIPTIONGROUP_CONFIG's SUCCESS: each group's settings (as
    :meth:`protocol.retry.RetryConfig.to_dict` writes them, checked by whoever applies them)
    and the DLQ offsets resent for each group, with the CommitLog offset below which every
    re-sent copy is among them (None: not sent)."""

    groups: Mapping[str, Mapping[str, Any]]
    dlq_resent: Mapping[str, tuple[int, ...]]
    dlq_resent_covered: int | None = None

    def encode(self) -> tuple[Header, bytes]:
        doc: dict[str, Any] = {
            "subscriptionGroupTable": {g: dict(c) for g, c in self.groups.items()},
            "dlqResent": {g: list(offsets) for g, offsets in self.dlq_resent.items()},
        }
        if self.dlq_resent_covered is not None:
            doc["dlqResentCovered"] = self.dlq_resent_covered
        return {}, pack_map(doc)

    @classmethod
    def parse(
        cls, header: Mapping[str, Scalar], body: bytes | None = None
    ) -> SubscriptionGroupTable:
        doc = body_map(body, "subscription group table")
        table = doc.get("subscriptionGroupTable") or {}
        resent = doc.get("dlqResent") or {}
        if not isinstance(table, dict) or not all(
            isinstance(g, str) and isinstance(c, dict) for g, c in table.items()
        ):
            raise FieldError("subscriptionGroupTable must map group names to maps")
        if not isinstance(resent, dict) or not all(
            isinstance(g, str)
            and isinstance(offsets, list)
            and all(type(o) is int for o in offsets)
            for g, offsets in resent.items()
        ):
            raise FieldError("dlqResent must map group names to lists of offsets")
        covered = doc.get("dlqResentCovered")
        if covered is not None and (type(covered) is not int or covered < 0):
            raise FieldError("dlqResentCovered must be a CommitLog offset")
        return cls(
            groups=table,
            dlq_resent={g: tuple(o) for g, o in resent.items()},
            dlq_resent_covered=covered,
        )
