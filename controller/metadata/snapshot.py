"""Snapshot encoding of the metadata state machine: same state, same bytes.

Layout: one msgpack array, groups ascending by broker name, ids ascending::

    ["rmq-metadata", 1, [group, ...]]
    group = [broker_name, cluster, next_assign_broker_id, master_broker_id | nil, master_epoch,
             [sync_state_set ids], sync_state_set_epoch, [[broker_id, address, register_code], ...]]

:func:`decode_groups` raises :class:`SnapshotError`, and nothing else, on bytes that are not such
a snapshot or describe a state that breaks the invariants of group.py.
"""

from __future__ import annotations

from collections.abc import Mapping
from itertools import pairwise
from typing import Any, Final

import msgpack

from controller.metadata.events import (
    check_broker_id,
    check_epoch,
    check_name,
    check_text,
)
from controller.metadata.group import BrokerGroup, BrokerRecord

SNAPSHOT_MAGIC: Final = "rmq-metadata"
SNAPSHOT_VERSION: Final = 1


class SnapshotError(ValueError):
    """Bytes that are not a valid metadata snapshot."""


def encode_groups(groups: Mapping[str, BrokerGroup]) -> bytes:
    body: list[Any] = []
    for name in sorted(groups):
        g = groups[name]
        body.append(
            [
                g.broker_name,
                g.cluster,
                g.next_assign_broker_id,
                g.master_broker_id,
                g.master_epoch,
                sorted(g.sync_state_set),
                g.sync_state_set_epoch,
                [
                    [broker_id, g.brokers[broker_id].address, g.brokers[broker_id].register_code]
                    for broker_id in sorted(g.brokers)
                ],
            ]
        )
    packed: bytes = msgpack.packb([SNAPSHOT_MAGIC, SNAPSHOT_VERSION, body], use_bin_type=True)
    return packed


def _array(what: str, value: object, length: int | None = None) -> list[Any]:
    if not isinstance(value, list):
        raise TypeError(f"{what} must be an array")
    if length is not None and len(value) != length:
        raise ValueError(f"{what} must have {length} elements, not {len(value)}")
    return value


def _ascending_ids(what: str, value: object) -> list[int]:
    ids = [check_broker_id(f"member of {what}", v) for v in _array(what, value)]
    if any(b <= a for a, b in pairwise(ids)):
        raise ValueError(f"{what} must be strictly ascending")
    return ids


def _group(value: object) -> BrokerGroup:
    fields = _array("group", value, 8)
    name = check_name("broker_name", fields[0])
    cluster = check_name("cluster", fields[1])
    next_assign = check_broker_id("next_assign_broker_id", fields[2])
    master = None if fields[3] is None else check_broker_id("master_broker_id", fields[3])
    master_epoch = check_epoch("master_epoch", fields[4])
    sync_state_set = frozenset(_ascending_ids("sync_state_set", fields[5]))
    sync_state_set_epoch = check_epoch("sync_state_set_epoch", fields[6])
    brokers: dict[int, BrokerRecord] = {}
    previous = 0
    for entry in _array("brokers", fields[7]):
        raw_id, address, register_code = _array("broker", entry, 3)
        broker_id = check_broker_id("broker_id", raw_id)
        if broker_id <= previous:
            raise ValueError("brokers must be strictly ascending by id")
        previous = broker_id
        brokers[broker_id] = BrokerRecord(
            address=check_text("address", address),
            register_code=check_text("register_code", register_code),
        )
    group = BrokerGroup(
        cluster=cluster,
        broker_name=name,
        next_assign_broker_id=next_assign,
        brokers=brokers,
        master_broker_id=master,
        master_epoch=master_epoch,
        sync_state_set=sync_state_set,
        sync_state_set_epoch=sync_state_set_epoch,
    )
    problems = group.invariant_violations()
    if problems:
        raise ValueError("; ".join(problems))
    return group


def decode_groups(data: bytes) -> dict[str, BrokerGroup]:
    try:
        obj = msgpack.unpackb(data, raw=False, use_list=True, strict_map_key=True)
    except Exception as exc:  # msgpack raises several unrelated types on garbage
        raise SnapshotError(f"undecodable snapshot: {type(exc).__name__}") from None
    try:
        magic, version, body = _array("snapshot", obj, 3)
        if magic != SNAPSHOT_MAGIC:
            raise ValueError("not a metadata snapshot (bad magic)")
        if version != SNAPSHOT_VERSION or type(version) is not int:
            raise ValueError(f"unsupported snapshot version {version!r}")
        groups: dict[str, BrokerGroup] = {}
        previous: str | None = None
        for value in _array("groups", body):
            group = _group(value)
            if previous is not None and group.broker_name <= previous:
                raise ValueError("groups must be strictly ascending by broker name")
            previous = group.broker_name
            groups[group.broker_name] = group
        return groups
    except (TypeError, ValueError) as exc:
        raise SnapshotError(f"invalid snapshot: {exc}") from None
