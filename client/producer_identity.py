"""An idempotent producer's identity: its producer id and epoch (docs/idempotence.md).

The controllers issue both (CONTROLLER_GET_PRODUCER_ID, a Raft-replicated counter): a new id at
epoch 0, or, for a producer that keeps its id in a ``producer_id_file`` across restarts, the
same id at an epoch above all its earlier ones, so the brokers fence what an older incarnation
still sends. A bootstrap that does not serve the request (a lone broker in development mode)
gives a random 62-bit id instead, and with an id file the seconds since the Unix epoch as the
epoch, or one above the epoch the last incarnation took when that is higher (kept beside the
id file, ``<file>.epoch``): two starts within a second, or a clock set back, still rise. The
same epoch again would make the broker answer the new incarnation's first sends with the
offsets of the old one's (the same sequences), storing nothing.

With authentication on the controllers' answer carries the id's tokens for this producer's
user (protocol/producer_token.py): the send token goes with every sequenced send, and the owner
token is kept in the id file after the id (hex, on the same line: one atomic write) and sent
when the id is taken up again.
"""

from __future__ import annotations

import asyncio
import os
import secrets
import time
from pathlib import Path

from client.bootstrap import Bootstrap
from client.errors import BrokerError, ClientError, SendError, UnreachableError
from protocol.codes import ResponseCode
from protocol.controller_requests.producers import GetProducerId, ProducerIdAnswer
from protocol.fields import FieldError
from protocol.idempotence import MAX_EPOCH, MAX_PRODUCER_ID
from protocol.producer_token import TOKEN_BYTES

__all__ = ["acquire_identity", "lone_epoch", "read_id_file", "write_id_file"]


def read_id_file(
    path: Path, what: str = "a producer id", limit: int = MAX_PRODUCER_ID
) -> int | None:
    """The producer id kept in ``path`` (or the number ``what``, at most ``limit``); None when
    there is no file yet."""
    kept = read_identity(path, what, limit)
    return None if kept is None else kept[0]


def read_identity(
    path: Path, what: str = "a producer id", limit: int = MAX_PRODUCER_ID
) -> tuple[int, bytes | None] | None:
    """The producer id kept in ``path`` and the owner token kept after it on the same line
    (hex; None when there is none); None when there is no file yet."""
    try:
        text = path.read_text().strip()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise ClientError(f"producer_id_file {path}: {exc}") from None
    number, _, rest = text.partition(" ")
    if not number.isdigit() or not 0 <= int(number) <= limit:
        raise ClientError(f"producer_id_file {path} does not hold {what}: {text[:40]!r}")
    if not rest:
        return int(number), None
    try:
        token = bytes.fromhex(rest.strip())
    except ValueError:
        token = b""
    if len(token) != TOKEN_BYTES:
        raise ClientError(
            f"producer_id_file {path}: what follows the id is not an owner token "
            f"({TOKEN_BYTES} bytes in hex): {rest[:40]!r}"
        )
    return int(number), token


def write_id_file(path: Path, producer_id: int, owner: bytes | None = None) -> None:
    """Keep ``producer_id`` (or an epoch) in ``path``, and after it on the same line the owner
    token ``owner`` in hex (written whole, then renamed over it, then synced)."""
    tmp = path.with_name(path.name + ".tmp")
    text = str(producer_id) if owner is None else f"{producer_id} {owner.hex()}"
    try:
        with tmp.open("w") as f:
            f.write(f"{text}\n")
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


_BACKSTOP_S = 1.0
"""How long past its deadline the producer id's request may take in all, at the most."""


async def acquire_identity(
    bootstrap: Bootstrap, id_file: Path | None, timeout: float, deadline: float
) -> ProducerIdAnswer:
    """The producer id, epoch and tokens for this producer's session; the id kept in
    ``id_file`` if given.

    Each controller asked waits at most ``timeout`` seconds for its answer, and all of it at
    most until ``deadline`` (the event loop's time; a :class:`SendError` past it): controllers
    that accept connections but do not answer (frozen, no leader) cost a send no more than its
    deadline. No controller reachable at all, before the deadline, is an
    :class:`UnreachableError` at once, as a route lookup's."""
    kept = read_identity(id_file) if id_file is not None else None
    known, owner = (None, None) if kept is None else kept
    header, body = GetProducerId(producer_id=known, owner_token=owner).encode()
    loop = asyncio.get_running_loop()
    try:
        try:
            # The failover ends its rounds at the deadline, with each controller's reason; this
            # only bounds what it does not (a connection that takes long to open).
            async with asyncio.timeout_at(deadline + _BACKSTOP_S):
                resp = await bootstrap.call(
                    GetProducerId.code, header, body, timeout, deadline=deadline
                )
        except (TimeoutError, UnreachableError) as exc:
            if isinstance(exc, UnreachableError) and loop.time() < deadline:
                raise
            where = ";".join(bootstrap.addresses)
            raise SendError(
                f"no producer id from the controllers at {where} within the send's deadline "
                f"(send_deadline): {str(exc) or 'no active controller answered'}"
            ) from exc
        answer = ProducerIdAnswer.parse(resp.header, resp.body)
    except BrokerError as exc:
        if exc.code != ResponseCode.REQUEST_CODE_NOT_SUPPORTED:
            raise
        producer_id = known if known is not None else secrets.randbits(62)
        epoch = lone_epoch(id_file, known is not None) if id_file is not None else 0
        answer = ProducerIdAnswer(producer_id=producer_id, epoch=epoch)
    except FieldError as exc:
        raise ClientError(f"malformed producer id answer: {exc}") from None
    if id_file is not None and (
        answer.producer_id != known
        or (answer.owner_token is not None and answer.owner_token != owner)
    ):
        write_id_file(id_file, answer.producer_id, answer.owner_token)
    return answer


def lone_epoch(id_file: Path, known: bool) -> int:
    """A lone broker's producer with ``id_file`` (``known``: the file held its id): the
    clock's seconds, or one above the epoch kept beside the file when that is higher, kept
    there before the first send."""
    epoch_file = id_file.with_name(id_file.name + ".epoch")
    last = read_id_file(epoch_file, "an epoch", MAX_EPOCH) if known else None
    epoch = int(time.time()) & MAX_EPOCH
    if last is not None and epoch <= last:
        if last >= MAX_EPOCH:
            raise ClientError(f"producer_id_file {id_file}: its epoch {last} is the largest")
        epoch = last + 1
    write_id_file(epoch_file, epoch)
    return epoch
