"""ElectMaster: the policy (epoch, offset, priority, id), clean and unclean candidates, designated
brokers, no candidate, and the state machine's handling of each verdict."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from controller.metadata import (
    CleanBrokerData,
    ElectionInfo,
    ElectMaster,
    ReplicasInfoManager,
    Verdict,
    candidate_pools,
    choose_master,
    every_candidate_alive,
    rank_candidates,
)
from controller.metadata.election import rank_key
from protocol.codes import ResponseCode as RC
from tests.metadata.support import (
    GROUP,
    alive_all,
    commit,
    elect,
    group_with_master,
    info,
    register_group,
    view,
)

ALL = frozenset({1, 2, 3, 4})


def choose(
    alive: dict[int, ElectionInfo],
    *,
    sync_state_set: frozenset[int] = ALL,
    replicas: frozenset[int] = ALL,
    old_master: int | None = None,
    designated: int | None = None,
    unclean: bool = False,
    first: bool = False,
    planned: bool = False,
) -> tuple[Verdict, int | None]:
    result = choose_master(
        sync_state_set=sync_state_set,
        replicas=replicas,
        old_master=old_master,
        alive=alive,
        designated=designated,
        enable_elect_unclean_master=unclean,
        first_election=first,
        planned=planned,
    )
    return result.verdict, result.broker_id


# The policy ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("alive", "winner"),
    [
        # A higher epoch wins even with a smaller offset and a worse priority.
        ({1: info(1, 900, 0), 2: info(2, 100, 9), 3: info(1, 1000, 0)}, 2),
        # Same epoch: the larger max offset.
        ({1: info(3, 100, 0), 2: info(3, 300, 5), 3: info(3, 200, 0)}, 2),
        # Same epoch and offset: the LOWER election priority.
        ({1: info(3, 300, 5), 2: info(3, 300, 1), 3: info(3, 300, 2)}, 2),
        # All equal: the lower broker id.
        ({4: info(3, 300, 1), 3: info(3, 300, 1), 2: info(3, 300, 1)}, 2),
    ],
)
def test_candidates_rank_by_epoch_then_offset_then_priority_then_id(
    alive: dict[int, ElectionInfo], winner: int
) -> None:
    assert choose(alive) == (Verdict.ELECTED, winner)


def test_rank_candidates_orders_best_first() -> None:
    alive = {1: info(1, 5, 0), 2: info(2, 0, 0), 3: info(1, 5, -1), 4: info(1, 7, 0)}
    assert rank_candidates(alive, alive) == [2, 4, 3, 1]


def test_only_alive_sync_state_set_members_are_candidates() -> None:
    alive = {1: info(1, 100), 4: info(9, 9999)}  # 4 looks better but is out of sync
    assert choose(alive, sync_state_set=frozenset({1, 2})) == (Verdict.ELECTED, 1)


def test_no_alive_sync_state_set_member_means_no_candidate() -> None:
    alive = {3: info(), 4: info()}
    assert choose(alive, sync_state_set=frozenset({1, 2}), old_master=1) == (
        Verdict.NO_CANDIDATE,
        None,
    )


def test_unclean_election_falls_back_to_all_alive_replicas() -> None:
    alive = {3: info(1, 10), 4: info(1, 20)}
    assert choose(alive, sync_state_set=frozenset({1, 2}), old_master=1, unclean=True) == (
        Verdict.ELECTED,
        4,
    )


def test_unclean_election_still_prefers_an_alive_sync_state_set_member() -> None:
    alive = {2: info(1, 10), 4: info(9, 9999)}
    assert choose(alive, sync_state_set=frozenset({1, 2}), unclean=True) == (Verdict.ELECTED, 2)


def test_an_alive_old_master_stays_master() -> None:
    alive = {1: info(1, 0), 2: info(1, 999)}
    assert choose(alive, old_master=1) == (Verdict.MASTER_STILL_ALIVE, 1)
    assert choose(alive, old_master=1, designated=1) == (Verdict.MASTER_STILL_ALIVE, 1)


def test_the_refusal_says_when_the_designated_broker_is_already_the_master() -> None:
    alive = {1: info(1, 0), 2: info(1, 999)}
    reasons = [
        choose_master(
            sync_state_set=ALL,
            replicas=ALL,
            old_master=1,
            alive=alive,
            designated=designated,
            enable_elect_unclean_master=False,
        ).reason
        for designated in (1, None)
    ]
    assert reasons == ["broker 1 is already the master", "master 1 is still alive"]


def test_a_dead_old_master_is_not_a_candidate() -> None:
    assert choose({2: info(), 3: info()}, old_master=1) == (Verdict.ELECTED, 2)


def test_a_designated_alive_sync_state_set_member_is_elected_even_over_an_alive_master() -> None:
    alive = {1: info(1, 999), 2: info(1, 0), 3: info(1, 500)}
    assert choose(alive, old_master=1, designated=2) == (Verdict.ELECTED, 2)


@pytest.mark.parametrize(
    ("designated", "reason"),
    [(9, "not registered"), (3, "not alive"), (4, "not in the SyncStateSet")],
)
def test_a_designated_broker_must_be_a_candidate(designated: int, reason: str) -> None:
    result = choose_master(
        sync_state_set=frozenset({1, 2, 3}),
        replicas=ALL,
        old_master=None,
        alive={1: info(), 2: info(), 4: info()},
        designated=designated,
    )
    assert result.verdict is Verdict.DESIGNATED_INVALID
    assert reason in result.reason


def test_unclean_election_accepts_a_designated_out_of_sync_broker() -> None:
    alive = {1: info(), 4: info()}
    assert choose(alive, sync_state_set=frozenset({1, 2}), designated=4, unclean=True) == (
        Verdict.ELECTED,
        4,
    )


def test_a_planned_switch_moves_an_alive_master_to_the_best_other_in_sync_member() -> None:
    # 1 is the master and ranks best; 4 ranks better than 3 but is out of sync.
    alive = {1: info(2, 999), 2: info(2, 100), 3: info(2, 300), 4: info(2, 5000)}
    in_sync = frozenset({1, 2, 3})
    assert choose(alive, sync_state_set=in_sync, old_master=1, planned=True) == (
        Verdict.ELECTED,
        3,
    )
    # by the same ordering: the lower election priority when epoch and offset are equal
    alive = {1: info(2, 300), 2: info(2, 300, 1), 3: info(2, 300, 5)}
    assert choose(alive, sync_state_set=in_sync, old_master=1, planned=True) == (
        Verdict.ELECTED,
        2,
    )


@pytest.mark.parametrize(
    ("sync_state_set", "alive_ids", "reason"),
    [
        (
            frozenset({1}),
            {1, 2, 3},
            "no in-sync replica to switch master 1 to: the SyncStateSet is [1]: the master "
            "alone; the master stays",
        ),
        (
            frozenset({1, 2, 3}),
            {1, 4},
            "no in-sync replica to switch master 1 to: SyncStateSet members [2, 3] are not "
            "alive; the master stays",
        ),
    ],
)
def test_a_planned_switch_with_no_other_alive_in_sync_member_fails_naming_why(
    sync_state_set: frozenset[int], alive_ids: set[int], reason: str
) -> None:
    for unclean in (False, True):  # never to an out-of-sync replica, even with unclean on
        result = choose_master(
            sync_state_set=sync_state_set,
            replicas=ALL,
            old_master=1,
            alive={i: info() for i in alive_ids},
            enable_elect_unclean_master=unclean,
            planned=True,
        )
        assert (result.verdict, result.broker_id, result.reason) == (
            Verdict.NO_SWITCH_CANDIDATE,
            1,
            reason,
        )


def test_a_planned_switch_of_a_group_without_an_alive_master_is_an_election() -> None:
    alive = {2: info(1, 10), 3: info(1, 20)}
    assert choose(alive, old_master=1, planned=True) == (Verdict.ELECTED, 3)
    assert choose(alive, old_master=None, planned=True) == (Verdict.ELECTED, 3)
    assert choose({4: info()}, sync_state_set=frozenset({1, 2}), old_master=1, planned=True) == (
        Verdict.NO_CANDIDATE,
        None,
    )
    # a designated broker is the operator's choice, planned or not
    assert choose(view(1, 2, 3), old_master=1, designated=2, planned=True) == (
        Verdict.ELECTED,
        2,
    )


def test_the_first_election_considers_every_alive_replica() -> None:
    alive = {2: info(0, 50), 3: info(0, 70)}
    assert choose(alive, sync_state_set=frozenset(), first=True) == (Verdict.ELECTED, 3)
    assert choose({}, sync_state_set=frozenset(), first=True) == (Verdict.NO_CANDIDATE, None)


def test_alive_brokers_that_are_not_registered_are_ignored() -> None:
    assert choose({7: info(9, 9)}, first=True) == (Verdict.NO_CANDIDATE, None)


@given(
    st.dictionaries(
        st.integers(1, 6),
        st.builds(
            ElectionInfo,
            epoch=st.integers(0, 3),
            max_offset=st.integers(0, 3),
            election_priority=st.integers(-2, 2),
        ),
        max_size=6,
    ),
    st.frozensets(st.integers(1, 6), max_size=6),
    st.none() | st.integers(1, 6),
    st.booleans(),
)
def test_the_elected_broker_is_a_candidate_and_none_ranks_better(
    alive: dict[int, ElectionInfo], sync_state_set: frozenset[int], old: int | None, unclean: bool
) -> None:
    replicas = frozenset(range(1, 7))
    verdict, chosen = choose(
        alive, sync_state_set=sync_state_set, replicas=replicas, old_master=old, unclean=unclean
    )
    in_sync = sync_state_set & alive.keys()
    pool = in_sync if in_sync or not unclean else frozenset(alive)
    if not pool:
        assert verdict is Verdict.NO_CANDIDATE
    elif old in pool:
        assert (verdict, chosen) == (Verdict.MASTER_STILL_ALIVE, old)
    else:
        assert verdict is Verdict.ELECTED and chosen in pool
        best = rank_key(chosen, alive[chosen])
        assert all(best <= rank_key(b, alive[b]) for b in pool)


# When a choice is final (every_candidate_alive) ---------------------------------------------------

INFOS = st.builds(
    ElectionInfo,
    epoch=st.integers(0, 3),
    max_offset=st.integers(0, 3),
    election_priority=st.integers(-2, 2),
)


@given(
    st.dictionaries(st.integers(1, 6), INFOS, max_size=6),
    st.dictionaries(st.integers(1, 6), INFOS, max_size=6),
    st.frozensets(st.integers(1, 6), max_size=6),
    st.frozensets(st.integers(1, 6), max_size=6),
    st.booleans(),
    st.booleans(),
)
def test_a_choice_with_every_candidate_alive_is_final(
    alive: dict[int, ElectionInfo],
    later: dict[int, ElectionInfo],
    sync_state_set: frozenset[int],
    replicas: frozenset[int],
    unclean: bool,
    first: bool,
) -> None:
    """Once every candidate is alive, brokers turning alive later (``later``: ids not alive yet,
    with any heartbeat) cannot change the choice; while one is not, some broker turning alive
    can (so waiting for it is not for nothing)."""
    group = {"sync_state_set": sync_state_set, "replicas": replicas}
    policy = {**group, "enable_elect_unclean_master": unclean, "first_election": first}
    now = choose(alive, **group, unclean=unclean, first=first)
    final = every_candidate_alive(alive=alive, **policy)
    more = {**alive, **{b: i for b, i in later.items() if b not in alive}}
    if final:
        assert now[0] is Verdict.ELECTED
        assert choose(more, **group, unclean=unclean, first=first) == now
        return
    pools = candidate_pools(**policy)
    unheard = sorted(frozenset().union(*(pool for _, pool in pools)) - alive.keys())
    if not unheard:  # no candidate can turn alive: none at all, now or ever
        assert now[0] is Verdict.NO_CANDIDATE
        return
    # A registered broker not heard yet that outranks everyone would change the choice.
    best = ElectionInfo(epoch=99, max_offset=0, election_priority=0)
    outcomes = {choose({**alive, b: best}, **group, unclean=unclean, first=first) for b in unheard}
    assert outcomes != {now}


def test_every_candidate_alive_looks_at_the_pool_the_policy_picks_from() -> None:
    def alive_enough(alive: set[int], sync_state_set: frozenset[int], **kwargs: bool) -> bool:
        return every_candidate_alive(
            sync_state_set=sync_state_set,
            replicas=frozenset({1, 2, 3}),
            alive=view(*alive),
            **kwargs,
        )

    # A first election draws from every registered replica.
    assert not alive_enough({1, 2}, frozenset(), first_election=True)
    assert alive_enough({1, 2, 3}, frozenset(), first_election=True)
    # Later ones from the SyncStateSet; an out-of-sync replica does not matter ...
    assert alive_enough({1, 2}, frozenset({1, 2}))
    assert not alive_enough({1, 3}, frozenset({1, 2}))
    # ... not even with unclean elections, while a SyncStateSet member is registered.
    assert alive_enough({1, 2}, frozenset({1, 2}), enable_elect_unclean_master=True)
    assert not alive_enough({3}, frozenset({1, 2}), enable_elect_unclean_master=True)
    # No registered SyncStateSet member: nobody to elect, or (unclean) any replica.
    assert not alive_enough({1, 2, 3}, frozenset({7}))
    assert not alive_enough({1, 2}, frozenset({7}), enable_elect_unclean_master=True)
    assert alive_enough({1, 2, 3}, frozenset({7}), enable_elect_unclean_master=True)
    # Nobody registered: nothing to elect.
    assert not every_candidate_alive(sync_state_set=frozenset(), replicas=frozenset(), alive={})


@given(
    st.dictionaries(st.integers(1, 6), INFOS, max_size=6),
    st.frozensets(st.integers(1, 6), max_size=6),
    st.integers(1, 6),
    st.booleans(),
)
def test_a_planned_switch_from_an_alive_master_picks_the_best_other_in_sync_broker(
    alive: dict[int, ElectionInfo], sync_state_set: frozenset[int], old: int, unclean: bool
) -> None:
    alive = {**alive, old: alive.get(old, ElectionInfo(epoch=0, max_offset=0, election_priority=0))}
    result = choose_master(
        sync_state_set=sync_state_set | {old},
        replicas=frozenset(range(1, 7)),
        old_master=old,
        alive=alive,
        enable_elect_unclean_master=unclean,
        planned=True,
    )
    pool = (sync_state_set & alive.keys()) - {old}
    if not pool:
        assert (result.verdict, result.broker_id) == (Verdict.NO_SWITCH_CANDIDATE, old)
    else:
        assert result.verdict is Verdict.ELECTED and result.broker_id in pool
        best = rank_key(result.broker_id, alive[result.broker_id])
        assert all(best <= rank_key(b, alive[b]) for b in pool)


# The state machine ------------------------------------------------------------------------------


def test_an_unknown_group_needs_registration_2010() -> None:
    manager = ReplicasInfoManager()
    assert manager.elect_master("nope", alive_replicas={}).code == (
        RC.CONTROLLER_BROKER_NEED_TO_BE_REGISTERED
    )


def test_the_first_election_makes_a_master_at_epoch_one() -> None:
    manager = ReplicasInfoManager()
    register_group(manager, 3)
    decision = manager.elect_master(GROUP, alive_replicas={2: info(0, 10), 3: info(0, 5)})
    assert decision.events == (
        ElectMaster(
            broker_name=GROUP, new_master_broker_id=2, master_epoch=0, sync_state_set_epoch=0
        ),
    )
    reply = commit(manager, decision)
    assert reply.code == RC.SUCCESS and reply.response is not None
    assert reply.response.master_broker_id == 2
    assert reply.response.master_address == "127.0.0.1:10920"
    assert reply.response.master_epoch == 1
    assert reply.response.sync_state_set == frozenset({2})
    assert reply.response.sync_state_set_epoch == 1
    assert manager.replica_info(GROUP) == reply.response


def test_an_election_while_the_master_is_alive_answers_2011_and_changes_nothing() -> None:
    manager = group_with_master()
    before = manager.snapshot()
    decision = manager.elect_master(GROUP, alive_replicas=view(1, 2, 3))
    assert decision.code == RC.CONTROLLER_MASTER_STILL_EXIST
    assert decision.events == ()
    assert decision.response is not None and decision.response.master_broker_id == 1
    assert manager.snapshot() == before


def expand(manager: ReplicasInfoManager, members: set[int]) -> None:
    info_ = manager.replica_info(GROUP)
    assert info_ is not None and info_.master_broker_id is not None
    decision = manager.alter_sync_state_set(
        GROUP,
        info_.master_broker_id,
        info_.master_epoch,
        frozenset(members),
        info_.sync_state_set_epoch,
        alive_all,
    )
    assert commit(manager, decision).code == RC.SUCCESS


def test_a_dead_master_is_replaced_by_the_best_sync_state_set_member() -> None:
    manager = group_with_master()
    expand(manager, {1, 2, 3})
    decision = manager.elect_master(GROUP, alive_replicas={2: info(1, 100), 3: info(1, 200)})
    reply = commit(manager, decision)
    assert reply.code == RC.SUCCESS and reply.response is not None
    assert reply.response.master_broker_id == 3
    assert reply.response.master_epoch == 2
    assert reply.response.sync_state_set == frozenset({3})
    assert reply.response.sync_state_set_epoch == 3


def test_no_candidate_clears_the_master_and_answers_2004() -> None:
    manager = group_with_master()
    expand(manager, {1, 2})
    decision = manager.elect_master(GROUP, alive_replicas=view(3))  # 3 is out of sync
    assert decision.code == RC.CONTROLLER_MASTER_NOT_AVAILABLE
    assert decision.events == (
        ElectMaster(
            broker_name=GROUP, new_master_broker_id=None, master_epoch=1, sync_state_set_epoch=2
        ),
    )
    reply = commit(manager, decision)
    assert reply.code == RC.CONTROLLER_MASTER_NOT_AVAILABLE
    info_ = manager.replica_info(GROUP)
    assert info_ is not None
    assert info_.master_broker_id is None and info_.master_address is None
    assert info_.master_epoch == 2  # bumped, so brokers see the change
    assert info_.sync_state_set == frozenset({1, 2})  # kept: they still hold the data
    assert info_.sync_state_set_epoch == 2
    assert reply.response == info_
    # Asking again appends nothing more.
    again = manager.elect_master(GROUP, alive_replicas=view(3))
    assert again.code == RC.CONTROLLER_MASTER_NOT_AVAILABLE and again.events == ()
    # A SyncStateSet member comes back: it is elected.
    back = elect(manager, [2, 3])
    assert back.code == RC.SUCCESS and back.response is not None
    assert back.response.master_broker_id == 2 and back.response.master_epoch == 3


def test_unclean_election_elects_an_out_of_sync_broker() -> None:
    manager = group_with_master()
    reply = elect(manager, [3], enable_elect_unclean_master=True)
    assert reply.code == RC.SUCCESS and reply.response is not None
    assert reply.response.master_broker_id == 3
    assert reply.response.sync_state_set == frozenset({3})


def test_an_admin_moves_mastership_to_a_named_in_sync_broker() -> None:
    manager = group_with_master()
    expand(manager, {1, 2, 3})
    reply = elect(manager, [1, 2, 3], designated_broker_id=3)
    assert reply.code == RC.SUCCESS and reply.response is not None
    assert reply.response.master_broker_id == 3 and reply.response.master_epoch == 2


def test_an_admin_naming_an_out_of_sync_or_dead_broker_is_refused_2012() -> None:
    manager = group_with_master()
    expand(manager, {1, 2})
    before = manager.snapshot()
    out_of_sync = manager.elect_master(GROUP, alive_replicas=view(1, 2, 3), designated_broker_id=3)
    assert out_of_sync.code == RC.CONTROLLER_ELECT_MASTER_FAILED and out_of_sync.events == ()
    dead = manager.elect_master(GROUP, alive_replicas=view(1, 3), designated_broker_id=2)
    assert dead.code == RC.CONTROLLER_ELECT_MASTER_FAILED
    unknown = manager.elect_master(GROUP, alive_replicas=view(1), designated_broker_id=42)
    assert unknown.code == RC.CONTROLLER_ELECT_MASTER_FAILED
    assert manager.snapshot() == before
    # Unclean election lets the admin pick the out-of-sync one.
    unclean = elect(manager, [1, 2, 3], designated_broker_id=3, enable_elect_unclean_master=True)
    assert unclean.code == RC.SUCCESS


def test_an_admin_planned_switch_moves_mastership_to_the_best_other_in_sync_broker() -> None:
    manager = group_with_master()
    expand(manager, {1, 2, 3})
    alive = {1: info(1, 500), 2: info(1, 400), 3: info(1, 450)}
    reply = commit(manager, manager.elect_master(GROUP, alive_replicas=alive, planned=True))
    assert reply.code == RC.SUCCESS, reply.remark
    assert reply.response is not None
    assert reply.response.master_broker_id == 3 and reply.response.master_epoch == 2
    assert reply.response.sync_state_set == frozenset({3})


def test_an_admin_planned_switch_with_the_master_alone_in_sync_is_refused_2012() -> None:
    manager = group_with_master()  # SyncStateSet {1}
    before = manager.snapshot()
    decision = manager.elect_master(GROUP, alive_replicas=view(1, 2, 3), planned=True)
    assert decision.code == RC.CONTROLLER_ELECT_MASTER_FAILED
    assert decision.remark == (
        "no in-sync replica to switch master 1 to: the SyncStateSet is [1]: the master alone; "
        "the master stays"
    )
    assert decision.events == ()
    assert manager.snapshot() == before
    # A broker's own election request (not planned) still leaves an alive master alone.
    assert manager.elect_master(GROUP, alive_replicas=view(1, 2, 3)).code == (
        RC.CONTROLLER_MASTER_STILL_EXIST
    )


def test_an_admin_naming_the_current_alive_master_gets_2011() -> None:
    manager = group_with_master()
    decision = manager.elect_master(GROUP, alive_replicas=view(1, 2), designated_broker_id=1)
    assert decision.code == RC.CONTROLLER_MASTER_STILL_EXIST


def test_two_elections_decided_on_the_same_state_only_the_first_applies() -> None:
    manager = group_with_master()
    expand(manager, {1, 2, 3})
    first = manager.elect_master(GROUP, alive_replicas=view(2))
    second = manager.elect_master(GROUP, alive_replicas=view(3))
    assert commit(manager, first).code == RC.SUCCESS
    assert commit(manager, second).code == RC.CONTROLLER_FENCED_MASTER_EPOCH
    info_ = manager.replica_info(GROUP)
    assert info_ is not None and info_.master_broker_id == 2 and info_.master_epoch == 2


def test_an_election_overtaken_by_a_sync_state_set_shrink_is_fenced_2001() -> None:
    manager = group_with_master()
    expand(manager, {1, 2})
    election = manager.elect_master(GROUP, alive_replicas=view(2))  # decided: 2 is in sync
    expand(manager, {1})  # the master shrank 2 out and committed first
    assert commit(manager, election).code == RC.CONTROLLER_FENCED_SYNC_STATE_SET_EPOCH
    info_ = manager.replica_info(GROUP)
    assert info_ is not None and info_.master_broker_id == 1


def test_an_election_of_a_broker_cleaned_before_commit_is_rejected_2003() -> None:
    manager = group_with_master()
    election = manager.elect_master(GROUP, alive_replicas=view(3), enable_elect_unclean_master=True)
    manager.apply(CleanBrokerData(broker_name=GROUP, broker_ids=frozenset({3})))
    assert commit(manager, election).code == RC.CONTROLLER_INVALID_REPLICAS


def test_an_election_event_for_an_unknown_group_is_rejected_on_apply() -> None:
    manager = ReplicasInfoManager()
    event = ElectMaster(
        broker_name=GROUP, new_master_broker_id=1, master_epoch=0, sync_state_set_epoch=0
    )
    assert manager.apply(event).code == RC.CONTROLLER_BROKER_NEED_TO_BE_REGISTERED


def test_a_malformed_designated_id_is_an_invalid_request() -> None:
    manager = group_with_master()
    decision = manager.elect_master(GROUP, alive_replicas={}, designated_broker_id="2")  # type: ignore[arg-type]
    assert decision.code == RC.CONTROLLER_INVALID_REQUEST
