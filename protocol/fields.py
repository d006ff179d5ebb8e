"""Typed access to request header fields.

A request with a missing or mistyped field raises :class:`FieldError`; servers answer it with
BAD_REQUEST and keep the connection. :class:`NoFields` is the codec of a request with no fields.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Self

from protocol.remoting import Header, Scalar


class FieldError(ValueError):
    """A header field is missing or has the wrong type."""


def req_str(header: Mapping[str, Scalar], name: str) -> str:
    value = header.get(name)
    if not isinstance(value, str) or not value:
        raise FieldError(f"header field {name!r} must be a non-empty string")
    return value


def opt_str(header: Mapping[str, Scalar], name: str, default: str = "") -> str:
    value = header.get(name, default)
    if value is None:
        return default
    if not isinstance(value, str):
        raise FieldError(f"header field {name!r} must be a string")
    return value


def req_int(header: Mapping[str, Scalar], name: str) -> int:
    value = header.get(name)
    if type(value) is not int:
        raise FieldError(f"header field {name!r} must be an integer")
    return value


def opt_int(header: Mapping[str, Scalar], name: str, default: int) -> int:
    value = header.get(name, default)
    if value is None:
        return default
    if type(value) is not int:
        raise FieldError(f"header field {name!r} must be an integer")
    return value


def opt_bool(header: Mapping[str, Scalar], name: str, default: bool = False) -> bool:
    value = header.get(name, default)
    if not isinstance(value, bool):
        raise FieldError(f"header field {name!r} must be a boolean")
    return value


def opt_int_or_none(header: Mapping[str, Scalar], name: str) -> int | None:
    """An integer field that may be left out (None then)."""
    return None if header.get(name) is None else req_int(header, name)


@dataclass(frozen=True, slots=True, kw_only=True)
class NoFields:
    """The codec of a request with no header fields and no body (a query of everything): a
    subclass adds its ``code``. ``parse`` ignores what the header holds."""

    def encode(self) -> tuple[Header, bytes | None]:
        return {}, None

    @classmethod
    def parse(cls, header: Mapping[str, Scalar], body: bytes | None = None) -> Self:
        return cls()
