"""A raw connection speaking RocketMQ's remoting protocol (the classic door), for tests that
send frames built from the published layouts."""

from __future__ import annotations

import asyncio
import json

from protocol.rocketmq_remoting.frame import (
    CommandDecoder,
    RemotingCommand,
    SerializeType,
    encode_command,
)


class Raw:
    """One raw connection speaking RocketMQ's protocol. Requests the server sends meanwhile
    (NOTIFY_CONSUMER_IDS_CHANGED) are kept in :attr:`requests`."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer
        self.decoder = CommandDecoder()
        self.opaque = 0
        self.requests: list[RemotingCommand] = []
        self._answers: list[RemotingCommand] = []

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
        while not self._answers:
            await self._read()
        answer = self._answers.pop(0)
        assert answer.opaque == self.opaque
        assert answer.serialize_type == kind  # answered in the request's type
        return answer

    async def next_request(self) -> RemotingCommand:
        """The next request the server sends (waits up to 10 s)."""
        while not self.requests:
            await self._read()
        return self.requests.pop(0)

    async def _read(self) -> None:
        data = await asyncio.wait_for(self.reader.read(65536), 10)
        assert data, "the broker closed the connection"
        for cmd in self.decoder.feed(data):
            (self._answers if cmd.is_response else self.requests).append(cmd)

    async def closed_after(self, raw: bytes) -> bool:
        self.writer.write(raw)
        data = await asyncio.wait_for(self.reader.read(65536), 10)
        return data == b""

    def close(self) -> None:
        self.writer.close()


def consumer_heartbeat(
    client_id: str,
    group: str,
    topic: str,
    expression: str = "*",
    *,
    sql92: bool = False,
    consume_from: str = "CONSUME_FROM_LAST_OFFSET",
    consume_type: str = "CONSUME_PASSIVELY",
) -> bytes:
    """A classic HEART_BEAT body: ``client_id`` consumes ``topic`` in ``group`` (push unless
    ``consume_type`` says otherwise, clustering), no producer group; by default every tag, else
    the tag ``expression`` or, with ``sql92``, that SQL92 expression."""
    subscription = {"topic": topic, "subString": expression}
    if sql92:
        subscription["expressionType"] = "SQL92"
    return json.dumps(
        {
            "clientID": client_id,
            "consumerDataSet": [
                {
                    "groupName": group,
                    "consumeType": consume_type,
                    "messageModel": "CLUSTERING",
                    "consumeFromWhere": consume_from,
                    "subscriptionDataSet": [subscription],
                }
            ],
            "producerDataSet": [],
        }
    ).encode()


def pull_header(topic: str, queue_id: int, **fields: str) -> dict[str, str]:
    """A classic PULL_MESSAGE header: group CG reads ``queue_id`` of ``topic`` from offset 0, up
    to 32 messages, no flags, no long poll; ``fields`` (by their wire names) replace or add."""
    return {
        "consumerGroup": "CG", "topic": topic, "queueId": str(queue_id), "queueOffset": "0",
        "maxMsgNums": "32", "sysFlag": "0", "commitOffset": "0",
        "suspendTimeoutMillis": "0", "subVersion": "0",
        **fields,
    }  # fmt: skip
