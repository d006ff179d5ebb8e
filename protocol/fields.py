"""Typed access to request header fields.

A request with a missing or mistyped field raises :class:`FieldError`; servers answer it with
BAD_REQUEST and keep the connection.
"""

from __future__ import annotations

from collections.abc import Mapping

from protocol.remoting import Scalar


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
