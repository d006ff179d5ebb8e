"""BROKER_HEARTBEAT (904): a broker's liveness and figures to the controllers (docs/protocol.md,
"Controller requests").

Request::

    header  clusterName?, brokerName, brokerId, brokerAddress?, epoch?, maxOffset?,
            confirmOffset?, electionPriority?, heartbeatTimeoutMillis? (0: the controller's
            default; absent figures count as 0), damagedRecords? (CommitLog records the broker
            holds damaged and no replica could repair, issue 31; sent only when not 0: the
            controllers prefer a candidate without)
    body    the broker's traffic report (protocol/traffic.py), optional, carried as bytes: the
            controller decodes it only when it changed, and a malformed one never costs the
            heartbeat

The answer's header is ``masterBrokerId`` (-1: none), ``masterEpoch``, ``heartbeatTimeoutMillis``
(the timeout the controller holds the broker to), ``authDigest`` and ``producerIdLimit`` (the
lowest idempotent producer id the controllers have not issued yet) (:class:`HeartbeatAnswer`,
which reads an earlier controller's answer without some of them).

A missing or mistyped field raises :class:`~protocol.fields.FieldError`; a figure outside
[0, 2^63-1] (the timeout: outside [-(2^63-1), 2^63-1]) raises
:class:`~protocol.controller_requests.base.InvalidRequest` (CONTROLLER_INVALID_REQUEST).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import ClassVar, Final

from protocol.codes import RequestCode
from protocol.controller_requests.base import InvalidRequest, broker_header
from protocol.controller_requests.groups import NO_MASTER
from protocol.fields import FieldError, opt_int, opt_int_or_none, opt_str, req_int, req_str
from protocol.remoting import Header, Scalar

__all__ = ["MAX_FIGURE", "BrokerHeartbeat", "HeartbeatAnswer"]

MAX_FIGURE: Final = 2**63 - 1
"""The largest epoch, offset or priority a heartbeat may carry (the metadata's MAX_ID)."""


def _bounded(header: Mapping[str, Scalar], name: str, lo: int, hi: int) -> int:
    value = opt_int(header, name, 0)
    if not lo <= value <= hi:
        raise InvalidRequest(f"{name} must be in [{lo}, {hi}], not {value}")
    return value


@dataclass(frozen=True, slots=True, kw_only=True)
class BrokerHeartbeat:
    """BROKER_HEARTBEAT: ``broker_id`` of ``broker_name`` is alive, with these figures."""

    code: ClassVar[RequestCode] = RequestCode.BROKER_HEARTBEAT

    broker_name: str
    broker_id: int
    cluster: str = ""
    broker_address: str = ""
    epoch: int = 0
    max_offset: int = 0
    confirm_offset: int = 0
    election_priority: int = 0
    heartbeat_timeout_ms: int = 0
    """The timeout the broker asks to be held to (0 or less: the controller's default)."""
    traffic_report: bytes | None = None
    damaged_records: int = 0
    """Damaged CommitLog records the broker holds unrepaired (left out of the header at 0)."""

    def encode(self) -> tuple[Header, bytes | None]:
        header = broker_header(self.cluster, self.broker_name, self.broker_id, self.broker_address)
        header.update(
            {
                "epoch": self.epoch,
                "maxOffset": self.max_offset,
                "confirmOffset": self.confirm_offset,
                "electionPriority": self.election_priority,
                "heartbeatTimeoutMillis": self.heartbeat_timeout_ms,
            }
        )
        if self.damaged_records:
            header["damagedRecords"] = self.damaged_records
        return header, self.traffic_report

    @classmethod
    def parse(cls, header: Mapping[str, Scalar], body: bytes | None = None) -> BrokerHeartbeat:
        name = req_str(header, "brokerName")
        broker_id = req_int(header, "brokerId")
        return cls(
            broker_name=name,
            broker_id=broker_id,
            epoch=_bounded(header, "epoch", 0, MAX_FIGURE),
            max_offset=_bounded(header, "maxOffset", 0, MAX_FIGURE),
            confirm_offset=_bounded(header, "confirmOffset", 0, MAX_FIGURE),
            election_priority=_bounded(header, "electionPriority", 0, MAX_FIGURE),
            heartbeat_timeout_ms=_bounded(
                header, "heartbeatTimeoutMillis", -MAX_FIGURE, MAX_FIGURE
            ),
            cluster=opt_str(header, "clusterName"),
            broker_address=opt_str(header, "brokerAddress"),
            traffic_report=body or None,
            damaged_records=_bounded(header, "damagedRecords", 0, MAX_FIGURE),
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class HeartbeatAnswer:
    """BROKER_HEARTBEAT's SUCCESS: who is the group's master at which epoch (a broker renews its
    write lease only on an answer naming it master at its own epoch), for how long the
    controller holds the broker alive, and the digest of the users and rules (a change makes
    the broker fetch them again, AUTH_SYNC_USERS).

    Controllers of earlier versions answered with less, and a broker must still read them (it
    may be upgraded first): a field they left out parses as "not told" (``master_epoch`` and
    ``auth_digest`` None, ``heartbeat_timeout_ms`` 0) and is left out again by :meth:`encode`.
    """

    master_broker_id: int | None
    """None: no master (-1 on the wire, also when the answer does not name one)."""
    master_epoch: int | None
    """None: not told (a controller before answers named the master): the answer names no one."""
    heartbeat_timeout_ms: int = 0
    """0: not told (a controller before it capped the timeout): the broker's own applies."""
    auth_digest: str | None = None
    """None: not told."""
    producer_id_limit: int | None = None
    """Idempotent producer ids below it were issued by the controllers, none at or above it
    (docs/idempotence.md); None: not told."""

    def __post_init__(self) -> None:
        if self.master_broker_id == NO_MASTER:
            raise FieldError(f"master_broker_id {NO_MASTER} means no master: give None")

    def encode(self) -> tuple[Header, bytes | None]:
        master = self.master_broker_id
        header: Header = {"masterBrokerId": NO_MASTER if master is None else master}
        if self.master_epoch is not None:
            header["masterEpoch"] = self.master_epoch
        header["heartbeatTimeoutMillis"] = self.heartbeat_timeout_ms
        if self.auth_digest is not None:
            header["authDigest"] = self.auth_digest
        if self.producer_id_limit is not None:
            header["producerIdLimit"] = self.producer_id_limit
        return header, None

    @classmethod
    def parse(cls, header: Mapping[str, Scalar], body: bytes | None = None) -> HeartbeatAnswer:
        master = opt_int(header, "masterBrokerId", NO_MASTER)
        digest = header.get("authDigest")
        if digest is not None and not isinstance(digest, str):
            raise FieldError("'authDigest' must be a string")
        return cls(
            master_broker_id=None if master == NO_MASTER else master,
            master_epoch=opt_int_or_none(header, "masterEpoch"),
            heartbeat_timeout_ms=opt_int(header, "heartbeatTimeoutMillis", 0),
            auth_digest=digest,
            producer_id_limit=opt_int_or_none(header, "producerIdLimit"),
        )
