"""The controllers' request codecs (protocol/controller_requests/): every request code round
trips through a real frame (hypothesis), a fixed request of each code encodes to the bytes the
callers sent before the codecs existed (so the wire does not move by accident), and bad fields
raise FieldError (InvalidRequest, with the code the controller answers, for refused values)."""

from __future__ import annotations

from typing import Any

import msgpack
import pytest
from hypothesis import given
from hypothesis import strategies as st

from protocol.acl import User, UserType, make_rule, resource_pattern
from protocol.codes import ResponseCode
from protocol.controller_requests.base import InvalidRequest, NotLeader
from protocol.controller_requests.brokers import (
    ApplyBrokerId,
    CleanBrokerData,
    GetNextBrokerId,
    NextBrokerIdAnswer,
    RegisterBroker,
)
from protocol.controller_requests.groups import (
    AlterSyncStateSet,
    AlterSyncStateSetAnswer,
    ElectMaster,
    GetMetadataInfo,
    GetReplicaInfo,
    GetSyncStateData,
    GroupMetadata,
    ReplicaEntry,
    RoleChanged,
)
from protocol.controller_requests.heartbeats import MAX_FIGURE, BrokerHeartbeat, HeartbeatAnswer
from protocol.controller_requests.membership import (
    AddController,
    ControllerConfigQuery,
    RemoveController,
    TransferLeader,
)
from protocol.controller_requests.producers import GetProducerId
from protocol.controller_requests.rebalance import RebalancePlanQuery, TrafficQuery
from protocol.controller_requests.static_topics import (
    CreateStaticTopic,
    RemapStaticTopic,
    StaticTopicMappingQuery,
)
from protocol.controller_requests.topics import (
    BrokerOutcome,
    ClusterInfoQuery,
    DeleteReport,
    DeleteSubGroup,
    DeleteTopic,
    RegisterRoutes,
    RouteQuery,
    TopicEntry,
    TopicList,
    TopicListQuery,
    TopicUpdated,
    UpdateTopic,
)
from protocol.controller_requests.users import (
    MAX_RULES_PER_REQUEST,
    CreateAcl,
    CreateUser,
    DeleteAcl,
    DeleteUser,
    ListAcl,
    ListUsers,
    SealedUser,
    SyncUsers,
    SyncUsersAnswer,
    UpdateAcl,
    UpdateUser,
    UserAnswer,
)
from protocol.fields import FieldError
from protocol.remoting import Frame, FrameDecoder, encode_frame, request, response
from protocol.topic_attrs import MessageType, TopicAttrs

names = st.text(min_size=1, max_size=20)
texts = st.text(max_size=20)
ints = st.integers(-(2**63), 2**63 - 1)
ids = st.integers(0, 2**31)
figures = st.integers(0, MAX_FIGURE)
user_types = st.none() | st.sampled_from(UserType)
patterns = st.sampled_from(["Topic:orders", "Topic:ord*", "Group:g1", "Group:*", "Cluster:*"])
rules = st.builds(
    make_rule,
    patterns,
    st.sets(st.sampled_from(["pub", "sub", "create", "get", "admin"]), min_size=1),
    st.sampled_from(["allow", "deny"]),
    st.lists(st.sampled_from(["10.0.0.0/8", "::1/128", "192.168.1.7"]), max_size=3),
)
rule_lists = st.lists(rules, min_size=1, max_size=4).map(tuple)
id_sets = st.frozensets(ids, max_size=5)

requests = st.one_of(
    st.builds(GetNextBrokerId, cluster=names, broker_name=names),
    st.builds(
        ApplyBrokerId,
        cluster=names,
        broker_name=names,
        broker_id=ints,
        register_check_code=texts,
        broker_address=texts,
    ),
    st.builds(
        RegisterBroker,
        cluster=names,
        broker_name=names,
        broker_id=ints,
        broker_address=names,
        register_check_code=st.none() | names,
    ),
    st.builds(
        CleanBrokerData,
        broker_name=names,
        cluster=st.none() | names,
        broker_ids=st.none() | st.frozensets(ints, min_size=1, max_size=5),
        clean_living_broker=st.booleans(),
    ),
    st.builds(ElectMaster, broker_name=names),
    st.builds(ElectMaster, broker_name=names, designated=ints),
    st.builds(ElectMaster, broker_name=names, planned_switch=st.booleans()),
    st.builds(
        AlterSyncStateSet,
        broker_name=names,
        master_broker_id=ints,
        master_epoch=ints,
        sync_state_set=id_sets,
        sync_state_set_epoch=ints,
    ),
    st.builds(GetReplicaInfo, broker_name=names),
    st.builds(GetSyncStateData, broker_name=names),
    st.just(GetMetadataInfo()),
    st.builds(
        BrokerHeartbeat,
        broker_name=names,
        broker_id=ints,
        cluster=texts,
        broker_address=texts,
        epoch=figures,
        max_offset=figures,
        confirm_offset=figures,
        election_priority=figures,
        heartbeat_timeout_ms=st.integers(-MAX_FIGURE, MAX_FIGURE),
        traffic_report=st.none() | st.binary(min_size=1, max_size=40),
    ),
    st.builds(
        RegisterRoutes,
        cluster=names,
        broker_name=names,
        broker_id=ints,
        broker_address=names,
        topics=st.dictionaries(names, ints, max_size=4),
    ),
    st.builds(RouteQuery, topic=names),
    st.just(ClusterInfoQuery()),
    st.builds(
        UpdateTopic,
        broker_name=names,
        topic=names,
        queues=ints,
        cluster=st.none() | names,
        perm=st.none() | st.integers(0, 7),
        message_type=st.none() | st.sampled_from([t.value for t in MessageType]),
    ),
    st.builds(DeleteTopic, topic=names, force=st.booleans()),
    st.builds(DeleteSubGroup, group=names, remove_dlq=st.booleans()),
    st.builds(TopicListQuery, cluster=st.none() | names),
    st.builds(CreateUser, username=names, secret=texts, user_type=user_types),
    st.builds(UpdateUser, username=names, secret=st.none() | texts, user_type=user_types),
    st.builds(DeleteUser, username=names),
    st.builds(ListUsers, prefix=texts),
    st.builds(CreateAcl, username=names, rules=rule_lists),
    st.builds(UpdateAcl, username=names, rules=rule_lists),
    st.builds(
        DeleteAcl,
        username=names,
        resources=st.lists(patterns.map(resource_pattern), max_size=3).map(tuple),
    ),
    st.builds(ListAcl, username=st.none() | names, resource=texts),
    st.builds(SyncUsers, digest=texts),
    st.builds(
        CreateStaticTopic,
        topic=names,
        queues=ints,
        broker_names=st.lists(st.text(min_size=1, max_size=8).filter(lambda n: ";" not in n)).map(
            tuple
        ),
    ),
    st.builds(CreateStaticTopic, topic=names, queues=ints, place_groups=ints),
    st.builds(StaticTopicMappingQuery, topic=names),
    st.builds(RemapStaticTopic, topic=names, queue_id=ints, broker_name=names),
    st.just(TrafficQuery()),
    st.builds(
        RebalancePlanQuery,
        threshold=st.none() | st.floats(min_value=0, allow_nan=False, allow_infinity=True),
    ),
    st.builds(
        RoleChanged,
        broker_name=names,
        metadata=st.builds(
            GroupMetadata,
            master_broker_id=ids,
            master_address=texts,
            master_epoch=ints,
            sync_state_set_epoch=ints,
            sync_state_set=id_sets,
            replicas=st.lists(st.builds(ReplicaEntry, ints, texts, st.booleans())).map(tuple),
            sealed_queues=st.lists(st.tuples(texts, ints), max_size=3).map(tuple),
        ),
    ),
    st.builds(AddController, node_id=names, address=names),
    st.builds(RemoveController, node_id=names),
    st.builds(TransferLeader, node_id=names),
    st.just(ControllerConfigQuery()),
)

answers = st.one_of(
    st.builds(UserAnswer, username=names, user_type=st.sampled_from(UserType), version=ints),
    st.builds(
        SyncUsersAnswer,
        digest=texts,
        users=st.none()
        | st.lists(
            st.builds(
                SealedUser,
                st.builds(User, names, st.sampled_from(UserType), rule_lists),
                st.binary(max_size=40),
                ints,
            ),
            max_size=4,
        ).map(tuple),
    ),
    st.builds(NextBrokerIdAnswer, next_broker_id=ints),
    st.builds(AlterSyncStateSetAnswer, sync_state_set=id_sets, sync_state_set_epoch=ints),
    st.builds(
        TopicUpdated,
        topic=names,
        queues=ints,
        broker_name=names,
        perm=st.none() | st.integers(0, 7),
        message_type=st.none() | st.sampled_from([t.value for t in MessageType]),
    ),
    st.builds(
        DeleteReport,
        name=names,
        brokers=st.lists(st.builds(BrokerOutcome, names, texts, ints, texts), max_size=3).map(
            tuple
        ),
    ),
    st.builds(
        TopicList,
        topics=st.lists(
            st.builds(
                TopicEntry,
                names,
                names,
                st.dictionaries(names, ints, max_size=3),
                st.dictionaries(
                    names,
                    st.builds(TopicAttrs, st.integers(0, 7), st.sampled_from(MessageType)).filter(
                        lambda a: not a.default
                    ),
                    max_size=2,
                ),
            ),
            max_size=3,
        ).map(tuple),
    ),
    st.builds(NotLeader, leader_address=st.none() | names),
    st.builds(
        HeartbeatAnswer,
        master_broker_id=st.none() | ids,
        master_epoch=st.none() | ints,
        heartbeat_timeout_ms=ints,
        auth_digest=st.none() | texts,
    ),
    st.one_of(
        st.builds(GroupMetadata, master_broker_id=st.none(), master_address=st.just("")),
        st.builds(GroupMetadata, master_broker_id=ids, master_address=texts),
    ).flatmap(
        lambda g: st.builds(
            GroupMetadata,
            master_broker_id=st.just(g.master_broker_id),
            master_address=st.just(g.master_address),
            master_epoch=ints,
            sync_state_set_epoch=ints,
            sync_state_set=id_sets,
            replicas=st.lists(st.builds(ReplicaEntry, ints, texts, st.booleans())).map(tuple),
            sealed_queues=st.lists(st.tuples(texts, ints), max_size=3).map(tuple),
            broker_id=st.none() | ints,
            remark=st.none() | names,
        )
    ),
)


def through_the_wire(code: int, header: Any, body: bytes | None) -> Frame:
    frames = FrameDecoder().feed(encode_frame(request(code, 7, header, body)))
    assert len(frames) == 1
    return frames[0]


@given(requests)
def test_every_request_round_trips_through_a_frame(req: Any) -> None:
    frame = through_the_wire(req.code, *req.encode())
    assert frame.code == req.code
    assert type(req).parse(frame.header, frame.body) == req


@given(answers)
def test_every_answer_round_trips_through_a_frame(answer: Any) -> None:
    frame = through_the_wire(0, *answer.encode())
    assert type(answer).parse(frame.header, frame.body) == answer


GOLDEN: list[tuple[Any, str]] = [
    (
        GetNextBrokerId(cluster="c1", broker_name="g1"),
        "000000269600cd03f4070082ab636c75737465724e616d65a26331aa62726f6b65724e616d65a26731c0",
    ),
    (
        ApplyBrokerId(cluster="c1", broker_name="g1", broker_id=2, register_check_code="code-2"),
        "000000509600cd03f5070084ab636c75737465724e616d65a26331aa62726f6b65724e616d65a26731af6170"
        "706c69656442726f6b6572496402b17265676973746572436865636b436f6465a6636f64652d32c0",
    ),
    (
        RegisterBroker(
            cluster="c1",
            broker_name="g1",
            broker_id=2,
            broker_address="127.0.0.1:10911",
            register_check_code="code-2",
        ),
        "000000679600cd03eb070085ab636c75737465724e616d65a26331aa62726f6b65724e616d65a26731a862"
        "726f6b6572496402ad62726f6b657241646472657373af3132372e302e302e313a3130393131b172656769"
        "73746572436865636b436f6465a6636f64652d32c0",
    ),
    (
        CleanBrokerData(broker_name="g1", cluster="c1", broker_ids=frozenset({2, 1})),
        "000000479600cd03f3070084aa62726f6b65724e616d65a26731a962726f6b6572496473a3313b32b1636c"
        "65616e4c6976696e6742726f6b6572c2ab636c75737465724e616d65a26331c0",
    ),
    (
        ElectMaster(broker_name="g1", designated=2),
        "000000319600cd03ea070083aa62726f6b65724e616d65a26731a862726f6b6572496402ae64657369676e"
        "617465456c656374c3c0",
    ),
    (
        AlterSyncStateSet(
            broker_name="g1",
            master_broker_id=1,
            master_epoch=3,
            sync_state_set=frozenset({2, 1}),
            sync_state_set_epoch=4,
        ),
        "000000599600cd03e9070083aa62726f6b65724e616d65a26731ae6d617374657242726f6b6572496401ab"
        "6d617374657245706f636803c42482ac73796e635374617465536574920102b173796e6353746174655365"
        "7445706f636804",
    ),
    (
        GetReplicaInfo(broker_name="g1"),
        "000000179600cd03ec070081aa62726f6b65724e616d65a26731c0",
    ),
    (
        GetSyncStateData(broker_name="g1"),
        "000000179600cd03ee070081aa62726f6b65724e616d65a26731c0",
    ),
    (GetMetadataInfo(), "000000099600cd03ed070080c0"),
    (
        BrokerHeartbeat(
            cluster="c1",
            broker_name="g1",
            broker_id=2,
            broker_address="127.0.0.1:10911",
            epoch=3,
            max_offset=4096,
            confirm_offset=2048,
            election_priority=0,
            heartbeat_timeout_ms=3000,
            traffic_report=b"\x80",
        ),
        "000000a19600cd0388070089ab636c75737465724e616d65a26331aa62726f6b65724e616d65a26731a862"
        "726f6b6572496402ad62726f6b657241646472657373af3132372e302e302e313a3130393131a565706f63"
        "6803a96d61784f6666736574cd1000ad636f6e6669726d4f6666736574cd0800b0656c656374696f6e5072"
        "696f7269747900b668656172746265617454696d656f75744d696c6c6973cd0bb8c40180",
    ),
    (
        RegisterRoutes(
            cluster="c1",
            broker_name="g1",
            broker_id=2,
            broker_address="127.0.0.1:10911",
            topics={"T1": 4},
        ),
        "0000005a960067070084ab636c75737465724e616d65a26331aa62726f6b65724e616d65a26731a862726f"
        "6b6572496402ad62726f6b657241646472657373af3132372e302e302e313a3130393131c40d81a6746f70"
        "69637381a2543104",
    ),
    (RouteQuery(topic="T1"), "00000010960069070081a5746f706963a25431c0"),
    (ClusterInfoQuery(), "0000000796006a070080c0"),
    (
        UpdateTopic(topic="T1", queues=4, cluster="c1", broker_name="g1"),
        "00000035960011070084a5746f706963a25431a671756575657304ab636c75737465724e616d65a26331aa"
        "62726f6b65724e616d65a26731c0",
    ),
    (
        DeleteTopic(topic="T1", force=True),
        "000000189600ccd8070082a5746f706963a25431a5666f726365c3c0",
    ),
    (
        DeleteSubGroup(group="g1", remove_dlq=True),
        "000000209600cccf070082a967726f75704e616d65a26731a972656d6f7665446c71c3c0",
    ),
    (TopicListQuery(cluster="c1"), "000000179600cce0070081ab636c75737465724e616d65a26331c0"),
    (
        CreateUser(username="alice", user_type=UserType.NORMAL, secret="s3cret-key"),
        "0000003c9600cd0bb9070082a8757365726e616d65a5616c696365a87573657254797065a66e6f726d616c"
        "c41381a6736563726574aa7333637265742d6b6579",
    ),
    (
        UpdateUser(username="alice", user_type=UserType.SUPER, secret="s3cret-key"),
        "0000003b9600cd0bba070082a8757365726e616d65a5616c696365a87573657254797065a57375706572c4"
        "1381a6736563726574aa7333637265742d6b6579",
    ),
    (DeleteUser(username="alice"), "000000189600cd0bbb070081a8757365726e616d65a5616c696365c0"),
    (ListUsers(prefix="al"), "000000139600cd0bbd070081a666696c746572a2616cc0"),
    (
        CreateAcl(
            username="alice",
            rules=(make_rule("Topic:orders", ["pub", "sub"], "allow", ["10.0.0.0/8"]),),
        ),
        "0000006c9600cd0bbe070081a8757365726e616d65a5616c696365c45381a572756c65739184a87265736f"
        "75726365ac546f7069633a6f7264657273a7616374696f6e7392a3707562a3737562a86465636973696f6e"
        "a5616c6c6f77a7736f757263657391aa31302e302e302e302f38",
    ),
    (
        UpdateAcl(
            username="alice",
            rules=(make_rule("Topic:orders", ["pub", "sub"], "allow", ["10.0.0.0/8"]),),
        ),
        "0000006c9600cd0bbf070081a8757365726e616d65a5616c696365c45381a572756c65739184a87265736f"
        "75726365ac546f7069633a6f7264657273a7616374696f6e7392a3707562a3737562a86465636973696f6e"
        "a5616c6c6f77a7736f757263657391aa31302e302e302e302f38",
    ),
    (
        DeleteAcl(
            username="alice",
            resources=(resource_pattern("Topic:orders"), resource_pattern("Group:g*")),
        ),
        "0000003b9600cd0bc0070081a8757365726e616d65a5616c696365c42281a97265736f757263657392ac54"
        "6f7069633a6f7264657273a847726f75703a672a",
    ),
    (
        ListAcl(username="alice", resource="Topic"),
        "000000279600cd0bc2070082a87265736f75726365a5546f706963a8757365726e616d65a5616c696365c0",
    ),
    (SyncUsers(digest="abc"), "000000149600cd13f6070081a6646967657374a3616263c0"),
    (
        CreateStaticTopic(topic="S1", queues=8, broker_names=("g1", "g2")),
        "0000002c9600cd0201070083a5746f706963a25331a671756575657308ab62726f6b65724e616d6573a567"
        "313b6732c0",
    ),
    (StaticTopicMappingQuery(topic="S1"), "000000129600cd1400070081a5746f706963a25331c0"),
    (
        RemapStaticTopic(topic="S1", queue_id=3, broker_name="g2"),
        "000000299600cd1401070083a5746f706963a25331a77175657565496403aa62726f6b65724e616d65a267"
        "32c0",
    ),
    (TrafficQuery(), "000000099600cd1403070080c0"),
    # CONTROLLER_GET_PRODUCER_ID (5180 = cd 143c): a known id asks for a new epoch of it
    (
        GetProducerId(producer_id=5),
        "000000159600cd143c070081aa70726f6475636572496405c0",
    ),
    (
        RebalancePlanQuery(threshold=12.5),
        "0000001c9600cd1404070081a97468726573686f6c64cb4029000000000000c0",
    ),
    (
        AddController(node_id="n4", address="127.0.0.1:9880"),
        "000000269600cd13ed070082a26964a26e34a761646472657373ae3132372e302e302e313a39383830c0",
    ),
    (RemoveController(node_id="n4"), "0000000f9600cd13ee070081a26964a26e34c0"),
    (TransferLeader(node_id="n2"), "0000000f9600cd13ef070081a26964a26e32c0"),
    (ControllerConfigQuery(), "000000099600cd03f2070080c0"),
    (
        # controller/documents.py's role_notification: brokerName, then the metadata's header
        RoleChanged(
            broker_name="g1",
            metadata=GroupMetadata(
                master_broker_id=1,
                master_address="127.0.0.1:10911",
                master_epoch=3,
                sync_state_set_epoch=4,
                sync_state_set=frozenset({1}),
                replicas=(ReplicaEntry(1, "127.0.0.1:10911", True),),
            ),
        ),
        "000000ab9600cd03f0070085aa62726f6b65724e616d65a26731ae6d617374657242726f6b6572496401"
        "ad6d617374657241646472657373af3132372e302e302e313a3130393131ab6d617374657245706f6368"
        "03b173796e63537461746553657445706f636804c44582ac73796e6353746174655365749101a87265706c"
        "696361739183a862726f6b6572496401a761646472657373af3132372e302e302e313a3130393131a669"
        "6e53796e63c3",
    ),
]


@pytest.mark.parametrize(("req", "wire"), GOLDEN, ids=[type(req).__name__ for req, _ in GOLDEN])
def test_a_fixed_request_encodes_to_the_same_bytes(req: Any, wire: str) -> None:
    assert encode_frame(request(req.code, 7, *req.encode())).hex() == wire
    frame = through_the_wire(req.code, *req.encode())
    assert type(req).parse(frame.header, frame.body) == req


def test_update_topic_with_a_permission_and_a_type_encodes_to_fixed_bytes() -> None:
    """UpdateTopic's perm and messageType: two more header fields after brokerName."""
    req = UpdateTopic(
        topic="T1", queues=4, cluster="c1", broker_name="g1", perm=2, message_type="DELAY"
    )
    test_a_fixed_request_encodes_to_the_same_bytes(
        req,
        "0000004d960011070086a5746f706963a25431a671756575657304ab636c75737465724e616d65a26331aa"
        "62726f6b65724e616d65a26731a47065726d02ab6d65737361676554797065a544454c4159c0",
    )


def test_every_controller_request_code_has_a_golden_test() -> None:
    import importlib
    import pkgutil

    import protocol.controller_requests as package

    codecs = set()
    for info in pkgutil.iter_modules(package.__path__):
        module = importlib.import_module(f"{package.__name__}.{info.name}")
        for name in getattr(module, "__all__", ()):
            value = getattr(module, name)
            if isinstance(value, type) and hasattr(value, "code") and hasattr(value, "parse"):
                codecs.add(value)
    golden = [type(req) for req, _ in GOLDEN]
    assert len(set(golden)) == len(golden)
    assert set(golden) == codecs


@pytest.mark.parametrize(
    "header",
    [
        {"clusterName": "c"},
        {"clusterName": "c", "brokerName": ""},
        {"clusterName": 1, "brokerName": "g"},
    ],
)
def test_a_missing_or_mistyped_field_raises_field_error(header: dict[str, Any]) -> None:
    with pytest.raises(FieldError, match="header field"):
        GetNextBrokerId.parse(header)


@pytest.mark.parametrize("ids_text", ["1;x", "--1", "1;²", "1.5"])
def test_clean_broker_data_refuses_what_are_not_ids_with_2009(ids_text: str) -> None:
    # "--1" and "²" passed the old check (lstrip("-").isdigit()) and then failed in int():
    # a SYSTEM_ERROR answer instead of 2009.
    with pytest.raises(InvalidRequest, match="brokerIds must be ids") as info:
        CleanBrokerData.parse({"brokerName": "g", "brokerIds": ids_text})
    assert info.value.code == ResponseCode.CONTROLLER_INVALID_CLEAN_BROKER_METADATA


def test_clean_broker_data_reads_spaced_and_negative_ids() -> None:
    parsed = CleanBrokerData.parse({"brokerName": "g", "brokerIds": " 1; -2 ;;"})
    assert parsed.broker_ids == frozenset({1, -2})
    assert CleanBrokerData.parse({"brokerName": "g", "brokerIds": ""}).broker_ids is None


def test_an_elect_master_without_designate_elect_ignores_broker_id() -> None:
    parsed = ElectMaster.parse({"brokerName": "g", "brokerId": "not read"})
    assert parsed == ElectMaster(broker_name="g")
    # designated: plannedSwitch is not read either (as before the codec)
    parsed = ElectMaster.parse(
        {"brokerName": "g", "designateElect": True, "brokerId": 3, "plannedSwitch": True}
    )
    assert parsed == ElectMaster(broker_name="g", designated=3)
    with pytest.raises(FieldError, match="not both"):
        ElectMaster(broker_name="g", designated=3, planned_switch=True)
    with pytest.raises(FieldError, match="designateElect"):
        ElectMaster.parse({"brokerName": "g", "designateElect": "yes"})


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b"\xc1", "undecodable body"),
        (msgpack.packb([1]), "body must be a map"),
        (msgpack.packb({"syncStateSetEpoch": 1}), "body needs syncStateSet"),
        (msgpack.packb({"syncStateSet": [1, "2"], "syncStateSetEpoch": 1}), "list of ints"),
        (msgpack.packb({"syncStateSet": [1]}), r"syncStateSetEpoch \(int\)"),
    ],
)
def test_a_bad_alter_sync_state_set_body_is_an_invalid_request(body: bytes, message: str) -> None:
    header = {"brokerName": "g", "masterBrokerId": 1, "masterEpoch": 1}
    with pytest.raises(InvalidRequest, match=message) as info:
        AlterSyncStateSet.parse(header, body)
    assert info.value.code == ResponseCode.CONTROLLER_INVALID_REQUEST


def test_heartbeat_figures_are_bounded_like_the_metadata_ids() -> None:
    from controller.metadata.events import MAX_ID

    assert MAX_FIGURE == MAX_ID
    header = {"brokerName": "g", "brokerId": 1}
    assert BrokerHeartbeat.parse(header) == BrokerHeartbeat(broker_name="g", broker_id=1)
    for key in ("epoch", "maxOffset", "confirmOffset", "electionPriority"):
        with pytest.raises(InvalidRequest, match=f"{key} must be in") as info:
            BrokerHeartbeat.parse({**header, key: -1})
        assert info.value.code == ResponseCode.CONTROLLER_INVALID_REQUEST
    with pytest.raises(InvalidRequest, match="heartbeatTimeoutMillis must be in"):
        BrokerHeartbeat.parse({**header, "heartbeatTimeoutMillis": -(2**63)})
    with pytest.raises(FieldError, match="'epoch' must be an integer"):
        BrokerHeartbeat.parse({**header, "epoch": "3"})


@pytest.mark.parametrize(
    ("topics", "message"),
    [
        ([1], "topics must map names to queue counts"),
        ({1: 4}, "topic must be a string, not int"),
        ({"T": "4"}, "queues of T must be an integer, not str"),
    ],
)
def test_registered_topics_must_map_names_to_counts(topics: Any, message: str) -> None:
    header = {"clusterName": "c", "brokerName": "g", "brokerId": 1, "brokerAddress": "a:1"}
    with pytest.raises(InvalidRequest, match=message):
        RegisterRoutes.parse(header, msgpack.packb({"topics": topics}))
    assert RegisterRoutes.parse(header).topics == {}


def _packed(doc: Any) -> bytes:
    packed: bytes = msgpack.packb(doc)
    return packed


@pytest.mark.parametrize(
    ("parse", "body", "message"),
    [
        (CreateUser.parse, None, "body must carry the secret as a string"),
        (CreateUser.parse, _packed({"secret": 1}), "body must carry the secret as a string"),
        (UpdateUser.parse, _packed({"secret": b"x"}), "body must carry the secret as a string"),
        (CreateAcl.parse, None, "non-empty list of rules"),
        (UpdateAcl.parse, _packed({"rules": []}), "non-empty list of rules"),
        (
            CreateAcl.parse,
            _packed({"rules": [{}] * (MAX_RULES_PER_REQUEST + 1)}),
            f"at most {MAX_RULES_PER_REQUEST} rules",
        ),
        (CreateAcl.parse, _packed({"rules": [{"resource": "Topic:a"}]}), "actions and sources"),
        (DeleteAcl.parse, _packed({"resources": "Topic:a"}), "resources must be a list"),
        (DeleteAcl.parse, _packed({"resources": ["Queue:a"]}), "resource type"),
    ],
)
def test_bad_user_and_rule_bodies_are_invalid_requests(parse: Any, body: Any, message: str) -> None:
    with pytest.raises(InvalidRequest, match=message) as info:
        parse({"username": "alice"}, body)
    assert info.value.code == ResponseCode.CONTROLLER_INVALID_REQUEST


def test_a_user_type_is_super_or_normal() -> None:
    body = _packed({"secret": "s3cret-key"})
    assert CreateUser.parse({"username": "a", "userType": ""}, body).user_type is None
    with pytest.raises(InvalidRequest, match="user type"):
        CreateUser.parse({"username": "a", "userType": "root"}, body)
    assert DeleteAcl.parse({"username": "a"}) == DeleteAcl(username="a")


def test_a_static_topic_names_its_groups_or_how_many_to_place_on_not_both() -> None:
    with pytest.raises(InvalidRequest, match="not both") as info:
        CreateStaticTopic.parse({"topic": "S", "queues": 2, "brokerNames": "g1", "placeGroups": 1})
    assert info.value.code == ResponseCode.BAD_REQUEST
    with pytest.raises(InvalidRequest, match="not both"):
        CreateStaticTopic(topic="S", queues=2, broker_names=("g1",), place_groups=1)
    parsed = CreateStaticTopic.parse({"topic": "S", "queues": 2, "brokerNames": "g1;;g2;"})
    assert parsed.broker_names == ("g1", "g2")


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (-1, "threshold must be a number >= 0, not -1"),
        ("fast", "threshold must be a number >= 0, not 'fast'"),
        ("nan", "threshold must be a number >= 0, not 'nan'"),
        (True, "threshold must be a number$"),
    ],
)
def test_a_rebalance_threshold_is_a_number_of_at_least_zero(raw: Any, message: str) -> None:
    with pytest.raises(InvalidRequest, match=message) as info:
        RebalancePlanQuery.parse({"threshold": raw})
    assert info.value.code == ResponseCode.CONTROLLER_INVALID_REQUEST
    assert RebalancePlanQuery.parse({"threshold": "2.5"}) == RebalancePlanQuery(threshold=2.5)
    assert RebalancePlanQuery.parse({"threshold": 3}) == RebalancePlanQuery(threshold=3.0)


def _group_answer_bytes(code: int, request_code: int, answer: GroupMetadata) -> str:
    return encode_frame(response(request(request_code, 7), code, *answer.encode())).hex()


def test_a_group_metadata_answer_encodes_to_the_same_bytes() -> None:
    # built from controller/documents.py's group_header and group_body before the codec
    registered = GroupMetadata(
        master_broker_id=1,
        master_address="127.0.0.1:10911",
        master_epoch=3,
        sync_state_set_epoch=4,
        sync_state_set=frozenset({2, 1}),
        replicas=(
            ReplicaEntry(1, "127.0.0.1:10911", True),
            ReplicaEntry(2, "127.0.0.1:10921", False),
        ),
        sealed_queues=(("S1", 0),),
        broker_id=2,
    )
    assert _group_answer_bytes(0, 1003, registered) == (
        "000000e4960100070085ae6d617374657242726f6b6572496401ad6d617374657241646472657373af3132"
        "372e302e302e313a3130393131ab6d617374657245706f636803b173796e63537461746553657445706f63"
        "6804a862726f6b6572496402c48483ac73796e635374617465536574920102a87265706c696361739283a8"
        "62726f6b6572496401a761646472657373af3132372e302e302e313a3130393131a6696e53796e63c383a8"
        "62726f6b6572496402a761646472657373af3132372e302e302e313a3130393231a6696e53796e63c2ac73"
        "65616c65645175657565739192a2533100"
    )
    refused = GroupMetadata(
        master_broker_id=None,
        master_epoch=3,
        sync_state_set_epoch=4,
        remark="no candidate",
    )
    assert _group_answer_bytes(2004, 1002, refused) == (
        "000000769601cd07d4070085ae6d617374657242726f6b65724964ffad6d617374657241646472657373a0"
        "ab6d617374657245706f636803b173796e63537461746553657445706f636804a672656d61726bac6e6f20"
        "63616e646964617465c41982ac73796e63537461746553657490a87265706c6963617390"
    )
    with pytest.raises(FieldError, match="no master address"):
        GroupMetadata(
            master_broker_id=None, master_address="a:1", master_epoch=0, sync_state_set_epoch=0
        )
    with pytest.raises(FieldError, match="give None"):
        GroupMetadata(master_broker_id=-1, master_epoch=0, sync_state_set_epoch=0)


@pytest.mark.parametrize(
    "body",
    [
        {"replicas": [{"brokerId": "1", "address": "a", "inSync": True}]},
        {"replicas": [{"brokerId": 1, "address": "a"}]},
        {"replicas": {}},
        {"sealedQueues": [["S1"]]},
        {"sealedQueues": [[1, 0]]},
    ],
)
def test_a_malformed_group_metadata_answer_raises_field_error(body: dict[str, Any]) -> None:
    header = {"masterBrokerId": -1, "masterEpoch": 0, "syncStateSetEpoch": 0}
    with pytest.raises(FieldError):
        GroupMetadata.parse(header, msgpack.packb(body))


def test_not_leader_names_the_leader_only_when_known() -> None:
    assert NotLeader().encode() == ({}, None)
    assert NotLeader(leader_address="127.0.0.1:9878").encode() == (
        {"leaderAddress": "127.0.0.1:9878"},
        None,
    )


def test_an_earlier_controllers_heartbeat_answer_parses_as_not_told() -> None:
    # Answers before they named the master (efd9bdb), capped the timeout (cd26151) and carried
    # the users' digest: a broker upgraded before its controllers still reads them.
    assert HeartbeatAnswer.parse({}) == HeartbeatAnswer(master_broker_id=None, master_epoch=None)
    assert HeartbeatAnswer.parse({"masterBrokerId": 1, "masterEpoch": 3}) == HeartbeatAnswer(
        master_broker_id=1, master_epoch=3, heartbeat_timeout_ms=0, auth_digest=None
    )
    with pytest.raises(FieldError, match="'authDigest' must be a string"):
        HeartbeatAnswer.parse({"authDigest": 5})


def test_a_heartbeat_answer_encodes_to_the_same_bytes() -> None:
    # the header heartbeats.py wrote by hand before the codec
    named = HeartbeatAnswer(
        master_broker_id=1, master_epoch=3, heartbeat_timeout_ms=3000, auth_digest="d1"
    )
    assert encode_frame(response(request(904, 7), 0, *named.encode())).hex() == (
        "0000004c960100070084ae6d617374657242726f6b6572496401ab6d617374657245706f636803b6686561"
        "72746265617454696d656f75744d696c6c6973cd0bb8aa61757468446967657374a26431c0"
    )
    none = HeartbeatAnswer(
        master_broker_id=None, master_epoch=0, heartbeat_timeout_ms=3000, auth_digest=""
    )
    assert encode_frame(response(request(904, 7), 0, *none.encode())).hex() == (
        "0000004a960100070084ae6d617374657242726f6b65724964ffab6d617374657245706f636800b6686561"
        "72746265617454696d656f75744d696c6c6973cd0bb8aa61757468446967657374a0c0"
    )


def test_a_heartbeat_answer_tells_the_lowest_producer_id_not_issued() -> None:
    # issue 29: the brokers refuse idempotent producer ids at or above it (authentication on)
    told = HeartbeatAnswer(master_broker_id=1, master_epoch=3, producer_id_limit=17)
    header, _ = told.encode()
    assert header["producerIdLimit"] == 17
    assert HeartbeatAnswer.parse(header) == told
    assert HeartbeatAnswer.parse({"masterBrokerId": 1}).producer_id_limit is None
    with pytest.raises(FieldError):
        HeartbeatAnswer.parse({"producerIdLimit": "17"})


def test_a_users_table_answer_encodes_to_the_same_bytes() -> None:
    # the header and body controller/service/auth.py writes by hand
    rule = make_rule("Topic:A", ["pub"], "allow")
    user = SealedUser(User("alice", UserType.NORMAL, (rule,)), b"\x01\x02", 3)
    table = SyncUsersAnswer(digest="d1", users=(user,))
    assert encode_frame(response(request(5110, 7), 0, *table.encode())).hex() == (
        "0000009d960100070082a6646967657374a26431a9756e6368616e676564c2c48081a5757365727391"
        "85a8757365726e616d65a5616c696365a87573657254797065a66e6f726d616cac7365616c656453656372"
        "6574c4020102a776657273696f6e03a572756c65739184a87265736f75726365a7546f7069633a41a761"
        "6374696f6e7391a3707562a86465636973696f6ea5616c6c6f77a7736f757263657390"
    )
    held = SyncUsersAnswer(digest="d1")
    assert encode_frame(response(request(5110, 7), 0, *held.encode())).hex() == (
        "0000001c960100070082a6646967657374a26431a9756e6368616e676564c3c0"
    )


@pytest.mark.parametrize(
    ("header", "body", "message"),
    [
        ({}, None, "answer lacks the digest"),
        ({"digest": "d"}, b"\xc1", "undecodable users body"),
        ({"digest": "d"}, msgpack.packb({"users": 3}), "users body lacks a list of users"),
        ({"digest": "d"}, msgpack.packb({"users": [{"username": 1}]}), "a user needs username"),
        (
            {"digest": "d", "unchanged": False},
            msgpack.packb(
                {"users": [{"username": "u", "sealedSecret": b"", "rules": [], "userType": "x"}]}
            ),
            "user u: unknown user type",
        ),
    ],
)
def test_a_malformed_users_table_raises_field_error(
    header: dict[str, Any], body: bytes | None, message: str
) -> None:
    with pytest.raises(FieldError, match=message):
        SyncUsersAnswer.parse(header, body)


def test_a_user_answer_encodes_to_the_same_bytes() -> None:
    # the header controller/service/auth.py's user_doc writes by hand
    user = UserAnswer(username="alice", user_type=UserType.NORMAL, version=2)
    assert encode_frame(response(request(3001, 7), 0, *user.encode())).hex() == (
        "0000002f960100070083a8757365726e616d65a5616c696365a87573657254797065a66e6f726d616ca7"
        "76657273696f6e02c0"
    )
    with pytest.raises(FieldError, match="unknown user type"):
        UserAnswer.parse({"username": "alice", "userType": "root", "version": 2})
