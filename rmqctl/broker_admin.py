"""Broker commands: brokerStatus, getBrokerConfig, updateBrokerConfig.

A command names its brokers with ``-b ADDR`` (one broker) or ``-c CLUSTER`` (every broker of
the cluster, masters and slaves, as the controllers given with ``-a`` list them). Each broker is
asked on its own; one that cannot be asked or refuses is reported (its line, ``"error"`` in
``--json``) after the others' answers, and the exit status is then 1.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import click

from client.admin import Admin
from client.bootstrap import describe_failure
from client.errors import BrokerError, ClientError
from protocol.broker_requests.broker_config import (
    BrokerConfigChanged,
    BrokerConfigQuery,
    BrokerConfigTable,
    UpdateBrokerConfig,
)
from protocol.broker_requests.runtime import RuntimeInfo, RuntimeInfoQuery
from protocol.fields import FieldError
from protocol.remoting import Frame, Header
from remoting.client import ConnectionPool
from remoting.errors import RemotingError, ResponseError
from rmqctl.common import (
    CommandError,
    Settings,
    emit,
    json_option,
    one_cluster,
    pass_settings,
    run,
)

F = TypeVar("F", bound=Callable[..., Any])
A = TypeVar("A")

TIMEOUT = 10.0


@dataclass(frozen=True, slots=True)
class BrokerRef:
    """A broker to ask: its address, and its name and id when the controllers listed it."""

    address: str
    broker_name: str = ""
    broker_id: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"brokerName": self.broker_name, "brokerId": self.broker_id, "address": self.address}

    def label(self) -> str:
        if not self.broker_name:
            return self.address
        if self.broker_id is None:
            return f"{self.broker_name} {self.address}"
        return f"{self.broker_name} (id {self.broker_id}) {self.address}"


def broker_options(func: F) -> F:
    """``-b ADDR`` or ``-c CLUSTER`` (with ``-a``: the controllers listing the cluster), and
    ``--json`` also accepted after the command name."""
    for option in (
        json_option,
        click.option(
            "-a",
            "-n",
            "--addresses",
            "addresses",
            default=None,
            metavar="ADDRS",
            help="Controller addresses, ';'-separated, that list -c's brokers; -n is mqadmin's "
            "name for it (default: the global -a).",
        ),
        click.option(
            "-c", "--cluster", default=None, metavar="CLUSTER", help="Every broker of a cluster."
        ),
        click.option(
            "-b", "--broker-addr", "broker_addr", default=None, metavar="ADDR", help="A broker."
        ),
    ):
        func = option(func)
    return func


async def targets(
    addresses: str | None, broker_addr: str | None, cluster: str | None
) -> list[BrokerRef]:
    """The brokers ``-b`` or ``-c`` name, sorted by (broker name, id)."""
    if broker_addr is not None:
        return [BrokerRef(broker_addr)]
    assert cluster is not None
    if not addresses:
        raise ClientError("-c needs the controllers' addresses: give -a (or $RMQCTL_ADDRESSES)")
    async with Admin(addresses) as admin:
        clusters = await admin.cluster_info()
    brokers = sorted(one_cluster(clusters, cluster), key=lambda b: (b.broker_name, b.broker_id))
    return [BrokerRef(b.address, b.broker_name, b.broker_id) for b in brokers]


async def ask_targets(
    controllers: str | None,
    broker_addr: str | None,
    cluster: str | None,
    request: BrokerConfigQuery | UpdateBrokerConfig | RuntimeInfoQuery,
    parse: Callable[[Header, bytes | None], A],
) -> tuple[list[BrokerRef], list[A | str]]:
    """The brokers ``-b`` or ``-c`` name, and each one's answer to ``request`` read by
    ``parse`` (or the one-line reason it failed)."""
    brokers = await targets(controllers, broker_addr, cluster)

    def read(resp: Frame) -> A:
        return parse(resp.header, resp.body)

    return brokers, await ask_each(brokers, request.code, *request.encode(), read)


def chosen(
    settings: Settings, addresses: str | None, broker_addr: str | None, cluster: str | None
) -> str | None:
    """Check that exactly one of -b and -c is given (a usage error, exit 2, otherwise); the
    controllers' addresses for -c."""
    if (broker_addr is None) == (cluster is None):
        raise click.UsageError("give one of -b ADDR (a broker) or -c CLUSTER (all its brokers)")
    return addresses or settings.addresses


async def ask_each(
    brokers: Sequence[BrokerRef],
    code: int,
    header: Header,
    body: bytes | None,
    read: Callable[[Frame], A],
) -> list[A | str]:
    """Send one request to every broker at once: each answer read by ``read``, or the one-line
    reason it failed."""
    pool = ConnectionPool(TIMEOUT)

    async def one(ref: BrokerRef) -> A | str:
        try:
            conn = await pool.get(ref.address)
            return read(await conn.call(code, header, body, TIMEOUT))
        except ResponseError as exc:
            return str(BrokerError(exc.code, exc.remark))
        except RemotingError as exc:
            return describe_failure(exc)
        except FieldError as exc:
            return f"malformed answer: {exc}"

    try:
        return list(await asyncio.gather(*(one(b) for b in brokers)))
    finally:
        pool.close()


def failures(brokers: Sequence[BrokerRef], answers: Sequence[object]) -> list[str]:
    """One text per distinct failure: ``broker: why``, or ``why (on broker, broker)`` when
    several brokers failed alike (a refusal by every broker of -c reads once)."""
    by_error: dict[str, list[str]] = {}
    for b, a in zip(brokers, answers, strict=True):
        if isinstance(a, str):
            by_error.setdefault(a, []).append(b.label())
    return [
        f"{labels[0]}: {error}" if len(labels) == 1 else f"{error} (on {', '.join(labels)})"
        for error, labels in by_error.items()
    ]


def show_each(
    settings: Settings,
    asked: tuple[list[BrokerRef], list[A | str]],
    shown: Callable[[BrokerRef, A], tuple[dict[str, Any], str]],
    head: dict[str, Any] | None = None,
    between: str = "\n",
) -> None:
    """Print each broker's answer (``shown``: its document and its text) with ``head``'s keys
    before "brokers" (a failed broker has "error" instead of its document), the texts joined
    by ``between``; then exit 1 naming the failures, if any. A refusal by every broker is its
    one line alone."""
    brokers, answers = asked
    docs: list[dict[str, Any]] = []
    texts: list[str] = []
    for ref, answer in zip(brokers, answers, strict=True):
        if isinstance(answer, str):
            docs.append(ref.to_dict() | {"error": answer})
            continue
        doc, text = shown(ref, answer)
        docs.append(doc)
        texts.append(text)
    failed = failures(brokers, answers)
    if texts or not failed:
        emit(settings, (head or {}) | {"brokers": docs}, lambda: between.join(texts))
    if failed:
        raise CommandError("; ".join(failed))


def _value_text(value: object) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


@click.command("getBrokerConfig", short_help="Show a broker's configuration (-b or -c).")
@broker_options
@pass_settings
def get_broker_config(
    settings: Settings, addresses: str | None, broker_addr: str | None, cluster: str | None
) -> None:
    """Show every config key of a broker (-b ADDR) or of every broker of a cluster (-c CLUSTER,
    listed by the controllers of -a) with its value now: what the broker read at start-up from
    its config file and flags, with the changes updateBrokerConfig made (kept in the broker's
    data directory, config/liveConfig.json). Keys marked "live" can be changed without a
    restart (docs/config-reference.md); a key changed live says so, with when, by whom and its
    value from the config file (the start value). Exit status 1 when a broker could not be asked
    (the others are printed first).

    Prints {"brokers": [{"brokerName", "brokerId", "address", "configFile", "liveFile",
    "liveKeys", "config": {key: value}, "changedLive": {key: {"startValue", "setAt",
    "setBy"}}}]}; a broker that failed has "error" instead of its figures.
    """
    controllers = chosen(settings, addresses, broker_addr, cluster)

    def shown(ref: BrokerRef, answer: BrokerConfigTable) -> tuple[dict[str, Any], str]:
        doc = ref.to_dict() | {
            "configFile": answer.config_file,
            "liveFile": answer.live_file,
            "liveKeys": list(answer.live_keys),
            "config": dict(answer.config),
            "changedLive": {k: c.to_dict() for k, c in answer.changed_live.items()},
        }
        head = f"# {ref.label()}, config file: {answer.config_file or '(none)'}"
        if answer.live_file is not None:
            head += f", live changes: {answer.live_file}"
        lines = [head]
        width = max((len(k) for k in answer.config), default=0)
        live = set(answer.live_keys)
        for key in sorted(answer.config):
            mark = "  (live)" if key in live else ""
            change = answer.changed_live.get(key)
            if change is not None:
                mark = (
                    f"  (live; changed live {change.set_at} by {change.set_by}, start value "
                    f"{_value_text(change.start_value)})"
                )
            lines.append(f"{key.ljust(width)} = {_value_text(answer.config[key])}{mark}")
        return doc, "\n".join(lines)

    show_each(
        settings,
        run(
            ask_targets(
                controllers, broker_addr, cluster, BrokerConfigQuery(), BrokerConfigTable.parse
            )
        ),
        shown,
    )


def _kept_where(answer: BrokerConfigChanged) -> str:
    """Where a broker says it kept a change (an older broker: in its config file, or nowhere)."""
    if not answer.persisted:
        return "not written: the broker runs without --config, a restart forgets it"
    if answer.live_file is None:
        return f"written to {answer.config_file}"
    if answer.new == answer.start_value:
        return f"back to its start value: its entry removed from {answer.live_file}"
    return (
        f"kept in {answer.live_file}; start value {_value_text(answer.start_value)}, from the "
        "config file and flags"
    )


@click.command(
    "updateBrokerConfig", short_help="Change a broker's config key live (-b or -c, -k, -v)."
)
@broker_options
@click.option("-k", "--key", required=True, metavar="KEY", help="Config key (TOML name).")
@click.option("-v", "--value", required=True, metavar="VALUE", help="Its new value.")
@pass_settings
def update_broker_config(
    settings: Settings,
    addresses: str | None,
    broker_addr: str | None,
    cluster: str | None,
    key: str,
    value: str,
) -> None:
    """Change a config key of a broker (-b ADDR) or of every broker of a cluster (-c CLUSTER)
    while it runs. Each broker keeps the change in its data directory
    (config/liveConfig.json: the value, its start value from the config file and flags, when
    and by whom) so a restart keeps it; its config file is never written. A value set back to
    the start value removes the entry; at a restart, a config file (or flag) whose value for the
    key changed since wins over the live change, which is dropped.

    Only the keys docs/config-reference.md lists as live can change (getBrokerConfig marks
    them); another key is refused naming it and why it needs a restart, an unknown key is
    refused, and the value is checked as at start-up. With authentication on, only a super user
    may change a broker's config (NO_PERMISSION with the reason otherwise). A refusal changes
    nothing on that broker; exit status 1 when any broker refused or could not be asked.

    Prints {"key", "value", "brokers": [{"brokerName", "brokerId", "address", "old", "new",
    "startValue", "persisted", "liveFile", "configFile"}]} ("configFile": the file the change was
    written to, the live file; an older broker's config file); a broker that failed has "error"
    instead.
    """
    controllers = chosen(settings, addresses, broker_addr, cluster)

    update = UpdateBrokerConfig(key=key, value=value)

    def shown(ref: BrokerRef, answer: BrokerConfigChanged) -> tuple[dict[str, Any], str]:
        doc = ref.to_dict() | {
            "old": answer.old,
            "new": answer.new,
            "startValue": answer.start_value,
            "persisted": answer.persisted,
            "liveFile": answer.live_file,
            "configFile": answer.config_file,
        }
        line = (
            f"{ref.label()}: {key} {_value_text(answer.old)} -> {_value_text(answer.new)} "
            f"({_kept_where(answer)})"
        )
        return doc, line

    show_each(
        settings,
        run(ask_targets(controllers, broker_addr, cluster, update, BrokerConfigChanged.parse)),
        shown,
        head={"key": key, "value": value},
    )


def status_doc(info: RuntimeInfo) -> dict[str, Any]:
    """brokerStatus' figures of one broker, by the names --json prints."""
    return {
        "brokerName": info.broker_name,
        "cluster": info.cluster,
        "address": info.address,
        "brokerId": info.broker_id,
        "role": "MASTER" if info.master else "SLAVE",
        "masterEpoch": info.master_epoch,
        "fenced": info.fenced,
        "putTps": round(info.put_tps, 2),
        "getTps": round(info.get_tps, 2),
        "statsWindowMs": info.stats_window_ms,
        "putTotal": info.put_total,
        "getTotal": info.get_total,
        "minOffset": info.min_offset,
        "maxOffset": info.max_offset,
        "flushedOffset": info.flushed_offset,
        "confirmOffset": info.confirm_offset,
        "commitLogDiskRatio": (
            None if info.commitlog_disk_ratio is None else round(info.commitlog_disk_ratio, 4)
        ),
        "pageCacheLockMs": info.page_cache_lock_ms,
        "popInflight": info.pop_inflight,
        "timerPending": info.timer_pending,
        "timerOverdueMs": info.timer_overdue_ms,
        "pullsWaiting": info.pulls_waiting,
        "topics": info.topics,
        "connections": info.connections,
        "haAddress": info.ha_address,
        "grpcEndpoint": info.grpc_endpoint,
        "grpcTlsEndpoint": info.grpc_tls_endpoint,
    }


def _status_lines(doc: dict[str, Any]) -> list[str]:
    shown = dict(doc)
    if shown["pageCacheLockMs"] is None:
        shown["pageCacheLockMs"] = "not measured"
    window = doc["statsWindowMs"]
    for key in ("putTps", "getTps"):
        shown[key] = f"{doc[key]} (over {window / 1000:g} s)" if window else "- (sampling)"
    width = max(len(k) for k in shown)
    return [f"{k.ljust(width)} : {_value_text(v)}" for k, v in shown.items()]


@click.command(
    "brokerStatus", short_help="A broker's runtime figures: TPS, offsets, disk (-b or -c)."
)
@broker_options
@pass_settings
def broker_status(
    settings: Settings, addresses: str | None, broker_addr: str | None, cluster: str | None
) -> None:
    """Show a broker's runtime figures (-b ADDR), or every broker's of a cluster (-c CLUSTER,
    listed by the controllers of -a): role and master epoch, messages stored and served per
    second (put/get TPS over the last 10 s; "sampling" in the first seconds after a start) and
    in total since the start, the CommitLog's min, max, flushed and confirm offsets, the used
    share of the data directory's disk, POP deliveries in flight (a master's), scheduled
    messages pending and how late the timer's next due step is (0: on time), pulls parked,
    topics, connections and endpoints. The page cache lock time RocketMQ prints is not measured
    here (this broker takes no lock around its page cache writes). Exit status 1 when a broker
    could not be asked (the others are printed first).

    Prints {"brokers": [{"brokerName", "cluster", "address", "brokerId", "role",
    "masterEpoch", "fenced", "putTps", "getTps", "statsWindowMs", "putTotal", "getTotal",
    "minOffset", "maxOffset", "flushedOffset", "confirmOffset", "commitLogDiskRatio",
    "pageCacheLockMs", "popInflight", "timerPending", "timerOverdueMs", "pullsWaiting",
    "topics", "connections", "haAddress", "grpcEndpoint", "grpcTlsEndpoint"}]}; a broker that
    failed has "error" instead.
    """
    controllers = chosen(settings, addresses, broker_addr, cluster)

    def shown(ref: BrokerRef, answer: RuntimeInfo) -> tuple[dict[str, Any], str]:
        doc = status_doc(answer)
        return doc, "\n".join([f"# {ref.label()}", *_status_lines(doc)])

    show_each(
        settings,
        run(ask_targets(controllers, broker_addr, cluster, RuntimeInfoQuery(), RuntimeInfo.parse)),
        shown,
        between="\n\n",
    )
