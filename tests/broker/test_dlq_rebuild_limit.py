"""The resend ledger's build from the CommitLog reads at most the log's last
``DeadLetterService.rebuild_limit`` bytes (broker/dlq/service.py, REBUILD_LIMIT: 128 MiB, on the
loop thread). A copy re-sent within them is marked; one older than that is not looked for (its
mark is the ledger file's, as before the build existed). A lone broker in process, with the limit
lowered so the log need not be 128 MiB long."""

from __future__ import annotations

import time
from pathlib import Path

import structlog

from broker.broker import Broker
from protocol.message import Message, MsgIdMaker
from protocol.retry import PROP_DLQ_RESENT_FROM, dlq_topic
from tests.broker.support import running, small_config

G = "G"
LIMIT = 64 * 1024
FILLER = 1024


def put(
    b: Broker, topic: str, body: bytes, properties: dict[str, str] | None = None
) -> tuple[int, int]:
    """Store one message on ``topic``'s queue 0; its CommitLog and queue offsets."""
    message = Message(topic=topic, body=body, properties=properties)
    result = b.ctx.store.put(topic, 0, [message], int(time.time() * 1000))
    return result.physical_offsets[0], result.first_queue_offset


def parked_and_resent(b: Broker, msg_id: MsgIdMaker, n: int) -> int:
    """A message parked in G's DLQ and its copy re-sent to T; the DLQ queue offset."""
    offset, queue_offset = put(b, dlq_topic(G), f"poison-{n}".encode())
    put(b, "T", f"poison-{n}".encode(), {PROP_DLQ_RESENT_FROM: msg_id(offset)})
    return queue_offset


async def test_a_build_marks_the_copies_within_the_limit_and_not_older_ones(
    tmp_path: Path,
) -> None:
    async with running(small_config(tmp_path)) as b:
        service = b.ctx.dead_letters
        service.rebuild_limit = LIMIT
        msg_id = MsgIdMaker(b.ctx.cfg.listen)
        old = parked_and_resent(b, msg_id, 0)
        for _ in range(2 * LIMIT // FILLER):
            put(b, "T", b"x" * FILLER)
        new = parked_and_resent(b, msg_id, 1)
        assert b.ctx.store.max_offset > 2 * LIMIT
        assert b.ctx.dlq_resent.snapshot() == {}

        service.state = None
        with structlog.testing.capture_logs() as logs:
            service.ready()

        assert b.ctx.dlq_resent.snapshot() == {G: [new]}
        assert not b.ctx.dlq_resent.was_resent(G, old)
        cut = [e for e in logs if e["event"].startswith("resend ledger: only the CommitLog's")]
        assert len(cut) == 1 and cut[0]["limit"] == LIMIT
        assert cut[0]["scanned_from"] == b.ctx.store.max_offset - LIMIT


async def test_a_build_within_the_limit_marks_every_copy(tmp_path: Path) -> None:
    async with running(small_config(tmp_path)) as b:
        service = b.ctx.dead_letters
        service.rebuild_limit = LIMIT
        msg_id = MsgIdMaker(b.ctx.cfg.listen)
        first = parked_and_resent(b, msg_id, 0)
        for _ in range(LIMIT // FILLER // 4):
            put(b, "T", b"x" * FILLER)
        second = parked_and_resent(b, msg_id, 1)
        assert b.ctx.store.max_offset < LIMIT

        service.state = None
        with structlog.testing.capture_logs() as logs:
            service.ready()

        assert b.ctx.dlq_resent.snapshot() == {G: [first, second]}
        assert not [e for e in logs if e["event"].startswith("resend ledger: only")]
