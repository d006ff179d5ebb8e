"""The typed request of a code that carries no field: an empty header, no body. Pure: no
sockets, no clock."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Self

from protocol.remoting import Header, Scalar

__all__ = ["NoFields"]


@dataclass(frozen=True, slots=True, kw_only=True)
class NoFields:
    """Base of a request without fields; a subclass gives its ``code`` (a ClassVar)."""

    def encode(self) -> tuple[Header, bytes | None]:
        return {}, None

    @classmethod
    def parse(cls, header: Mapping[str, Scalar], body: bytes | None = None) -> Self:
        return cls()
