"""Does a port speak TLS? Asked when a plaintext connection was closed before any answer.

A port with TLS on (Python's ssl, as every daemon here serves it) reads a plaintext client's
first frame as a TLS record, finds none, and closes the connection without a byte: the client
sees only "closed", as from any server that hung up. So the client asks again, as TLS does: a
ClientHello on a new connection. A TLS server answers it with a TLS record, a handshake
(ServerHello) or an alert, whose first bytes are its content type (22 or 21) and the major
version 3; a remoting server reads those bytes as a frame length and answers nothing like it.
The probe verifies nothing and goes no further than that first record: it only tells what the
port speaks.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl

_HANDSHAKE, _ALERT = 22, 21


def _client_hello() -> bytes:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    hello = ctx.wrap_bio(incoming, outgoing)
    with contextlib.suppress(ssl.SSLWantReadError):
        hello.do_handshake()
    return outgoing.read()


def is_tls_record(first: bytes) -> bool:
    """Whether ``first`` (at least 2 bytes) begin a TLS handshake or alert record."""
    return len(first) >= 2 and first[0] in (_HANDSHAKE, _ALERT) and first[1] == 3


async def speaks_tls(host: str, port: int, timeout: float) -> bool:
    """Whether ``host:port`` answers a TLS ClientHello with a TLS record, within ``timeout``
    seconds (False when it cannot be reached, answers something else, or nothing)."""
    try:
        async with asyncio.timeout(timeout):
            reader, writer = await asyncio.open_connection(host, port)
    except (OSError, TimeoutError):
        return False
    try:
        writer.write(_client_hello())
        async with asyncio.timeout(timeout):
            first = await reader.readexactly(2)
    except (OSError, TimeoutError, asyncio.IncompleteReadError):
        return False
    finally:
        writer.close()
    return is_tls_record(first)
