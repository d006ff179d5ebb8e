"""The broker's requests and answers, typed: one module per family of request codes (the pull
family is :mod:`protocol.pull`). Each request is a frozen, slotted, keyword-only dataclass with
its request ``code``, ``encode()`` (its header and body) and the classmethod ``parse(header,
body)``, which checks every field and raises :class:`~protocol.fields.FieldError` (answered
BAD_REQUEST) for a bad one. Pure: no sockets, no clock.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar

import msgpack

from protocol.fields import FieldError, req_str
from protocol.remoting import Scalar
from protocol.retry import group_error

__all__ = ["body_map", "doc_field", "pack_map", "req_group"]

_T = TypeVar("_T", str, int, float)

_KIND_NAMES: dict[type, str] = {str: "text", int: "an integer", float: "a float"}


def req_group(header: Mapping[str, Scalar], name: str = "consumerGroup") -> str:
    """A consumer group's name (it also names the group's retry and DLQ topics)."""
    group = req_str(header, name)
    bad = group_error(group)
    if bad is not None:
        raise FieldError(bad)
    return group


def body_map(body: bytes | None, what: str) -> dict[Any, Any]:
    """A msgpack map body (an answer's document; none reads as ``{}``): ``what`` names it in
    the :class:`~protocol.fields.FieldError` that garbage or another type raises."""
    if not body:
        return {}
    try:
        doc = msgpack.unpackb(body, raw=False, strict_map_key=False)
    except Exception as exc:  # msgpack raises several unrelated types on garbage
        raise FieldError(f"malformed {what}: {type(exc).__name__}") from None
    if not isinstance(doc, dict):
        raise FieldError(f"malformed {what}: not a map")
    return doc


def doc_field(doc: Mapping[Any, Any], name: str, kind: type[_T], default: _T | None = None) -> _T:
    """Field ``name`` of an answer's document (:func:`body_map`), exactly of ``kind`` (text, an
    integer, a float: a boolean is no integer), ``default`` when left out if one is given; else
    a :class:`~protocol.fields.FieldError` that names it."""
    value = doc.get(name, default)
    if type(value) is not kind:
        raise FieldError(f"{name!r} must be {_KIND_NAMES[kind]}")
    return value


def pack_map(doc: Mapping[Any, Any]) -> bytes:
    """A msgpack map body."""
    packed: bytes = msgpack.packb(dict(doc))
    return packed
