"""Controller commands: getControllerMetaData, getSyncStateSet, electMaster, getBrokerEpoch,
cleanBrokerMetadata, getControllerConfig, addController, removeController,
transferControllerLeader.

Requests go to whichever controller answers, following CONTROLLER_NOT_LEADER (2007) to the
leader; each command's help gives the JSON document it prints.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

import click

from client.bootstrap import describe_failure, parse_addresses
from client.errors import ClientError
from protocol.broker_requests.runtime import EpochCache, EpochCacheQuery
from protocol.controller_requests.base import ControllerRequest
from protocol.controller_requests.brokers import CleanBrokerData
from protocol.controller_requests.groups import (
    ElectMaster,
    GetMetadataInfo,
    GetSyncStateData,
    ReplicaEntry,
)
from protocol.controller_requests.membership import (
    AddController,
    ControllerConfigQuery,
    RemoveController,
    TransferLeader,
)
from protocol.fields import FieldError
from protocol.remoting import Scalar
from remoting.client import ConnectionPool
from remoting.errors import RemotingError, ResponseError
from rmqctl.common import CommandError, Settings, addresses_option, emit, pass_settings, run, table
from rmqctl.controller_calls import TIMEOUT, answer_body, call_controllers, group_replicas

MEMBERSHIP_TIMEOUT = 20.0
METADATA_KEYS = ("group", "leaderId", "leaderAddress", "term", "peers")


def _roles(raw: Mapping[str, Any], unreachable: Mapping[str, str]) -> dict[str, str]:
    """node id -> its role: ``unreachable`` when it did not answer at its address (whatever
    the membership says), else ``leader``, ``learner`` or ``follower`` as the answering
    controller's membership says."""
    leader = raw.get("leaderId")
    learners = set(raw.get("learners") or ())
    peers: Mapping[str, str] = raw.get("peers") or {}
    return {
        node_id: "unreachable"
        if node_id in unreachable
        else "leader"
        if node_id == leader
        else "learner"
        if node_id in learners
        else "follower"
        for node_id in sorted(peers)
    }


def _metadata_doc(raw: Any, unreachable: Mapping[str, str]) -> dict[str, Any]:
    if not isinstance(raw, dict):
        raise ClientError("malformed controller metadata")
    return {key: raw.get(key) for key in METADATA_KEYS} | {
        "roles": _roles(raw, unreachable),
        "unreachable": dict(sorted(unreachable.items())),
        "lostLog": dict(sorted((raw.get("lostLog") or {}).items())),
    }


def _metadata_human(raw: Mapping[str, Any], unreachable: Mapping[str, str]) -> str:
    leader = raw.get("leaderId")
    peers: Mapping[str, str] = raw.get("peers") or {}
    lost: Mapping[str, int] = raw.get("lostLog") or {}

    def shown(node_id: str, role: str) -> str:
        if role == "unreachable":
            return f"unreachable: {unreachable[node_id]}"
        if node_id in lost:
            return (
                f"{role}, LOST ITS LOG (now ends at entry {lost[node_id]}): remove it and add "
                "it back under a new id"
            )
        return role

    rows = [
        [node_id, peers[node_id], shown(node_id, role)]
        for node_id, role in _roles(raw, unreachable).items()
    ]
    head = (
        f"Group: {raw.get('group')}  Term: {raw.get('term')}  "
        f"Leader: {leader or '-'} ({raw.get('leaderAddress') or 'unknown'})"
    )
    return head + "\n" + table(["ID", "Address", "Role"], rows)


async def _ask(address: str) -> tuple[str | None, Any]:
    """Why the controller at ``address`` did not answer CONTROLLER_GET_METADATA_INFO (None: it
    did; a refusal is an answer too), and its metadata answer (None when there was none)."""
    if not address:
        return "no address known", None
    pool = ConnectionPool(TIMEOUT)
    try:
        conn = await pool.get(address)
        ask = GetMetadataInfo()
        resp = await conn.call(ask.code, *ask.encode(), timeout=TIMEOUT)
    except ResponseError:
        return None, None
    except (RemotingError, ValueError) as exc:
        return describe_failure(exc), None
    finally:
        pool.close()
    try:
        return None, answer_body(resp, "controller metadata")
    except ClientError:
        return None, None


async def member_answers(raw: Any) -> tuple[dict[str, str], dict[str, Any]]:
    """For the members of ``raw`` (a metadata answer): node id -> why it did not answer at its
    address, and node id -> its own metadata answer; the node that gave ``raw`` (its
    ``self``) is not asked again. The membership is the Raft configuration, which lists a dead
    member as long as it is not removed: only asking each one tells a live follower from a
    dead one (as rmq-console's cluster page does)."""
    if not isinstance(raw, dict):
        return {}, {}
    peers: Mapping[str, str] = raw.get("peers") or {}
    asked = sorted(node_id for node_id in peers if node_id != raw.get("self"))
    found = await asyncio.gather(*(_ask(peers[node_id]) for node_id in asked))
    unreachable = {n: why for n, (why, _) in zip(asked, found, strict=True) if why is not None}
    answers = {n: doc for n, (_, doc) in zip(asked, found, strict=True) if doc is not None}
    return unreachable, answers


async def controller_metadata(
    addresses: str,
    code: int,
    header: Mapping[str, Scalar] | None,
    body: bytes | None,
    timeout: float,
) -> tuple[Any, dict[str, str]]:
    """The controllers' metadata answer to the request (CONTROLLER_GET_METADATA_INFO or a
    membership change), and its members that do not answer (:func:`member_answers`). Its
    ``lostLog`` is the leader's (a follower's answer has none to give)."""
    resp = await call_controllers(addresses, code, header, body, timeout=timeout)
    raw = answer_body(resp, "controller metadata")
    unreachable, answers = await member_answers(raw)
    leader = answers.get(str(raw.get("leaderId"))) if isinstance(raw, dict) else None
    if isinstance(leader, dict):  # only the leader knows which members lost their log
        raw = raw | {"lostLog": leader.get("lostLog") or {}}
    return raw, unreachable


def _sync_state_human(doc: Mapping[str, Any]) -> str:
    master = doc.get("masterBrokerId")
    head = (
        f"Broker: {doc.get('brokerName')}  Master: {master if master is not None else '-'} "
        f"({doc.get('masterAddress') or 'none'})  MasterEpoch: {doc.get('masterEpoch')}  "
        f"SyncStateSet: {doc.get('syncStateSet')} (epoch {doc.get('syncStateSetEpoch')})"
    )
    rows = [
        [
            r["brokerId"],
            r["address"],
            "MASTER" if r["brokerId"] == master else "SLAVE",
            "yes" if r["alive"] else "no",
            "yes" if r["inSync"] else "no",
        ]
        for r in doc.get("replicas") or ()
    ]
    return head + "\n" + table(["BID", "Address", "Role", "Alive", "InSync"], rows)


async def sync_state(addresses: str, broker_name: str) -> dict[str, Any]:
    """getSyncStateSet's document for ``broker_name``, from the controllers."""
    ask = GetSyncStateData(broker_name=broker_name)
    resp = await call_controllers(addresses, ask.code, *ask.encode())
    doc = answer_body(resp, "sync state")
    if not isinstance(doc, dict):
        raise ClientError("malformed sync state answer")
    return doc


broker_name_option = click.option(
    "-b", "--broker-name", required=True, metavar="NAME", help="Broker group name."
)


@click.command("getControllerMetaData", short_help="Show the controller group and its leader.")
@addresses_option
@pass_settings
def get_controller_metadata(settings: Settings, addresses: str) -> None:
    """Show the Raft group of the controllers: its leader, term and members, each with its
    role. Every member is asked at its address: one that does not answer (dead, or cut off)
    is shown as "unreachable: REASON", not by the role the membership gives it (the Raft
    configuration keeps listing a dead controller until it is removed).

    A member the leader found without entries it had acknowledged (it lost its data
    directory and was started again under its old id) is marked LOST ITS LOG: remove it and
    add it back under a new id (docs/operations.md).

    Prints {"group", "leaderId", "leaderAddress", "term", "peers": {id: addr}, "roles": {id:
    "leader"|"follower"|"learner"|"unreachable"}, "unreachable": {id: reason}, "lostLog":
    {id: the index its log now ends at}}.
    """
    ask = GetMetadataInfo()
    raw, unreachable = run(controller_metadata(addresses, ask.code, *ask.encode(), timeout=TIMEOUT))
    emit(settings, _metadata_doc(raw, unreachable), lambda: _metadata_human(raw, unreachable))


@click.command("getSyncStateSet", short_help="Show a broker group's master and SyncStateSet.")
@addresses_option
@broker_name_option
@pass_settings
def get_sync_state_set(settings: Settings, addresses: str, broker_name: str) -> None:
    """Show a broker group's master, epochs, SyncStateSet and replicas (alive, in sync).

    Prints {"brokerName", "masterBrokerId", "masterAddress", "masterEpoch",
    "syncStateSetEpoch", "syncStateSet", "replicas": [{"brokerId", "address", "alive",
    "inSync"}]}.
    """
    doc = run(sync_state(addresses, broker_name))
    emit(settings, doc, lambda: _sync_state_human(doc))


@click.command(
    "electMaster", short_help="Move a broker group's master (to a given broker, or the best other)."
)
@addresses_option
@broker_name_option
@click.option(
    "-i",
    "--broker-id",
    type=int,
    default=None,
    metavar="ID",
    help="The broker to make master (default: the controller's choice, the best alive "
    "SyncStateSet member other than the current master).",
)
@click.option(
    "--force",
    is_flag=True,
    help="With -i: elect the broker even though it reports CommitLog damage no replica could "
    "repair (its reads of those records fail).",
)
@pass_settings
def elect_master(
    settings: Settings, addresses: str, broker_name: str, broker_id: int | None, force: bool
) -> None:
    """Run an election for a broker group. With -i the named broker must be a candidate
    (alive, and in the SyncStateSet unless unclean election is enabled), and one that reports
    damaged CommitLog records it could not repair is refused, saying so, unless --force. Without
    -i it is a planned switch: the controller moves an alive master's role to the best alive
    SyncStateSet member other than it (one without unrepaired damage first, then highest
    epoch, then most data, then lowest election_priority), and fails naming why when there is
    none (the master stays); a group without a live master gets the best candidate.

    Prints the getSyncStateSet document after the election.
    """

    async def work() -> dict[str, Any]:
        if force and broker_id is None:
            raise click.UsageError("--force needs -i: only an election naming a broker is forced")
        ask = ElectMaster(
            broker_name=broker_name,
            designated=broker_id,
            planned_switch=broker_id is None,
            force=force,
        )
        await call_controllers(addresses, ask.code, *ask.encode())
        return await sync_state(addresses, broker_name)

    doc = run(work())
    emit(settings, doc, lambda: _sync_state_human(doc))


@click.command("getBrokerEpoch", short_help="Show every replica's epoch entries and offsets.")
@addresses_option
@broker_name_option
@pass_settings
def get_broker_epoch(settings: Settings, addresses: str, broker_name: str) -> None:
    """Ask the controllers for a group's replicas, then each broker for its epoch cache.

    Prints [{"brokerId", "address", "role", "maxOffset", "confirmOffset", "epochs":
    [{"epoch", "startOffset", "endOffset"}]}]; a broker that cannot be reached, or whose address
    answers as another broker id (its successor there), has an "error" field instead of figures.
    """
    docs = run(replica_epochs(addresses, broker_name))
    emit(settings, docs, lambda: _epochs_human(docs))


async def replica_epochs(addresses: str, broker_name: str) -> list[dict[str, Any]]:
    """getBrokerEpoch's documents: the group's replicas from the controllers, then each
    broker's epoch cache (:func:`epoch_cache`)."""
    replicas = await group_replicas(addresses, broker_name)
    pool = ConnectionPool(TIMEOUT)
    try:
        return list(await asyncio.gather(*(epoch_cache(pool, r) for r in replicas)))
    finally:
        pool.close()


async def epoch_cache(pool: ConnectionPool, replica: ReplicaEntry) -> dict[str, Any]:
    """One replica's getBrokerEpoch document (an "error" field when it could not be asked)."""
    address = replica.address
    doc: dict[str, Any] = {
        "brokerId": replica.broker_id,
        "address": address,
        "role": None,
        "maxOffset": None,
        "confirmOffset": None,
        "epochs": [],
    }
    if not address:
        return doc | {"error": "no address registered"}
    try:
        conn = await pool.get(address)
        ask = EpochCacheQuery()
        resp = await conn.call(ask.code, *ask.encode(), timeout=TIMEOUT)
        cache = EpochCache.parse(resp.header, resp.body)
    except ResponseError as exc:
        return doc | {"error": str(exc)}
    except RemotingError as exc:
        return doc | {"error": describe_failure(exc)}
    except FieldError as exc:
        return doc | {"error": f"malformed epoch cache answer: {exc}"}
    if cache.broker_id != replica.broker_id:
        # Another broker serves there now (a replica whose data directory was wiped came back
        # under a new id): its figures are its own row's, not this dead id's.
        return doc | {
            "error": f"{address} answers as broker {cache.broker_id}, not {replica.broker_id}"
        }
    return doc | {
        "role": "MASTER" if cache.master else "SLAVE",
        "maxOffset": cache.max_offset,
        "confirmOffset": cache.confirm_offset,
        "epochs": [e.to_dict() for e in cache.epochs],
    }


def _epochs_human(docs: list[dict[str, Any]]) -> str:
    rows = []
    for d in docs:
        if "error" in d:
            rows.append([d["brokerId"], d["address"], "-", "-", "-", f"error: {d['error']}"])
            continue
        epochs = ", ".join(
            f"{e.get('epoch')}@{e.get('startOffset')}-{e.get('endOffset')}"
            for e in d.get("epochs") or ()
        )
        rows.append(
            [d["brokerId"], d["address"], d["role"], d["maxOffset"], d["confirmOffset"], epochs]
        )
    return table(["BID", "Address", "Role", "MaxOffset", "ConfirmOffset", "Epochs"], rows)


@click.command("cleanBrokerMetadata", short_help="Forget dead brokers (or a dead group).")
@addresses_option
@broker_name_option
@click.option(
    "-i",
    "--broker-ids",
    default="",
    metavar='"1;2"',
    help="Broker ids to forget, ';'-separated (default: the whole group).",
)
@click.option("-c", "--cluster", default=None, metavar="CLUSTER", help="The group's cluster.")
@click.option(
    "-l",
    "--clean-living-broker",
    is_flag=True,
    help="Allow forgetting a whole group that still names its (dead) master. "
    "A living broker is never forgotten.",
)
@pass_settings
def clean_broker_metadata(
    settings: Settings,
    addresses: str,
    broker_name: str,
    broker_ids: str,
    cluster: str | None,
    clean_living_broker: bool,
) -> None:
    """Remove brokers (or with no -i the whole group) from the controllers' metadata.

    Prints "cleaned NAME IDS" ("(all)" without -i); with --json {"ok": true}.
    """
    ids = [p.strip() for p in broker_ids.split(";") if p.strip()]
    if not all(p.isdigit() for p in ids):
        raise click.BadParameter("must be broker ids separated by ';'", param_hint="-i")

    async def work() -> None:
        ask = CleanBrokerData(
            broker_name=broker_name,
            cluster=cluster or None,
            broker_ids=frozenset(int(i) for i in ids) or None,
            clean_living_broker=clean_living_broker,
        )
        await call_controllers(addresses, ask.code, *ask.encode())

    run(work())
    emit(settings, {"ok": True}, lambda: f"cleaned {broker_name} {';'.join(ids) or '(all)'}")


@click.command("getControllerConfig", short_help="Show every controller's configuration.")
@addresses_option
@pass_settings
def get_controller_config(settings: Settings, addresses: str) -> None:
    """Ask every controller of -a for its configuration.

    Prints {address: {key: value}}; a controller that cannot be reached has {"error": reason}.
    Fails when none answers.
    """

    async def one(address: str) -> dict[str, Any]:
        pool = ConnectionPool(TIMEOUT)
        try:
            conn = await pool.get(address)
            ask = ControllerConfigQuery()
            resp = await conn.call(ask.code, *ask.encode(), timeout=TIMEOUT)
        except ResponseError as exc:
            return {"error": str(exc)}
        except (RemotingError, ValueError) as exc:
            return {"error": describe_failure(exc)}
        finally:
            pool.close()
        doc = answer_body(resp, "controller config")
        return doc if isinstance(doc, dict) else {"error": "malformed answer"}

    async def work() -> dict[str, dict[str, Any]]:
        targets = parse_addresses(addresses)
        found = await asyncio.gather(*(one(a) for a in targets))
        return dict(zip(targets, found, strict=True))

    docs = run(work())
    if all("error" in d for d in docs.values()):
        reasons = "; ".join(f"{a}: {d['error']}" for a, d in docs.items())
        raise CommandError(f"no controller answered: {reasons}")

    def human() -> str:
        parts = []
        for address, doc in docs.items():
            parts.append(f"== {address} ==")
            if "error" in doc:
                parts.append(f"error: {doc['error']}")
            else:
                parts.append(table(["Key", "Value"], [[k, doc[k]] for k in sorted(doc)]))
        return "\n".join(parts)

    emit(settings, docs, human)


node_id_option = click.option("--id", "node_id", required=True, metavar="nX", help="Node id.")


def _membership(settings: Settings, addresses: str, ask: ControllerRequest) -> None:
    raw, unreachable = run(
        controller_metadata(addresses, ask.code, *ask.encode(), timeout=MEMBERSHIP_TIMEOUT)
    )
    emit(settings, _metadata_doc(raw, unreachable), lambda: _metadata_human(raw, unreachable))


@click.command("addController", short_help="Add a controller to the Raft group.")
@addresses_option
@node_id_option
@click.option("--address", required=True, metavar="HOST:PORT", help="The new controller's address.")
@click.option(
    "--force",
    is_flag=True,
    help="Add it even though no controller of that id answers at the address yet.",
)
@pass_settings
def add_controller(
    settings: Settings, addresses: str, node_id: str, address: str, force: bool
) -> None:
    """Add a controller (started with --join) as a learner; the leader promotes it to voter
    once it has caught up. Prints the getControllerMetaData document afterwards.

    The controller must answer at --address under --id first: a member added at an address
    where none answers (a typo, a controller not started yet) or where another id answers
    would be a member that never catches up, kept until removeController. --force skips
    the check."""
    if not force:
        run(_check_new_member(node_id, address))
    _membership(settings, addresses, AddController(node_id=node_id, address=address))


async def _check_new_member(node_id: str, address: str) -> None:
    why, doc = await _ask(address)
    if why is not None:
        raise CommandError(
            f"no controller answers at {address} ({why}): start {node_id} there first (an "
            "empty data directory, join = true), or add it anyway with --force; nothing was "
            "changed"
        )
    found = doc.get("self") if isinstance(doc, dict) else None
    if found is not None and found != node_id:
        raise CommandError(
            f"the controller at {address} is {found}, not {node_id}: check --id and "
            "--address; nothing was changed"
        )


@click.command("removeController", short_help="Remove a controller from the Raft group.")
@addresses_option
@node_id_option
@pass_settings
def remove_controller(settings: Settings, addresses: str, node_id: str) -> None:
    """Remove a controller from the Raft group (stop its process afterwards). Prints the
    getControllerMetaData document afterwards."""
    _membership(settings, addresses, RemoveController(node_id=node_id))


@click.command("transferControllerLeader", short_help="Hand Raft leadership to a controller.")
@addresses_option
@node_id_option
@pass_settings
def transfer_controller_leader(settings: Settings, addresses: str, node_id: str) -> None:
    """Make the named voter the leader (the active controller) once it has caught up.
    Prints the getControllerMetaData document afterwards."""
    _membership(settings, addresses, TransferLeader(node_id=node_id))
