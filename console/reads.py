"""What the console's pages show, read from a cluster as rmqctl reads it: the same SDK clients
(:mod:`client.admin`, :mod:`client.progress`) and the same admin requests (rmqctl's
controller, topic and progress modules), never a broker's or controller's code.

Every function takes the cluster's controller addresses and returns plain values the templates
render; a cluster that cannot be reached raises :class:`client.errors.ClientError` or
:class:`remoting.errors.RemotingError`, which the app shows as an error page. A consumer group
every broker group answered for and none knows raises :class:`client.errors.GroupNotFoundError`.
"""

from __future__ import annotations

import asyncio
import json
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from typing import Any, Final, Generic, TypeVar

from client.admin import Admin
from client.bootstrap import describe_failure, parse_addresses
from client.errors import ClientError
from client.lookup import FoundMessage, Lookup
from client.message_range import RangeReader
from client.progress import Member, NoBrokerRegistered, ProgressAdmin, allocation
from client.routes import ClusterBroker
from client.trace import query_trace
from protocol.broker_requests.runtime import RuntimeInfo, RuntimeInfoQuery, StatsData, StatsQuery
from protocol.controller_requests.groups import GetMetadataInfo
from protocol.controller_requests.topics import TopicList, TopicListQuery
from protocol.controller_requests.users import ListAcl, ListUsers
from protocol.fields import FieldError
from protocol.retry import retry_topic
from protocol.topic_admin import QueueStatus
from protocol.topic_attrs import MessageType, TopicAttrs, perm_text
from remoting.client import ConnectionPool
from remoting.errors import RemotingError, ResponseError
from rmqctl.broker_admin import BrokerRef, ask_each, failures
from rmqctl.broker_stats import masters, merge_stats
from rmqctl.controller import replica_epochs, sync_state
from rmqctl.controller_calls import answer_body, call_controllers
from rmqctl.progress import (
    ProgressRow,
    group_totals,
    logical_rows,
    not_opened,
    not_opened_notes,
    progress_rows,
    source_notes,
)
from rmqctl.static_topic import mapping_of
from rmqctl.topic_admin import TopicAdmin
from rmqctl.trace import trace_row

R = TypeVar("R")


#: the kinds the topics page filters by (RocketMQ Dashboard's), from the name alone
TOPIC_KINDS: Final = ("normal", "retry", "dlq", "system")
#: the topics page's filters by message type (the topic's ``message.type``, topicList's)
TOPIC_TYPES: Final = {
    "fifo": MessageType.FIFO,
    "scheduled": MessageType.DELAY,
    "transactional": MessageType.TRANSACTION,
    "mixed": MessageType.MIXED,
}
#: the topics page's filters: the kinds, the message types, and static topics (their routes'
#: logical queues)
TOPIC_FILTERS: Final = (*TOPIC_KINDS, *TOPIC_TYPES, "static")
_SYSTEM_PREFIXES: Final = ("RMQ_SYS_", "rmq_sys_", "SCHEDULE_TOPIC", "TRANS_", "RMQ_")


def topic_kind(topic: str) -> str:
    """normal, retry (%RETRY%group), dlq (%DLQ%group) or system (the brokers' own topics)."""
    if topic.startswith("%RETRY%"):
        return "retry"
    if topic.startswith("%DLQ%"):
        return "dlq"
    if topic.startswith(_SYSTEM_PREFIXES) or topic.startswith("%"):
        return "system"
    return "normal"


# --- the cluster page ---------------------------------------------------------------------------


@dataclass(slots=True)
class Replica:
    broker_id: int
    address: str
    role: str
    alive: bool
    in_sync: bool
    max_offset: int | None = None
    confirm_offset: int | None = None
    #: CommitLog bytes this replica is behind its master (None: unknown)
    behind: int | None = None
    epochs: str = ""
    error: str | None = None
    #: messages stored and served per second, and the used share of the data disk
    #: (brokerStatus); None when the broker did not answer
    put_tps: float | None = None
    get_tps: float | None = None
    disk_ratio: float | None = None


@dataclass(slots=True)
class BrokerGroup:
    name: str
    cluster: str
    master_id: int | None
    master_address: str | None
    master_epoch: int | None
    sync_state_set: list[int]
    sync_state_set_epoch: int | None
    replicas: list[Replica] = field(default_factory=list)
    error: str | None = None


@dataclass(slots=True)
class ControllerState:
    address: str
    node_id: str | None = None
    role: str = ""
    leader_id: str | None = None
    term: int | None = None
    commit_index: int | None = None
    error: str | None = None


@dataclass(slots=True)
class ClusterView:
    controllers: list[ControllerState]
    groups: list[BrokerGroup]

    @property
    def leader(self) -> ControllerState | None:
        return next((c for c in self.controllers if c.role == "leader"), None)


async def controller_state(address: str, timeout: float) -> ControllerState:
    """One controller's own view (getControllerMetaData asked of it, not of the leader)."""
    pool = ConnectionPool(timeout)
    state = ControllerState(address)
    try:
        conn = await pool.get(address)
        ask = GetMetadataInfo()
        resp = await conn.call(ask.code, *ask.encode(), timeout=timeout)
        doc = answer_body(resp, "controller metadata")
    except ResponseError as exc:
        state.error = str(exc)
        return state
    except (RemotingError, ValueError) as exc:
        state.error = describe_failure(exc)
        return state
    except ClientError as exc:
        state.error = str(exc)
        return state
    finally:
        pool.close()
    if not isinstance(doc, dict):
        state.error = "malformed answer"
        return state
    state.node_id = doc.get("self")
    state.leader_id = doc.get("leaderId")
    state.term = doc.get("term")
    state.commit_index = doc.get("commitIndex")
    learners = set(doc.get("learners") or ())
    if state.node_id is not None and state.node_id == state.leader_id:
        state.role = "leader"
    else:
        state.role = "learner" if state.node_id in learners else "follower"
    return state


async def broker_group(addresses: str, name: str, cluster: str) -> BrokerGroup:
    """A broker group's master, epochs and SyncStateSet (getSyncStateSet) and each replica's
    CommitLog offsets and how far it is behind the master (getBrokerEpoch)."""
    try:
        doc, epochs = await asyncio.gather(
            sync_state(addresses, name), replica_epochs(addresses, name)
        )
    except (ClientError, RemotingError) as exc:
        return BrokerGroup(name, cluster, None, None, None, [], None, error=_why(exc))
    master_id = doc.get("masterBrokerId")
    listed = [r for r in doc.get("replicas") or () if r.get("address")]
    ask = RuntimeInfoQuery()
    runtime = await ask_each(
        [BrokerRef(r["address"]) for r in listed],
        ask.code,
        *ask.encode(),
        lambda frame: RuntimeInfo.parse(frame.header, frame.body),
    )
    figures = {r["address"]: info for r, info in zip(listed, runtime, strict=True)}
    by_id = {e["brokerId"]: e for e in epochs}
    master_max = (by_id.get(master_id) or {}).get("maxOffset")
    replicas = []
    for r in doc.get("replicas") or ():
        e = by_id.get(r["brokerId"], {})
        max_offset = e.get("maxOffset")
        behind = (
            max(0, master_max - max_offset)
            if isinstance(master_max, int) and isinstance(max_offset, int)
            else None
        )
        replicas.append(
            Replica(
                broker_id=r["brokerId"],
                address=r["address"],
                role="MASTER" if r["brokerId"] == master_id else "SLAVE",
                alive=bool(r.get("alive")),
                in_sync=bool(r.get("inSync")),
                max_offset=max_offset,
                confirm_offset=e.get("confirmOffset"),
                behind=behind,
                epochs=", ".join(
                    f"{x.get('epoch')}@{x.get('startOffset')}" for x in e.get("epochs") or ()
                ),
                error=e.get("error"),
            )
        )
        info = figures.get(r["address"])
        # Only when the address answered as this id: a dead id's address may serve its
        # successor now (a wiped replica back under a new id), whose figures are its own row's.
        if isinstance(info, RuntimeInfo) and "error" not in e:
            replicas[-1].put_tps = info.put_tps
            replicas[-1].get_tps = info.get_tps
            replicas[-1].disk_ratio = info.commitlog_disk_ratio
    return BrokerGroup(
        name=name,
        cluster=cluster,
        master_id=master_id,
        master_address=doc.get("masterAddress") or None,
        master_epoch=doc.get("masterEpoch"),
        sync_state_set=sorted(doc.get("syncStateSet") or ()),
        sync_state_set_epoch=doc.get("syncStateSetEpoch"),
        replicas=replicas,
    )


async def cluster_view(addresses: str, timeout: float) -> ClusterView:
    """Every controller's state and every broker group the controllers route to."""
    controllers = asyncio.gather(
        *(controller_state(a, timeout) for a in parse_addresses(addresses))
    )
    async with Admin(addresses, timeout) as admin:
        try:
            clusters = await admin.cluster_info()
        except (ClientError, RemotingError):
            clusters = {}
    names = _group_names(clusters)
    groups = await asyncio.gather(*(broker_group(addresses, n, c) for n, c in names))
    states = await controllers
    if all(c.error for c in states):
        raise ClientError(
            "no controller answered: " + "; ".join(f"{c.address}: {c.error}" for c in states)
        )
    return ClusterView(list(states), list(groups))


def _group_names(clusters: dict[str, list[ClusterBroker]]) -> list[tuple[str, str]]:
    return sorted({(b.broker_name, name) for name, bs in clusters.items() for b in bs})


def _why(exc: BaseException) -> str:
    return describe_failure(exc) if isinstance(exc, RemotingError) else str(exc)


class TpsHistory:
    """Each broker's put and get TPS as the cluster page read them, for the last hour (in the
    console's memory: the chart starts when the console does)."""

    WINDOW_S: Final = 3600.0

    def __init__(self) -> None:
        self._samples: dict[tuple[str, str], list[tuple[float, float, float]]] = {}

    def record(self, cluster: str, view: ClusterView, now: float) -> None:
        for g in view.groups:
            for r in g.replicas:
                if r.put_tps is None or r.get_tps is None:
                    continue
                series = self._samples.setdefault((cluster, r.address), [])
                series.append((now, r.put_tps, r.get_tps))
                while series and series[0][0] < now - self.WINDOW_S:
                    series.pop(0)

    def chart(
        self, cluster: str, address: str, now: float, width: int = 160, height: int = 28
    ) -> dict[str, str]:
        """SVG polyline points of put and get TPS over the last hour, scaled to the highest."""
        series = self._samples.get((cluster, address), [])
        top = max((max(p, g) for _, p, g in series), default=0.0) or 1.0

        def points(index: int) -> str:
            return " ".join(
                f"{width * (1 - (now - s[0]) / self.WINDOW_S):.1f},"
                f"{height - height * s[index] / top:.1f}"
                for s in series
            )

        return {"put": points(1), "get": points(2), "top": f"{top:.1f}"}


# --- topics ---------------------------------------------------------------------------------------

#: rows on one page of the topics page (a cluster with thousands of topics is read in pages)
TOPICS_PER_PAGE: Final = 100


@dataclass(frozen=True, slots=True)
class Page(Generic[R]):
    """One page of ``total`` rows: ``number`` of ``pages`` (1-based), its ``rows`` and the
    1-based positions of its first and last row (0, 0 when there is none)."""

    rows: list[R]
    number: int
    pages: int
    total: int
    first: int
    last: int

    @classmethod
    def of(cls, rows: list[R], number: int, size: int) -> Page[R]:
        """Page ``number`` of ``rows``; past the last page, the last page."""
        pages = max(1, -(-len(rows) // size))
        number = min(max(1, number), pages)
        start = (number - 1) * size
        shown = rows[start : start + size]
        first = start + 1 if shown else 0
        return cls(shown, number, pages, len(rows), first, start + len(shown))


@dataclass(slots=True)
class TopicRow:
    topic: str
    kind: str
    cluster: str
    queues: int
    brokers: dict[str, int]
    groups: list[str]
    attrs: TopicAttrs = field(default_factory=TopicAttrs)

    @property
    def perm(self) -> str:
        return perm_text(self.attrs.perm)

    def is_a(self, kind: str) -> bool:
        """Whether the row is of ``kind``, a kind or a message type (TOPIC_FILTERS)."""
        wanted = TOPIC_TYPES.get(kind)
        return self.kind == kind if wanted is None else self.attrs.message_type is wanted


async def topics(addresses: str, timeout: float) -> list[TopicRow]:
    """topicList: every topic the controllers know, its queues and consumer groups."""
    ask = TopicListQuery(cluster=None)
    resp = await call_controllers(addresses, ask.code, *ask.encode(), timeout=timeout)
    try:
        listed = TopicList.parse(resp.header, resp.body)
    except FieldError as exc:
        raise ClientError(f"malformed topic list: {exc}") from None
    async with TopicAdmin(addresses, timeout) as admin:
        try:
            groups = await admin.consumer_groups()
        except ClientError:
            groups = {}
    return [
        TopicRow(
            t.topic,
            topic_kind(t.topic),
            t.cluster,
            sum(t.queues.values()),
            dict(t.queues),
            groups.get(t.topic, []),
            t.summary,
        )
        for t in sorted(listed.topics, key=lambda t: t.topic)
    ]


async def static_topics(addresses: str, topics: list[str], timeout: float) -> set[str]:
    """The static topics among ``topics``: those whose route carries a logical queue mapping
    (``updateStaticTopic``; one route lookup each, asked only when the page filters by it)."""
    async with ProgressAdmin(addresses, timeout) as admin:
        return set(await admin.mappings(topics))


async def topic_detail(addresses: str, topic: str, timeout: float) -> dict[str, Any]:
    """topicRoute and topicStatus: the route's broker groups and each queue's offsets."""
    async with TopicAdmin(addresses, timeout) as admin:
        route = await admin.topic_route(topic)
        if route.brokers and not any(b.master_address or b.slaves for b in route.brokers):
            # Its broker groups are in the route with no broker registered: nothing to ask.
            note = (
                "No broker of "
                + ", ".join(sorted(b.broker_name for b in route.brokers))
                + " is registered with the controllers (every one is down, or cut off from "
                "them): the queues' offsets are known only to those brokers."
            )
            return {"route": route, "queues": [], "notes": [note]}
        status: list[tuple[str, QueueStatus]] = await admin.topic_status(topic, route)
    return {"route": route, "queues": status, "notes": []}


# --- consumer groups ------------------------------------------------------------------------------


@dataclass(slots=True)
class GroupRow:
    group: str
    lag: int
    queues: int
    tps: float = 0.0
    """How fast its committed offsets move, messages a second over every topic and broker
    group (statsAll's Out TPS of the group)."""


#: rows on one page of the groups page (a cluster with thousands of groups is read in pages)
GROUPS_PER_PAGE: Final = 100

GROUP_SORTS: Final = ("lag", "tps", "group")
"""The orders the groups page offers: most behind first, busiest first, by name."""


async def consume_tps(addresses: str) -> tuple[dict[str, float], list[str]]:
    """Each consumer group's consume TPS added up over its topics and the masters (statsAll's
    figures), and a note per broker group that could not be asked."""
    async with Admin(addresses) as admin:
        brokers = masters(await admin.cluster_info(), None)
    ask = StatsQuery()
    answers = await ask_each(
        brokers, ask.code, *ask.encode(), lambda frame: StatsData.parse(frame.header, frame.body)
    )
    tps: dict[str, float] = {}
    for row in merge_stats([a for a in answers if isinstance(a, StatsData)]).values():
        for group, rate in row.groups.items():
            tps[group] = tps.get(group, 0.0) + rate
    return tps, [f"TPS: {why}" for why in failures(brokers, answers)]


async def groups(
    addresses: str, timeout: float, sort: str = "lag"
) -> tuple[list[GroupRow], list[str]]:
    """consumerProgress without -g: every group with its total lag and its consume TPS, in the
    order ``sort`` names (:data:`GROUP_SORTS`; most behind first by default), and the notes
    (broker groups asked at a slave, or not at all)."""
    async with ProgressAdmin(addresses, timeout) as admin:
        try:
            answers = await admin.consume_stats(None, None)
        except NoBrokerRegistered as exc:
            return [], [f"{exc}: the consumer groups and their offsets are known only to them."]
    tps, tps_notes = await consume_tps(addresses)
    notes = (
        source_notes(answers)
        + not_opened_notes(not_opened(answers))
        + [f"{a.target.broker_name}: {a.error}" for a in answers if a.error is not None]
        + tps_notes
    )
    totals = group_totals(progress_rows(answers))
    rows = [GroupRow(g, lag, q, tps.get(g, 0.0)) for g, (lag, q) in totals.items()]
    if sort == "tps":
        rows.sort(key=lambda r: (-r.tps, r.group))
    elif sort == "group":
        rows.sort(key=lambda r: r.group)
    else:
        rows.sort(key=lambda r: (-r.lag, r.group))
    return rows, notes


@dataclass(slots=True)
class GroupView:
    group: str
    rows: list[ProgressRow]
    holders: dict[tuple[str, str, int], str]
    members: list[Member]
    notes: list[str]
    #: broker name -> the group's settings there (getSubGroup; None: the defaults)
    settings: dict[str, dict[str, Any] | None] = field(default_factory=dict)
    #: no broker is registered with the controllers: nothing about the group could be read
    unregistered: bool = False

    @property
    def total_lag(self) -> int:
        return sum(r.lag for r in self.rows if not r.no_master)

    @property
    def topics(self) -> list[str]:
        return sorted({r.topic for r in self.rows if not r.topic.startswith("%RETRY%")})

    @property
    def poppers(self) -> int:
        """How many live members consume by POP (they hold no queue)."""
        return sum(1 for m in self.members if m.pops)

    @property
    def pop_topics(self) -> set[str]:
        """The topics POP members read (every queue of them, none held): theirs and the
        group's retry topic."""
        topics = {m.topic for m in self.members if m.pops}
        return topics | {retry_topic(self.group)} if topics else set()


async def group_detail(addresses: str, group: str, timeout: float) -> GroupView:
    """consumerProgress -g and consumerConnection: per-queue lag, the member holding each queue
    (POP members hold none), the live members. ``GroupNotFoundError`` when every broker group
    answered and none knows the group (``Admin.require_group``; while no broker is registered,
    whether it exists is not known: a view saying so)."""
    async with ProgressAdmin(addresses, timeout) as admin:
        try:
            answers = await admin.consume_stats(group, None)
        except NoBrokerRegistered as exc:
            why = f"{exc}: the group's offsets, members and settings are known only to them."
            return GroupView(group, [], {}, [], [why], unregistered=True)
        topics = {q.topic for a in answers if a.stats for qs in a.stats.groups.values() for q in qs}
        mappings = await admin.mappings(topics)
        members, errors = await admin.members(group)
        held = allocation(members, await admin.queues([m.topic for m in members]))
    async with Admin(addresses, timeout) as settings_admin:
        try:
            settings = await settings_admin.get_sub_group(group)
        except ClientError as exc:
            settings, errors = {}, {**errors, "settings": str(exc)}
        rows = logical_rows(progress_rows(answers), mappings)
        unasked = (
            bool(errors)
            or any(a.error is not None for a in answers)
            or bool(not_opened(answers))  # its topics there not read yet: it may well exist
        )
        configured = any(v is not None for v in settings.values())
        if not rows and not members and not configured and not unasked:
            await settings_admin.require_group(group)  # its retry or dead-letter topic, say
    holders = {
        (mq_topic, q.broker_name, q.queue_id): client_id
        for client_id, queues in held.items()
        for q in queues
        for mq_topic in [next((m.topic for m in members if m.client_id == client_id), "")]
    }
    notes = (
        source_notes(answers)
        + not_opened_notes(not_opened(answers))
        + [f"{n}: {why}" for n, why in sorted(errors.items())]
    )
    return GroupView(group, rows, holders, members, notes, settings)


async def dead_letters(
    addresses: str, group: str, timeout: float
) -> dict[str, list[dict[str, Any]]]:
    """queryDLQ: broker name -> the group's dead letters there. ``GroupNotFoundError`` when
    there are none and the group does not exist (a deleted group's dead letters are still
    shown)."""
    async with Admin(addresses, timeout) as admin:
        found = await admin.query_dlq(group)
        if not any(found.values()):
            await admin.require_group(group)
    return found


# --- messages -------------------------------------------------------------------------------------

#: at most this many messages a search shows (a time range is bounded by it)
MAX_FOUND: Final = 100
#: the body bytes a message's page shows
PREVIEW_BYTES: Final = 64 * 1024


@dataclass(slots=True)
class MessageView:
    found: FoundMessage
    body_kind: str
    body_text: str
    trace: list[tuple[object, ...]]
    trace_note: str


def body_preview(body: bytes) -> tuple[str, str]:
    """("JSON", pretty-printed) for a JSON body, ("text", text) for UTF-8 text, else ("binary",
    hex); at most :data:`PREVIEW_BYTES` of it, saying so when cut."""
    cut = len(body) > PREVIEW_BYTES
    head = body[:PREVIEW_BYTES]
    more = f"\n... ({len(body) - PREVIEW_BYTES} more bytes)" if cut else ""
    try:
        text = head.decode()
    except UnicodeDecodeError:
        if not cut:
            return "binary", _hex(head)
        try:  # a cut through a multi-byte character
            text = head[:-3].decode() + head[-3:].decode(errors="ignore")
        except UnicodeDecodeError:
            return "binary", _hex(head) + more
    if not cut:
        try:
            return "JSON", json.dumps(json.loads(text), indent=2, ensure_ascii=False)
        except ValueError:
            pass
    return "text", text + more


def _hex(data: bytes) -> str:
    return "\n".join(f"{i:08x}  {data[i : i + 16].hex(' ')}" for i in range(0, len(data), 16))


async def find_messages(
    addresses: str, topic: str, key: str, begin_ms: int, end_ms: int, timeout: float
) -> tuple[list[FoundMessage], bool, list[str]]:
    """A topic's messages with ``key`` (queryMsgByKey: the newest, as the brokers' key index
    answers), or without a key stored in the range (queryMsgByTime: the oldest); at most
    :data:`MAX_FOUND`, oldest first, whether there were more, and the broker groups that could
    not be asked."""
    errors: list[str] = []
    async with RangeReader(addresses, timeout) as reader:
        if key:
            # One more than shown from each broker group: a group that holds more says so.
            found = await reader.by_key(
                topic, key, begin_ms=begin_ms, end_ms=end_ms, max_num=MAX_FOUND + 1, errors=errors
            )
            more = len(found) > MAX_FOUND
            found = found[-MAX_FOUND:] if more else found
        else:
            found, more = await reader.by_time(
                topic, begin_ms, end_ms, max_num=MAX_FOUND, errors=errors
            )
    return found, more, errors


async def message(addresses: str, msg_id: str, topic: str | None, timeout: float) -> MessageView:
    """queryMsgById and queryMsgTraceById: the message, its body previewed, its timeline."""
    async with Lookup(addresses, timeout) as lookup:
        found = await lookup.by_id(msg_id, topic or None)
        errors: list[str] = []
        try:
            steps = await query_trace(lookup, msg_id, errors=errors)
        except (ClientError, RemotingError) as exc:
            steps, errors = [], [_why(exc)]
    kind, text = body_preview(found.record.body)
    if steps:
        note = "; ".join(errors)
    else:
        note = "no trace record (traces are off, or not written yet)" + (
            f": {'; '.join(errors)}" if errors else ""
        )
    return MessageView(found, kind, text, [trace_row(s.record) for s in steps], note)


# --- users and rules ------------------------------------------------------------------------------


async def users_and_rules(
    addresses: str, timeout: float
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """listUser and listAcl: every user (never a secret) and every user's rules."""
    docs = []
    for ask in (ListUsers(), ListAcl()):
        resp = await call_controllers(addresses, ask.code, *ask.encode(), timeout=timeout)
        key = "users" if isinstance(ask, ListUsers) else "acls"
        raw = answer_body(resp, key)
        if not isinstance(raw, dict) or not isinstance(raw.get(key), list):
            raise ClientError(f"malformed {key} answer")
        docs.append(raw[key])
    users, acls = docs
    return users, acls


@dataclass(frozen=True, slots=True)
class MappingItem:
    """One item of a static topic's logical queue (staticTopicMapping's row)."""

    queue_id: int
    generation: int
    broker_name: str
    physical_queue: int
    logical_start: int
    logical_end: int | None
    physical_start: int


async def static_mapping(addresses: str, topic: str, timeout: float) -> list[MappingItem]:
    """staticTopicMapping: each logical queue's items, oldest first."""
    doc = await mapping_of(addresses, topic, timeout)
    try:
        return [
            MappingItem(
                q["queueId"],
                i["generation"],
                i["brokerName"],
                i["physicalQueue"],
                i["logicalStart"],
                i["logicalEnd"],
                i["physicalStart"],
            )
            for q in doc["queues"]
            for i in q["items"]
        ]
    except (KeyError, TypeError) as exc:
        raise ClientError(f"malformed static topic mapping ({exc})") from None


# --- firing alerts (Prometheus) -----------------------------------------------------------------


@dataclass(slots=True)
class Alert:
    """One alert Prometheus reports firing (``GET /api/v1/alerts``)."""

    name: str
    severity: str
    #: the labels that say where (broker_name, instance, ...), without alertname and severity
    where: str
    summary: str
    since: str


@dataclass(slots=True)
class Alerts:
    """The firing alerts of the Prometheus at ``url``, or why they could not be read."""

    url: str
    firing: list[Alert] = field(default_factory=list)
    pending: int = 0
    error: str | None = None


def parse_alerts(url: str, doc: Any) -> Alerts:
    """Prometheus's documented answer (``{"status": "success", "data": {"alerts": [...]}}``,
    each alert with labels, annotations, state and activeAt): the firing ones, critical first,
    and how many are pending."""
    out = Alerts(url)
    if not isinstance(doc, dict) or doc.get("status") != "success":
        error = doc.get("error") if isinstance(doc, dict) else None
        out.error = f"Prometheus at {url} answered no alerts: {error or 'not its API answer'}"
        return out
    data = doc.get("data")
    raw = data.get("alerts") if isinstance(data, dict) else None
    if not isinstance(raw, list):
        out.error = f"Prometheus at {url} answered no alert list"
        return out
    for item in raw:
        if not isinstance(item, dict):
            continue
        if item.get("state") == "pending":
            out.pending += 1
        if item.get("state") != "firing":
            continue
        labels = _table(item.get("labels"))
        notes = _table(item.get("annotations"))
        where = ", ".join(
            f"{k}={v}" for k, v in sorted(labels.items()) if k not in ("alertname", "severity")
        )
        out.firing.append(
            Alert(
                name=str(labels.get("alertname", "?")),
                severity=str(labels.get("severity", "")),
                where=where,
                summary=str(notes.get("summary") or notes.get("description") or ""),
                since=str(item.get("activeAt", ""))[:19].replace("T", " "),
            )
        )
    rank = {"critical": 0, "warning": 1}
    out.firing.sort(key=lambda a: (rank.get(a.severity, 2), a.name, a.where))
    return out


def _table(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _get_json(url: str, timeout: float) -> Any:
    request = urllib.request.Request(url, headers={"Accept": "application/json"})
    with urllib.request.urlopen(request, timeout=timeout) as resp:
        return json.loads(resp.read(4 << 20))


async def firing_alerts(prometheus_url: str, timeout: float) -> Alerts:
    """The alerts firing on the Prometheus at ``prometheus_url`` (config key prometheus_url);
    one that cannot be reached or answers something else is an :class:`Alerts` with its error
    (the cluster page still shows)."""
    base = prometheus_url.rstrip("/")
    try:
        doc = await asyncio.to_thread(_get_json, f"{base}/api/v1/alerts", timeout)
    except urllib.error.HTTPError as exc:
        return Alerts(prometheus_url, error=f"Prometheus at {prometheus_url}: HTTP {exc.code}")
    except (OSError, ValueError) as exc:
        why = exc.reason if isinstance(exc, urllib.error.URLError) else exc
        return Alerts(prometheus_url, error=f"Prometheus at {prometheus_url} did not answer: {why}")
    return parse_alerts(prometheus_url, doc)
