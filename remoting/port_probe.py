"""What does a port speak, if not remoting? Asked when a plaintext connection was closed before
any answer, once per connection (:class:`remoting.client.RemotingClient`).

Two kinds of server close a remoting client's connection without a byte, so that the client
sees only "closed", as from any server that hung up:

* **TLS.** A port with TLS on (Python's ssl, as every daemon here serves it) reads a plaintext
  client's first frame as a TLS record, finds none, and closes. The probe sends a ClientHello on
  a new connection: a TLS server answers it with a TLS record, a handshake (ServerHello) or an
  alert, whose first bytes are its content type (22 or 21) and the major version 3.
* **HTTP/2 (gRPC).** A gRPC server (a broker's port for the official RocketMQ 5 clients, its
  listen port + 2) reads a remoting frame as a client's connection preface, finds it wrong, and
  closes. The probe sends the connection preface and an empty SETTINGS frame on a new
  connection: an HTTP/2 server answers with its own SETTINGS frame, whose 9-byte header has
  type 4 on stream 0.

A remoting server answers neither like that: it reads the probe's first bytes as a frame length
(far over its budget for the HTTP/2 preface) and closes or waits. A probe verifies nothing and
goes no further than the first record or frame header: it only tells what the port speaks.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl

_HANDSHAKE, _ALERT = 22, 21
_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
_EMPTY_SETTINGS = b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"
_SETTINGS = 4


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


def is_settings_frame(head: bytes) -> bool:
    """Whether ``head`` (a 9-byte HTTP/2 frame header) is a SETTINGS frame on stream 0 whose
    length is a whole number of settings (6 bytes each)."""
    if len(head) != 9 or head[3] != _SETTINGS:
        return False
    length = int.from_bytes(head[:3], "big")
    stream = int.from_bytes(head[5:9], "big") & 0x7FFFFFFF
    return stream == 0 and length % 6 == 0


async def _first_answer(host: str, port: int, hello: bytes, n: int, timeout: float) -> bytes:
    """The first ``n`` bytes ``host:port`` answers ``hello`` with on a new connection, within
    ``timeout`` seconds each for the connection and the answer (b"" when it cannot be reached,
    or closes or waits before ``n`` bytes)."""
    try:
        async with asyncio.timeout(timeout):
            reader, writer = await asyncio.open_connection(host, port)
    except (OSError, TimeoutError):
        return b""
    try:
        writer.write(hello)
        async with asyncio.timeout(timeout):
            return await reader.readexactly(n)
    except (OSError, TimeoutError, asyncio.IncompleteReadError):
        return b""
    finally:
        writer.close()


async def speaks_tls(host: str, port: int, timeout: float) -> bool:
    """Whether ``host:port`` answers a TLS ClientHello with a TLS record, within ``timeout``
    seconds (False when it cannot be reached, answers something else, or nothing)."""
    return is_tls_record(await _first_answer(host, port, _client_hello(), 2, timeout))


async def speaks_http2(host: str, port: int, timeout: float) -> bool:
    """Whether ``host:port`` answers an HTTP/2 connection preface with a SETTINGS frame,
    within ``timeout`` seconds (False when it cannot be reached, answers something else, or
    nothing)."""
    hello = _PREFACE + _EMPTY_SETTINGS
    return is_settings_frame(await _first_answer(host, port, hello, 9, timeout))
