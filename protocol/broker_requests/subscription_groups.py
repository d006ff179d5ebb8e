"""Consumer groups' retry settings: UPDATE_AND_CREATE_SUBSCRIPTIONGROUP and
GET_SUBSCRIPTIONGROUP_CONFIG (docs/protocol.md). Pure: no sockets, no clock.

Requests::

    UPDATE_AND_CREATE_SUBSCRIPTIONGROUP 200   body: a msgpack map of the group's settings
                                              (:data:`protocol.retry.FIELDS`; keys left out
                                              keep their value)
    GET_SUBSCRIPTIONGROUP_CONFIG 352          group

The settings' values are the broker's to check (:mod:`protocol.retry`); here the body must be
a msgpack map with string keys.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import msgpack

from protocol.codes import RequestCode
from protocol.fields import FieldError, req_str
from protocol.remoting import Header, Scalar

__all__ = ["SubscriptionGroupQuery", "SubscriptionGroupUpdate"]


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
