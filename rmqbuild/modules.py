"""The modules mypyc compiles, by dotted name: each one's ``.py`` is the single source (mypy
strict checks it; the pure fallback imports it). A module is compiled with every other one here
as one group, so they call each other natively: they are loaded all compiled or all pure, never
mixed (rmqbuild.hook)."""

from __future__ import annotations

from typing import Final

COMPILED: Final[tuple[str, ...]] = (
    # The codecs (protocol/): remoting frames, typed requests, HA headers, message records,
    # Raft messages, POP receipt handles.
    "protocol.fields",
    "protocol.remoting",
    "protocol.message",
    "protocol.broker_requests.send",
    "protocol.pull",
    "protocol.ha",
    "protocol.raft",
    "protocol.raft_types",
    "protocol.pop",
    "protocol.timer",
    "protocol.idempotence",
    # The CommitLog record encoder and parser, the ConsumeQueue dispatcher, the slave's replay.
    "storage.dispatch",
    "storage.queue_write",
    "broker.ha.batch",
    # The Raft core (pure: no asyncio, clock or sockets), each entry and heartbeat round.
    "controller.raft.log",
    "controller.raft.progress",
    "controller.raft.core",
    "controller.raft.leader",
    "controller.raft.ready",
    "controller.raft.membership",
    "controller.raft.readonly",
    "controller.raft.config",
    "controller.raft.errors",
    "controller.raft.handler",
    # The controllers' per-heartbeat path: the handler, the live table, the connection ids
    # and the groups' view it reads.
    "controller.service.heartbeats",
    "controller.service.connections",
    "controller.service.group_view",
    "controller.metadata.heartbeat",
    # The timer wheel.
    "storage.timer.wheel",
    # The broker's send path: the handler, the send service and its idempotence driver, the
    # append and its store put (CommitLog, ConsumeQueue, key index), the offset waiters, and
    # the role the send path reads (a native read of the current role).
    "broker.processors.send",
    "broker.send.service",
    "broker.send.idempotence",
    "broker.appender",
    "broker.offset_waiters",
    "storage.store",
    "storage.consumequeue",
    "storage.index.service",
    "broker.role",
)

GROUP: Final = "rmq_hot"
"""The name of the shared library holding the group's code (``rmq_hot__mypyc``)."""


def source_path(module: str) -> str:
    """The ``.py`` of ``module``, relative to the repository root."""
    return module.replace(".", "/") + ".py"
