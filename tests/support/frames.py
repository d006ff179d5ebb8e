"""Reading remoting frames off a raw connection in tests."""

from __future__ import annotations

import asyncio

from protocol.remoting import Frame, FrameDecoder


async def read_frames(reader: asyncio.StreamReader, count: int, timeout: float) -> list[Frame]:
    """The next ``count`` frames from ``reader`` (more if a read ends past them), within
    ``timeout`` seconds; fails if the peer closes first."""
    decoder = FrameDecoder()
    frames: list[Frame] = []
    async with asyncio.timeout(timeout):
        while len(frames) < count:
            data = await reader.read(1 << 16)
            assert data, "connection closed"
            frames += decoder.feed(data)
    return frames
