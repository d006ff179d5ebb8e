"""An idempotent producer's identity: its producer id and epoch (docs/idempotence.md).

The controllers issue both (CONTROLLER_GET_PRODUCER_ID, a Raft-replicated counter): a new id at
epoch 0, or, for a producer that keeps its id in a ``producer_id_file`` across restarts, the
same id at an epoch above all its earlier ones, so the brokers fence what an older incarnation
still sends. A bootstrap that does not serve the request (a lone broker in development mode)
gives a random 62-bit id instead, and with an id file the seconds since the Unix epoch as the
epoch (rising across restarts while the clock does).
"""

from __future__ import annotations

import os
import secrets
import time
from pathlib import Path

from client.bootstrap import Bootstrap
from client.errors import BrokerError, ClientError
from protocol.codes import ResponseCode
from protocol.controller_requests.producers import GetProducerId, ProducerIdAnswer
from protocol.fields import FieldError
from protocol.idempotence import MAX_EPOCH, MAX_PRODUCER_ID

__all__ = ["acquire_identity", "read_id_file", "write_id_file"]


def read_id_file(path: Path) -> int | None:
    """The producer id kept in ``path``; None when there is no file yet."""
    try:
        text = path.read_text().strip()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise ClientError(f"producer_id_file {path}: {exc}") from None
    if not text.isdigit() or not 0 <= int(text) <= MAX_PRODUCER_ID:
        raise ClientError(f"producer_id_file {path} does not hold a producer id: {text[:40]!r}")
    return int(text)


def write_id_file(path: Path, producer_id: int) -> None:
    """Keep ``producer_id`` in ``path`` (written whole, then renamed over it, then synced)."""
    tmp = path.with_name(path.name + ".tmp")
    try:
        with tmp.open("w") as f:
            f.write(f"{producer_id}\n")
            f.flush()
            os.fsync(f.fileno())
        tmp.replace(path)
        fd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    except OSError as exc:
        raise ClientError(f"producer_id_file {path}: {exc}") from None


async def acquire_identity(
    bootstrap: Bootstrap, id_file: Path | None, timeout: float, deadline: float
) -> tuple[int, int]:
    """(producer id, epoch) for this producer's session; the id kept in ``id_file`` if given.
    Each request waits at most ``timeout`` seconds, the whole at most until ``deadline`` (the
    event loop's time: the send that asked gives up then)."""
    known = read_id_file(id_file) if id_file is not None else None
    header, body = GetProducerId(producer_id=known).encode()
    try:
        resp = await bootstrap.call(GetProducerId.code, header, body, timeout, deadline=deadline)
        answer = ProducerIdAnswer.parse(resp.header, resp.body)
    except BrokerError as exc:
        if exc.code != ResponseCode.REQUEST_CODE_NOT_SUPPORTED:
            raise
        producer_id = known if known is not None else secrets.randbits(62)
        epoch = int(time.time()) & MAX_EPOCH if id_file is not None else 0
        answer = ProducerIdAnswer(producer_id=producer_id, epoch=epoch)
    except FieldError as exc:
        raise ClientError(f"malformed producer id answer: {exc}") from None
    if id_file is not None and answer.producer_id != known:
        write_id_file(id_file, answer.producer_id)
    return answer.producer_id, answer.epoch
