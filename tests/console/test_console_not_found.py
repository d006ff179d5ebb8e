"""The console's status for what a request names: a topic, a consumer group or a message that
does not exist is a 404 page saying so, a malformed message id a 400 naming what is wrong with
it, and 502 stays for a cluster that cannot be reached (controllers, or the broker that would
hold the answer). Real processes: three controllers, broker group broker-a of one, rmq-console
(no browser: the statuses are what is checked); also bad form input refused before anything is
sent, and a search by key cut to a page saying so."""

from __future__ import annotations

import asyncio
import json
import re
import signal
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from client import Producer
from console.reads import GROUPS_PER_PAGE, MAX_FOUND
from protocol.codes import ResponseCode
from protocol.pull import ConsumerOffsetUpdate
from remoting.client import RemotingClient
from tests.console.browser import console_process, fetch, post_form
from tests.support.cluster import STEADY_MASTER, Cluster
from tests.support.messages import consumed, create_once_registered
from tests.support.procs import Daemon, free_port, port_open
from tests.support.wait import wait_until

pytestmark = pytest.mark.multiprocess

#: an offset id whose store host (10.0.0.1:9999) is no broker of the cluster
UNKNOWN_OFFSET_ID = "0A0000010000270F0000000000000000"
#: a unique key (the RocketMQ 5 clients' 34 hex digits) no message has
UNKNOWN_UNIQUE_KEY = "01ABCDEF0123456789ABCDEF0123456789"


@dataclass
class Env:
    cluster: Cluster
    console: Daemon
    base: str
    #: the offset id of the message sent to topic T (keys "k1"), consumed by group billing
    msg_id: str

    def logs(self) -> str:
        return self.cluster.logs() + f"\n--- console\n{self.console.log()[-3000:]}"


def error_of(page: str) -> str:
    """The error page's one line (its ``#error``), HTML entities as the page has them."""
    found = re.search(r'<p class="error" id="error">(.*?)</p>', page, re.S)
    return found.group(1) if found else ""


def shown(page: str) -> str:
    """What an assertion shows of a page: its error line, else its end."""
    return error_of(page) or page[-1500:]


def console_for(tmp: Path, controllers: str, timeout: float) -> tuple[Daemon, str]:
    """rmq-console for ``controllers`` waiting ``timeout`` s for an answer, started and
    listening; its base URL."""
    config = tmp / f"console-{free_port()}.toml"
    config.write_text(f'controllers = "{controllers}"\nrequest_timeout = {timeout}\n')
    console, port = console_process(tmp, "--config", str(config))
    console.start()
    try:
        wait_until(lambda: port_open(port), "the console to listen", 30, on_timeout=console.log)
    except BaseException:
        console.stop()
        raise
    return console, f"http://127.0.0.1:{port}/c/default"


async def send_and_consume(cluster: Cluster) -> str:
    """Topic T with one message (keys k1) that group billing consumed; the message's id."""
    await create_once_registered(cluster, "T", 2, "topic T on broker-a")
    async with Producer(cluster.controller_addresses, send_deadline=30.0) as producer:
        sent = await producer.send("T", b"hello", keys="k1")
    await consumed(cluster, "billing", "T", 1)
    return sent.msg_id


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:
    tmp = tmp_path_factory.mktemp("console-not-found")
    cluster = Cluster(tmp)
    console: Daemon | None = None
    try:
        cluster.start_controllers()
        cluster.add_group("broker-a", 1, config=STEADY_MASTER)
        msg_id = asyncio.run(send_and_consume(cluster))
        console, base = console_for(tmp, cluster.controller_addresses, 10.0)
        yield Env(cluster, console, base, msg_id)
    finally:
        if console is not None:
            console.stop()
        cluster.thaw_and_stop()


def csrf_cookie(env: Env) -> tuple[str, str]:
    """A CSRF token the console gave, and the Cookie header that carries it."""
    with urllib.request.urlopen(f"{env.base}/topics", timeout=30) as answer:
        cookie = answer.headers["Set-Cookie"].split(";")[0]
    return cookie.partition("=")[2], cookie


def test_a_topic_that_does_not_exist_is_a_404(env: Env) -> None:
    status, page = fetch(f"{env.base}/topics/nosuch")
    assert status == 404, shown(page)
    assert error_of(page) == "topic nosuch does not exist"
    # Searching its messages, by key or by time: the same.
    for query in ("?topic=nosuch&key=k1", "?topic=nosuch"):
        status, page = fetch(f"{env.base}/messages{query}")
        assert (status, error_of(page)) == (404, "topic nosuch does not exist"), query
    # No static topic of that name (the controllers' answer).
    status, page = fetch(f"{env.base}/static-topics/nosuch")
    assert status == 404 and "nosuch is not a static topic" in error_of(page), shown(page)
    # Sending a test message to it from a (forged) form.
    token, cookie = csrf_cookie(env)
    status, page = post_form(f"{env.base}/topics/nosuch/send", {"csrf": token, "body": "x"}, cookie)
    assert status == 404 and "topic nosuch does not exist" in error_of(page), shown(page)
    # Deleting it.
    status, page = post_form(
        f"{env.base}/topics/delete", {"csrf": token, "topic": "nosuch"}, cookie
    )
    assert status == 404, shown(page)
    # The topic that exists still shows.
    status, page = fetch(f"{env.base}/topics/T")
    assert status == 200 and "Topic T" in page, shown(page)
    assert "Traceback" not in env.console.log()


def test_a_malformed_message_id_is_a_400_naming_what_is_wrong(env: Env) -> None:
    for msg_id, wrong in [
        ("xyz", "&#39;xyz&#39; are not hex digits"),
        ("12345z", "&#39;z&#39; is not a hex digit"),
        ("0123", "it has 4 hex digits"),
        ("A" * 65, "it has 65 hex digits"),
    ]:
        status, page = fetch(f"{env.base}/messages/{msg_id}")
        assert status == 400, (msg_id, shown(page))
        line = error_of(page)
        assert line.startswith(f"not a message id: &#39;{msg_id}&#39;: {wrong}"), line
        assert "an offset id is 32 hex digits" in line
    # Delivering such an id to a group again: refused the same way, nothing sent.
    token, cookie = csrf_cookie(env)
    status, page = post_form(
        f"{env.base}/messages/xyz/resend", {"csrf": token, "group": "billing"}, cookie
    )
    assert status == 400 and "&#39;xyz&#39; are not hex digits" in error_of(page), shown(page)


def test_a_well_formed_message_id_not_found_is_a_404(env: Env) -> None:
    for msg_id in (UNKNOWN_OFFSET_ID, UNKNOWN_UNIQUE_KEY):
        status, page = fetch(f"{env.base}/messages/{msg_id}")
        assert status == 404, (msg_id, shown(page))
        assert error_of(page).startswith(f"message {msg_id} not found: "), shown(page)
    # In a topic that does not exist: nothing can hold it there.
    status, page = fetch(f"{env.base}/messages/{UNKNOWN_UNIQUE_KEY}?topic=nosuch")
    assert status == 404 and "does not exist" in error_of(page), shown(page)
    status, page = fetch(f"{env.base}/messages/{env.msg_id}")
    assert status == 200 and f"Message {env.msg_id}" in page, shown(page)
    # Re-sending a dead letter the group's DLQ does not hold: every broker group answered so.
    token, cookie = csrf_cookie(env)
    status, page = post_form(
        f"{env.base}/groups/billing/dlq/resend",
        {"csrf": token, "msg_id": UNKNOWN_OFFSET_ID},
        cookie,
    )
    assert status == 404, shown(page)
    assert f"{UNKNOWN_OFFSET_ID} is not a message of the DLQ of &#39;billing&#39;" in page


def test_a_group_that_does_not_exist_is_a_404(env: Env) -> None:
    unknown = "consumer group nosuch does not exist"
    for part in ("", "/live", "/dlq", "/dlq.jsonl"):
        status, page = fetch(f"{env.base}/groups/nosuch{part}")
        assert status == 404, (part, shown(page))
        assert error_of(page).startswith(unknown), (part, shown(page))
    # The group that consumed T: its page, its live part and its (empty) dead letters.
    for part in ("", "/live", "/dlq", "/dlq.jsonl"):
        status, page = fetch(f"{env.base}/groups/billing{part}")
        assert status == 200, (part, shown(page))
    status, page = fetch(f"{env.base}/groups/billing")
    assert "Consumer group billing" in page and ">T<" in page, shown(page)
    # Its forms: resetting the offsets of a group no broker has, or skipping its backlog.
    token, cookie = csrf_cookie(env)
    for action, fields in (("reset", {"time": "now"}), ("skip", {})):
        status, page = post_form(
            f"{env.base}/groups/nosuch/{action}", {"csrf": token, "topic": "T", **fields}, cookie
        )
        assert status == 404, (action, shown(page))
        assert "SUBSCRIPTION_GROUP_NOT_EXIST" in error_of(page), (action, shown(page))
    # Deleting it.
    status, page = post_form(f"{env.base}/groups/nosuch/delete", {"csrf": token}, cookie)
    assert status == 404, shown(page)


def test_a_broker_that_does_not_answer_is_still_a_502(env: Env, tmp_path: Path) -> None:
    """The only broker frozen (still registered): whether the message exists is not known,
    so its page is the cluster's failure, not a 404; a malformed id is still a 400."""
    console, base = console_for(tmp_path, env.cluster.controller_addresses, 1.0)
    (broker,) = env.cluster.brokers
    broker.signal(signal.SIGSTOP)
    try:
        for msg_id in (env.msg_id, UNKNOWN_UNIQUE_KEY):
            status, page = fetch(f"{base}/messages/{msg_id}")
            assert status == 502, (msg_id, shown(page))
            assert f"message {msg_id} not found" in error_of(page), shown(page)
        status, page = fetch(f"{base}/messages/xyz")
        assert status == 400, shown(page)
    finally:
        broker.signal(signal.SIGCONT)
        console.stop()
    assert "Traceback" not in console.log()


def test_controllers_that_cannot_be_reached_are_still_a_502(tmp_path: Path) -> None:
    nobody = f"127.0.0.1:{free_port()}"  # no controller listens there
    console, base = console_for(tmp_path, nobody, 1.0)
    try:
        for path in (
            "/topics/nosuch",
            "/groups/nosuch",
            "/groups/nosuch/dlq",
            f"/messages/{UNKNOWN_UNIQUE_KEY}",
            "/messages?topic=nosuch",
            "/static-topics/nosuch",
        ):
            status, page = fetch(base + path)
            assert status == 502, (path, shown(page))
            assert nobody in error_of(page), (path, shown(page))
        status, page = fetch(f"{base}/messages/xyz")
        assert status == 400, shown(page)
    finally:
        console.stop()
    assert "Traceback" not in console.log()


def actions_logged(env: Env, action: str) -> list[dict[str, object]]:
    """The console's ``console action`` log lines of ``action``, oldest first."""
    lines = [
        json.loads(line) for line in env.console.log().splitlines() if "console action" in line
    ]
    return [line for line in lines if line.get("action") == action]


def outcomes_since(env: Env, action: str, since: int, count: int) -> list[object]:
    """The outcomes of ``action``'s log lines after the first ``since``, once at least ``count``
    are there: a daemon's log lines reach its file from a writer thread (daemon/logs.py), so
    a line logged before an answer may land after it."""
    wait_until(
        lambda: len(actions_logged(env, action)) >= since + count,
        f"{count} {action!r} log lines",
        10,
    )
    return [a["outcome"] for a in actions_logged(env, action)[since:]]


def max_offsets(env: Env, topic: str) -> dict[str, int]:
    """Each queue's max offset of ``topic`` as its page shows them (topicStatus)."""
    status, page = fetch(f"{env.base}/topics/{topic}")
    assert status == 200, shown(page)
    rows = re.findall(r"<td>(broker-\w+)</td>\s*<td[^>]*>(\d+)</td>\s*<td[^>]*>\d+</td>"
                      r"\s*<td[^>]*>(\d+)</td>", page)  # fmt: skip
    assert rows, page[-1500:]
    return {f"{b}/{q}": int(m) for b, q, m in rows}


def test_a_test_message_without_a_body_is_a_400_and_nothing_is_sent(env: Env) -> None:
    """The brokers refuse an empty body: the form says so itself (bad input, a 400), not as a
    failure of the cluster (502) after sending it."""
    before = max_offsets(env, "T")
    logged = len(actions_logged(env, "send test message"))
    token, cookie = csrf_cookie(env)
    status, page = post_form(
        f"{env.base}/topics/T/send", {"csrf": token, "keys": "empty-1", "body": ""}, cookie
    )
    assert status == 400, shown(page)
    assert error_of(page) == "the body is empty: a message needs one; nothing was sent"
    assert max_offsets(env, "T") == before
    outcomes = outcomes_since(env, "send test message", logged, 1)
    assert outcomes == ["refused"], outcomes


def test_a_reset_or_skip_without_a_topic_is_a_400(env: Env) -> None:
    """A group with no offset on any topic has no topic to pick on its page: the reset and
    skip forms are then not shown, and a POST without a topic is refused before anything is
    sent (a 400 saying what is missing), not the controllers' BAD_REQUEST as a 502."""
    token, cookie = csrf_cookie(env)
    status, page = post_form(
        f"{env.base}/groups/no-offsets/settings", {"csrf": token, "retry_max_times": "3"}, cookie
    )
    assert status == 200 and "settings of no-offsets stored" in page, shown(page)
    status, page = fetch(f"{env.base}/groups/no-offsets")
    assert status == 200, shown(page)
    # the forms are there for the page's refresh to show once a topic comes, hidden until then
    forms = page.split('<div id="reset-forms" hidden>', 1)
    assert len(forms) == 2, shown(page)
    assert 'id="reset-offset"' not in forms[0] and 'id="skip-backlog"' not in forms[0]
    assert 'id="reset-offset"' in forms[1] and 'id="skip-backlog"' in forms[1]
    assert "no offset on any topic: nothing to reset" in page
    assert '<p class="note" id="no-reset">' in page  # that note not hidden
    logged = len(actions_logged(env, "reset offset")), len(actions_logged(env, "skip backlog"))
    for group in ("no-offsets", "billing"):
        for action, fields in (("reset", {"time": "now"}), ("skip", {})):
            status, page = post_form(
                f"{env.base}/groups/{group}/{action}", {"csrf": token, **fields}, cookie
            )
            assert status == 400, (group, action, shown(page))
            assert error_of(page) == "give the topic whose offsets to reset", (group, action)
    for action, before in zip(("reset offset", "skip backlog"), logged, strict=True):
        outcomes = outcomes_since(env, action, before, 2)
        assert outcomes == ["refused", "refused"], (action, outcomes)


def test_a_dead_letter_resend_with_a_malformed_id_is_a_400(env: Env) -> None:
    """Said before anything is sent, as rmqctl resendDLQ --msg-id says it, not a broker's
    BAD_REQUEST as a 502."""
    token, cookie = csrf_cookie(env)
    logged = len(actions_logged(env, "resend dead letters"))
    for msg_id, wrong in (("xyz", "&#39;xyz&#39; are not hex digits"),
                          (UNKNOWN_UNIQUE_KEY, "it has 34 hex digits")):  # fmt: skip
        status, page = post_form(
            f"{env.base}/groups/billing/dlq/resend", {"csrf": token, "msg_id": msg_id}, cookie
        )
        assert status == 400, (msg_id, shown(page))
        line = error_of(page)
        assert line.startswith(f"not a dead letter&#39;s id: &#39;{msg_id}&#39;: {wrong}"), line
    outcomes = outcomes_since(env, "resend dead letters", logged, 2)
    assert outcomes == ["refused", "refused"], outcomes


def test_a_search_by_key_that_finds_more_than_a_page_says_so(env: Env) -> None:
    """One message more than the page shows, all with one key: the page lists the newest
    (the brokers' key index answers the newest, as rmqctl queryMsgByKey says) and says there
    are more, rather than a full page that looks like all there is."""

    async def send() -> list[str]:
        async with Producer(env.cluster.controller_addresses, send_deadline=30.0) as producer:
            return [
                (await producer.send("T", b"many", keys="many")).msg_id
                for _ in range(MAX_FOUND + 1)
            ]

    sent = asyncio.run(send())

    def listed() -> list[str]:
        status, page = fetch(f"{env.base}/messages?topic=T&key=many")
        assert status == 200, shown(page)
        return re.findall(r'<a href="/c/default/messages/([0-9A-F]+)\?topic=T">', page)

    wait_until(lambda: sent[-1] in listed(), "the newest message listed", 30)
    assert listed() == sent[1:]
    status, page = fetch(f"{env.base}/messages?topic=T&key=many")
    assert status == 200, shown(page)
    assert f"More than {MAX_FOUND} messages with this key: showing the newest" in page
    # By time, the oldest of the range (the first ones stored).
    status, page = fetch(f"{env.base}/messages?topic=T&begin=-1h")
    assert status == 200, shown(page)
    assert f"More than {MAX_FOUND} messages in this range: showing the oldest" in page


def test_the_groups_page_lists_many_groups_a_page_at_a_time(env: Env) -> None:
    """With more consumer groups than a page holds (a cluster of thousands of groups listed
    every one in one page, a row each), the groups page shows GROUPS_PER_PAGE of them and
    links to the others, keeping the order chosen; every group is on one of the pages."""
    many = [f"paged-{i:03d}" for i in range(GROUPS_PER_PAGE + 20)]

    async def commit() -> None:
        conn = await RemotingClient.connect(env.cluster.brokers[0].address)
        try:
            for group in many:
                ask = ConsumerOffsetUpdate(group=group, topic="T", queue_id=0, offset=0)
                resp = await conn.request(ask.code, *ask.encode(), 30)
                assert resp.code == ResponseCode.SUCCESS, (group, resp.code, resp.header)
        finally:
            conn.close()

    asyncio.run(commit())

    def rows(query: str) -> list[str]:
        status, page = fetch(f"{env.base}/groups{query}")
        assert status == 200, shown(page)
        return re.findall(r'<tr data-group="([^"]+)">', page)

    wait_until(lambda: many[-1] in rows("?sort=group&page=2"), "the last group listed", 30)
    first, second = rows("?sort=group"), rows("?sort=group&page=2")
    assert len(first) == GROUPS_PER_PAGE
    assert first == sorted(first) and second == sorted(second) and first[-1] < second[0]
    assert set(many) <= set(first + second)
    status, page = fetch(f"{env.base}/groups?sort=group")
    total = len(first) + len(second)
    assert f"Groups 1 to {GROUPS_PER_PAGE} of {total}, page 1 of 2" in page, shown(page)
    assert 'href="?sort=group&amp;page=2" id="next-page"' in page, shown(page)
    # Past the last page: the last page; not a number: a 400 saying so.
    assert rows("?sort=group&page=9") == second
    status, page = fetch(f"{env.base}/groups?page=x")
    assert (status, error_of(page)) == (400, "page must be a number from 1 (not &#39;x&#39;)")
