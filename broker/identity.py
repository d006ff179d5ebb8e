"""Persistent BrokerId (RocketMQ 5.1.1): a broker keeps its id across restarts and address changes.

Files in the data directory, each written atomically (temp, fsync, rename, fsync dir, ``.bak``):

- ``brokerIdentity.temp``: ``{"brokerId", "registerCode"}`` chosen but not yet applied;
- ``brokerIdentity``: the same, once the controller applied it.

Steps and the recovery rule for a crash between any two of them:

1. final file present -> the id is ours: register only;
2. temp file present -> re-apply its (id, code): success (first time, or already applied to us by
   code) -> write the final file, remove the temp; 2014 (the id went to another code) -> remove the
   temp and start over at 3;
3. nothing -> GetNextBrokerId, write the temp file with a fresh random register code, then 2.

A broker whose applied id the controllers forgot (:func:`reestablish_identity`) applies it again,
or, when that id cannot be its own any more, removes the final file and starts over at 3.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

import structlog

from protocol.codes import ResponseCode
from storage.errors import StoreError
from storage.small_file import backup_path, read_atomic, write_atomic

log = structlog.get_logger(__name__)

TEMP_NAME = "brokerIdentity.temp"
FINAL_NAME = "brokerIdentity"


@dataclass(frozen=True, slots=True)
class BrokerIdentity:
    broker_id: int
    register_code: str


class IdentityError(Exception):
    """The identity could not be established (a controller answer other than the expected ones)."""


class BrokerIdConflictError(Exception):
    """ApplyBrokerId answered 2014: the id belongs to another register code."""


GetNextBrokerId = Callable[[], Awaitable[int]]
ApplyBrokerId = Callable[[int, str], Awaitable[None]]  # raises BrokerIdConflictError on 2014


def _read(path: Path) -> BrokerIdentity | None:
    try:
        raw = read_atomic(path)
    except StoreError as exc:  # the file and its .bak both fail their checksums
        raise IdentityError(f"broker identity file unreadable: {exc}") from None
    if raw is None:
        return None
    try:
        doc = json.loads(raw)
        return BrokerIdentity(int(doc["brokerId"]), str(doc["registerCode"]))
    except (ValueError, KeyError, TypeError):
        raise IdentityError(f"{path} is not a broker identity file") from None


def check_identity_files(data_dir: Path) -> None:
    """Read both identity files as :func:`establish_identity` will; raises
    :class:`IdentityError` naming the file when one exists but cannot be read (the broker
    refuses to start rather than serve without ever registering)."""
    _read(data_dir / FINAL_NAME)
    _read(data_dir / TEMP_NAME)


def _write(path: Path, ident: BrokerIdentity) -> None:
    """Write ``path`` and, when it has none, its ``.bak`` too: an identity is written once, and
    a ``.bak`` is otherwise made only by a rewrite, so one damaged file would leave the broker
    unable to start."""
    payload = json.dumps(
        {"brokerId": ident.broker_id, "registerCode": ident.register_code}
    ).encode()
    write_atomic(path, payload)
    if not backup_path(path).exists():
        write_atomic(path, payload)  # the first copy becomes the .bak


def _remove(path: Path) -> None:
    for p in (path, backup_path(path)):
        p.unlink(missing_ok=True)


def load_identity(data_dir: Path) -> BrokerIdentity | None:
    """The applied identity, if this broker has one."""
    return _read(data_dir / FINAL_NAME)


async def establish_identity(
    data_dir: Path,
    get_next_broker_id: GetNextBrokerId,
    apply_broker_id: ApplyBrokerId,
    attempts: int = 10,
) -> BrokerIdentity:
    """Run the steps above until this broker owns an applied id."""
    final = data_dir / FINAL_NAME
    temp = data_dir / TEMP_NAME
    for _ in range(attempts):
        known = _read(final)
        if known is not None:
            _remove(temp)
            if not backup_path(final).exists():
                _write(final, known)  # a file an older version wrote once: its .bak now
            return known
        pending = _read(temp)
        if pending is None:
            next_id = await get_next_broker_id()
            pending = BrokerIdentity(next_id, secrets.token_hex(8))
            _write(temp, pending)
        try:
            await apply_broker_id(pending.broker_id, pending.register_code)
        except BrokerIdConflictError:
            # Replicas starting together ask for the next id at once; all but one lose the
            # compare-and-set and ask again (the design's path, not a fault).
            log.info(
                "broker id taken by another broker; choosing again", broker_id=pending.broker_id
            )
            _remove(temp)
            continue
        _write(final, pending)
        _remove(temp)
        log.info("broker id applied", broker_id=pending.broker_id)
        return pending
    raise IdentityError(f"could not obtain a broker id after {attempts} attempts")


async def reestablish_identity(
    data_dir: Path,
    known: BrokerIdentity,
    get_next_broker_id: GetNextBrokerId,
    apply_broker_id: ApplyBrokerId,
) -> BrokerIdentity:
    """The controllers no longer know ``known`` (registration answered 2010: an operator cleaned
    this broker's metadata, or the whole group's): apply the same (id, code) again; when the id
    cannot be ours any more (2014: given to another broker, or not the next id to assign), drop
    the identity file and obtain a new id as a new broker would. The data directory is kept."""
    try:
        await apply_broker_id(known.broker_id, known.register_code)
    except BrokerIdConflictError:
        log.warning("broker id no longer available; obtaining a new one", broker_id=known.broker_id)
    else:
        log.info("broker id applied again", broker_id=known.broker_id)
        return known
    # A crash after this removal is the fresh-broker case of the steps above.
    _remove(data_dir / FINAL_NAME)
    return await establish_identity(data_dir, get_next_broker_id, apply_broker_id)


CONFLICT_CODE = ResponseCode.CONTROLLER_BROKER_ID_INVALID
