"""The ``tls-unique`` channel binding of a connection, as both ends compute it
(docs/protocol.md, "Sessions over TLS")."""

from __future__ import annotations

import asyncio

__all__ = ["tls_unique"]


def tls_unique(transport: asyncio.BaseTransport | None) -> bytes | None:
    """``transport``'s ``tls-unique`` binding; None when it is not a TLS connection."""
    ssl_object = None if transport is None else transport.get_extra_info("ssl_object")
    if ssl_object is None:
        return None
    binding: bytes | None = ssl_object.get_channel_binding("tls-unique")
    return binding
