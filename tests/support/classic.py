"""A raw connection speaking RocketMQ's remoting protocol (the classic door), for tests that
send frames built from the published layouts."""

from __future__ import annotations

import asyncio

from protocol.rocketmq_remoting.frame import (
    CommandDecoder,
    RemotingCommand,
    SerializeType,
    encode_command,
)


class Raw:
    """One raw connection speaking RocketMQ's protocol."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer
        self.decoder = CommandDecoder()
        self.opaque = 0

    @classmethod
    async def open(cls, port: int, host: str = "127.0.0.1") -> Raw:
        reader, writer = await asyncio.open_connection(host, port)
        return cls(reader, writer)

    async def call(
        self,
        code: int,
        fields: dict[str, str],
        body: bytes = b"",
        kind: SerializeType = SerializeType.JSON,
        version: int = 401,
    ) -> RemotingCommand:
        self.opaque += 1
        cmd = RemotingCommand(
            code=code, version=version, opaque=self.opaque, ext_fields=fields, body=body,
            serialize_type=kind,
        )  # fmt: skip
        self.writer.write(encode_command(cmd))
        while True:
            data = await asyncio.wait_for(self.reader.read(65536), 10)
            assert data, "the broker closed the connection"
            for answer in self.decoder.feed(data):
                assert answer.is_response and answer.opaque == self.opaque
                assert answer.serialize_type == kind  # answered in the request's type
                return answer

    async def closed_after(self, raw: bytes) -> bool:
        self.writer.write(raw)
        data = await asyncio.wait_for(self.reader.read(65536), 10)
        return data == b""

    def close(self) -> None:
        self.writer.close()
