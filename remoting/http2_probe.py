"""Does a port speak HTTP/2 (gRPC)? Asked when a plaintext connection was closed before any
answer and the port does not speak TLS either (:mod:`remoting.tls_probe`).

A gRPC server (a broker's port for the official RocketMQ 5 clients, its listen port + 2) reads a
remoting frame as a client's connection preface, finds it wrong, and closes the connection
without a byte: the client sees only "closed". So the client asks again, as an HTTP/2 client
does: the connection preface and an empty SETTINGS frame on a new connection. An HTTP/2 server
answers with its own SETTINGS frame, whose 9-byte header has type 4 on stream 0; a remoting
server reads the preface's first bytes as a frame length far over its budget and closes. The
probe goes no further than that first frame's header: it only tells what the port speaks.
"""

from __future__ import annotations

import asyncio

_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
_EMPTY_SETTINGS = b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"
_SETTINGS = 4


def is_settings_frame(head: bytes) -> bool:
    """Whether ``head`` (a 9-byte HTTP/2 frame header) is a SETTINGS frame on stream 0 whose
    length is a whole number of settings (6 bytes each)."""
    if len(head) != 9 or head[3] != _SETTINGS:
        return False
    length = int.from_bytes(head[:3], "big")
    stream = int.from_bytes(head[5:9], "big") & 0x7FFFFFFF
    return stream == 0 and length % 6 == 0


async def speaks_http2(host: str, port: int, timeout: float) -> bool:
    """Whether ``host:port`` answers an HTTP/2 connection preface with a SETTINGS frame,
    within ``timeout`` seconds (False when it cannot be reached, answers something else, or
    nothing)."""
    try:
        async with asyncio.timeout(timeout):
            reader, writer = await asyncio.open_connection(host, port)
    except (OSError, TimeoutError):
        return False
    try:
        writer.write(_PREFACE + _EMPTY_SETTINGS)
        async with asyncio.timeout(timeout):
            head = await reader.readexactly(9)
    except (OSError, TimeoutError, asyncio.IncompleteReadError):
        return False
    finally:
        writer.close()
    return is_settings_frame(head)
