"""A TCP proxy in front of one broker that can lose a send's answer (issue 29's tests).

Clients bootstrap at the proxy; the broker's address in route answers is replaced by the
proxy's (the same length: both ephemeral 5-digit ports), so every request of the SDK passes
through it. :meth:`AnswerProxy.drop_send_answers` arms it: the next answers to SEND_MESSAGE or
SEND_BATCH_MESSAGE are not delivered; the connection is cut instead, after the broker stored
the send (its answer came back), as a network failure after the write would.
"""

from __future__ import annotations

import asyncio
import contextlib

from protocol.codes import RequestCode
from protocol.remoting import FrameDecoder, encode_frame

__all__ = ["AnswerProxy"]

_SENDS = frozenset({RequestCode.SEND_MESSAGE, RequestCode.SEND_BATCH_MESSAGE})


class AnswerProxy:
    def __init__(self, upstream: str) -> None:
        self.upstream = upstream
        self.address = ""
        self.sends_seen = 0
        self.answers_dropped = 0
        self._drop = 0
        self._cut = True
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()

    async def start(self) -> AnswerProxy:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        port = self._server.sockets[0].getsockname()[1]
        self.address = f"127.0.0.1:{port}"
        if len(self.address) != len(self.upstream):
            raise AssertionError(f"address lengths differ: {self.address} {self.upstream}")
        return self

    def drop_send_answers(self, n: int = 1, *, cut: bool = True) -> None:
        """Lose the next ``n`` send answers; ``cut``: close the connection at each (failing
        every request in flight on it), else only swallow the answer (its sender times out)."""
        self._drop += n
        self._cut = cut

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        for w in list(self._writers):
            w.close()
        if self._server is not None:
            with contextlib.suppress(Exception):
                await self._server.wait_closed()

    async def _serve(self, creader: asyncio.StreamReader, cwriter: asyncio.StreamWriter) -> None:
        host, port = self.upstream.rsplit(":", 1)
        try:
            breader, bwriter = await asyncio.open_connection(host, int(port))
        except OSError:
            cwriter.close()
            return
        self._writers |= {cwriter, bwriter}
        codes: dict[int, int] = {}

        def cut() -> None:
            cwriter.close()
            bwriter.close()

        async def upstream() -> None:
            decoder = FrameDecoder()
            while data := await creader.read(65536):
                for frame in decoder.feed(data):
                    codes[frame.opaque] = frame.code
                    if frame.code in _SENDS:
                        self.sends_seen += 1
                    bwriter.write(encode_frame(frame))
            bwriter.close()

        async def downstream() -> None:
            decoder = FrameDecoder()
            old, new = self.upstream.encode(), self.address.encode()
            while data := await breader.read(65536):
                for frame in decoder.feed(data):
                    code = codes.pop(frame.opaque, None)
                    if code in _SENDS and self._drop > 0:
                        self._drop -= 1
                        self.answers_dropped += 1
                        if self._cut:
                            cut()
                            return
                        continue
                    if frame.body and old in frame.body:
                        frame.body = frame.body.replace(old, new)
                    cwriter.write(encode_frame(frame))
            cwriter.close()

        try:
            await asyncio.gather(upstream(), downstream(), return_exceptions=True)
        finally:
            cut()
            self._writers -= {cwriter, bwriter}
