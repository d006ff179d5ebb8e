"""A reset needs update or admin on the group (docs/operations.md, "Resetting offsets"), against
real processes with authentication on (the secured cluster of test_authentication.py): a user
with sub on the topic and the group (what a member needs) is refused NO_PERMISSION with the
reason, by the broker and through rmqctl (one line, exit status 1), and nothing changed; a super
user's reset goes through."""

from __future__ import annotations

import pytest

from protocol.broker_requests.offsets import ResetOffset
from protocol.codes import ResponseCode
from protocol.pull import ConsumerOffsetQuery, ConsumerOffsetUpdate, decode_offset
from tests.cluster.secured import ROOT
from tests.cluster.test_authentication import READER, Secured, call, refused
from tests.cluster.test_authentication import secured as secured
from tests.support.wait import wait_until_async

pytestmark = pytest.mark.multiprocess


async def test_a_member_may_not_reset_its_group_an_operator_may(secured: Secured) -> None:
    master = await secured.master()
    commit = ConsumerOffsetUpdate(group="g1", topic="A", queue_id=0, offset=0)

    async def committed() -> bool:  # a member's own commit is allowed, once the broker knows it
        done = await call(master, READER, commit.code, commit.header())
        return done.code == ResponseCode.SUCCESS

    await wait_until_async(committed, "the broker to know user reader", 20)

    ask = ResetOffset(topic="A", group="g1", timestamp=-1, force=True)
    remark = refused(await call(master, READER, ask.code, *ask.encode()), "denied")
    assert remark.endswith(
        "no rule of reader allows update on Group:g1; any one of update, admin would do"
    ), remark

    cli = secured.ctl(READER, "resetOffsetByTime", "-g", "g1", "-t", "A", "-s", "now", ok=False)
    assert cli.returncode == 1, cli.stdout
    assert "NO_PERMISSION" in cli.stderr and len(cli.stderr.strip().splitlines()) == 1, cli.stderr

    query = ConsumerOffsetQuery(group="g1", topic="A", queue_id=0)
    assert decode_offset(await call(master, ROOT, query.code, query.header())) == 0

    done = secured.ctl(ROOT, "skipAccumulatedMessage", "-g", "g1", "-t", "A")
    assert [q["outcome"] for q in done["queues"]] == ["reset"]
