"""rmq-console in a real browser (headless Chromium through Selenium) against a real cluster:
three controllers and broker group broker-a of two brokers as processes, and rmq-console as a
process beside them (one of each for the module: the suite's time is short).

- The cluster page shows the controllers (one leader, its term and commit index) and broker-a's
  master and SyncStateSet as the controllers give them; after the master is killed -9 it shows
  the new master without a reload (the page updates itself).
- A topic created through the topics page is listed by rmqctl topicList; a test message sent
  from its page is found by rmqctl queryMsgByKey, and on the messages page by its key: its
  page shows its keys, its JSON body pretty-printed and its trace (the brokers' trace_enabled);
  delivering it again to a group with no live member shows the cluster's refusal.
- A group's page shows its lag rise as messages are sent, and fall to 0 when skipped; a reset
  to a time before the sends brings the lag back (the form, then the page's own update); the
  group deleted from its page is gone (rmqctl consumerProgress -g: no offsets or members).
- A real SDK consumer running while the page watches: its member listed, the group's lag rising
  as messages are sent while its handler is held and back to 0 once it runs, without a reload;
  a message re-sent to the group from its page reaches that live member.
- A group deleted by rmqctl while its page is open: the page's live part says it is gone
  (its update's 404) instead of keeping the last figures.
- A Prometheus with the production alert rules: its firing alert listed on the cluster page.
- A dead letter (a group with retryMaxTimes 0 whose handler fails) is listed on the group's DLQ
  page, re-sent from there, and exported as JSON lines.
- Bad input is refused with a clear message and changes nothing: a bad topic name, a reset to a
  future time, a POST with a forged CSRF token, an unknown cluster.

Screenshots of each page go to the module's temp directory (kept when a test fails).
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from client import Consumer, Producer
from client.admin import Admin
from client.message import ReceivedMessage
from protocol.codes import ResponseCode
from protocol.pull import ConsumerOffsetUpdate
from remoting.client import RemotingClient
from tests.console.browser import ConsoleEnv, console_process, post_form, require_chromium, text_of
from tests.deploy.test_prometheus_e2e import Prometheus, prometheus_binary
from tests.support.cli import rmqctl_run as rmqctl
from tests.support.cluster import Cluster
from tests.support.messages import FAST_CONSUMER
from tests.support.procs import port_open
from tests.support.wait import wait_until, wait_until_async

pytestmark = pytest.mark.multiprocess

LAG_TOPIC = "ConsoleLag"
LAG_GROUP = "console-lag"


class Env(ConsoleEnv):
    #: a real Prometheus with the production alert rules, the console's prometheus_url (None
    #: where it is not installed: only the alerts test skips)
    prometheus: Prometheus | None = None

    def ctl(self, *args: str) -> Any:
        done = rmqctl("--json", "-a", self.cluster.controller_addresses, *args)
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout) if done.stdout.strip() else None

    def logs(self) -> str:
        return self.cluster.logs() + f"\n--- console\n{self.console.log()[-3000:]}"


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:
    require_chromium()  # before starting a cluster for nothing
    tmp = tmp_path_factory.mktemp("console")
    cluster = Cluster(tmp)
    # Prometheus with deploy/prometheus/rules/rmq-alerts.yml scraping no controller: the rule
    # RmqNoActiveController fires after its 30 s, while the module's other tests run.
    prometheus = Prometheus(tmp, [], []) if shutil.which("prometheus") else None
    extra = ["--prometheus-url", f"http://127.0.0.1:{prometheus.port}"] if prometheus else []
    console, port = console_process(tmp, "--controllers", cluster.controller_addresses, *extra)
    try:
        if prometheus is not None:
            prometheus.start()
        cluster.start_controllers()
        cluster.add_group("broker-a", 2, config="trace_enabled = true\n")
        console.start()
        wait_until(lambda: port_open(port), "the console to listen", 30, on_timeout=console.log)
        e = Env(cluster, console, f"http://127.0.0.1:{port}", tmp)
        e.prometheus = prometheus

        def both_in_sync() -> bool:
            done = rmqctl(
                "--json", "-a", cluster.controller_addresses, "getSyncStateSet", "-b", "broker-a"
            )
            return done.returncode == 0 and len(json.loads(done.stdout)["syncStateSet"]) == 2

        wait_until(both_in_sync, "broker-a's two brokers in sync", 60, on_timeout=cluster.logs)
        yield e
    finally:
        console.stop()
        cluster.stop()
        if prometheus is not None:
            prometheus.stop()


#: Where the README's screenshots are made (RMQ_CONSOLE_SHOTS=docs/images pytest ...).
README_SHOTS = os.environ.get("RMQ_CONSOLE_SHOTS")


def shot(env: Env, browser: Any, name: str) -> None:
    """A screenshot of the page under the module's temp directory (kept when a test fails),
    and with $RMQ_CONSOLE_SHOTS set there too, as ``console-<name>.png``."""
    browser.save_screenshot(str(env.shots / f"{name}.png"))
    if README_SHOTS:
        browser.save_screenshot(str(Path(README_SHOTS) / f"console-{name}.png"))


def post(env: Env, path: str, fields: dict[str, str], cookie: str = "") -> tuple[int, str]:
    """A POST as another site's page or a script would make it: no browser, its own cookie."""
    return post_form(env.url + path, fields, cookie)


def status_of(url: str) -> int:
    """The HTTP status of a GET of ``url`` (an error status too)."""
    try:
        with urllib.request.urlopen(url, timeout=30) as resp:
            return int(resp.status)
    except urllib.error.HTTPError as exc:
        return exc.code


def topic_names(env: Env) -> set[str]:
    return {t["topic"] for t in env.ctl("topicList")["topics"]}


def listed_topics(env: Env, browser: Any, kind: str) -> list[str | None]:
    """The topics page's rows under filter ``kind``, once it lists some (30 s). The page reads
    the topic list and routes from any controller's applied state, and a follower applies a
    commit of the leader's a heartbeat later: the page is loaded again until then."""

    def rows() -> list[str | None]:
        browser.get(f"{env.url}/c/default/topics?kind={kind}")
        found = browser.find_elements("css selector", "#topics tr[data-topic]")
        return [r.get_attribute("data-topic") for r in found]

    return wait_until(rows, f"the {kind} filter to list a topic", 30, interval=0.2)


def test_topics_page_creates_a_topic_rmqctl_lists_and_sends_a_message_to_it(
    env: Env, browser: Any
) -> None:
    browser.get(f"{env.url}/c/default/topics")
    assert "Authentication is off" in text_of(browser, "#auth-note")
    browser.find_element("id", "new-topic").send_keys("ConsolePageTopic")
    queues = browser.find_element("id", "new-queues")
    queues.clear()
    queues.send_keys("4")
    browser.find_element("id", "create-topic-button").click()
    wait_until(lambda: "created" in text_of(browser, "#notice"), "the page to say created", 30)
    assert "ConsolePageTopic" in text_of(browser, "#topics")
    shot(env, browser, "topics")
    # Found by part of its name (any case), the only one; the page says how many match.
    browser.find_element("id", "topic-filter").send_keys("pagetopic\n")  # Enter: no button
    wait_until(lambda: "matching" in text_of(browser, "#topics-page"), "the filtered list", 30)
    assert text_of(browser, "#topics-page") == "Topics 1 to 1 of 1 matching"
    rows = browser.find_elements("css selector", "#topics tr[data-topic]")
    assert [r.get_attribute("data-topic") for r in rows] == ["ConsolePageTopic"]
    # A static topic (its route's logical queues): under the static filter alone, its page
    # showing each logical queue's broker group and physical queue.
    env.ctl("updateStaticTopic", "-t", "ConsoleStatic", "-q", "2")
    assert listed_topics(env, browser, "static") == ["ConsoleStatic"]
    browser.find_element("link text", "ConsoleStatic").click()
    wait_until(lambda: text_of(browser, "#logical-queues"), "the logical queues", 30)
    assert text_of(browser, "#logical-queues").splitlines()[1:] == [
        "0 broker-a 0",
        "1 broker-a 1",
    ], text_of(browser, "#logical-queues")
    assert "ConsolePageTopic" in topic_names(env)

    browser.get(f"{env.url}/c/default/topics")
    browser.find_element("link text", "ConsolePageTopic").click()
    wait_until(lambda: text_of(browser, "#queues"), "the topic's queues", 30)
    browser.find_element("id", "message-keys").send_keys("order-4711")
    browser.find_element("id", "message-body").send_keys('{"order": 4711}')
    browser.find_element("id", "send-button").click()
    wait_until(lambda: "sent" in text_of(browser, "#notice"), "the page to say sent", 30)
    msg_id = text_of(browser, "#notice").split()[1]
    shot(env, browser, "topic")

    def found() -> bool:
        done = rmqctl(
            "--json", "-a", env.cluster.controller_addresses,
            "queryMsgByKey", "-t", "ConsolePageTopic", "-k", "order-4711",
        )  # fmt: skip
        return done.returncode == 0 and msg_id in done.stdout

    wait_until(found, f"queryMsgByKey to find {msg_id}", 30)

    # Found by key on the messages page, and opened: headers, the body as JSON, its trace.
    browser.find_element("link text", "Messages").click()
    browser.find_element("id", "find-topic").send_keys("ConsolePageTopic")
    browser.find_element("id", "find-key").send_keys("order-4711")
    browser.find_element("id", "find-button").click()
    wait_until(lambda: msg_id in text_of(browser, "#found"), "the message found by key", 30)
    shot(env, browser, "messages")
    browser.find_element("link text", msg_id).click()
    wait_until(lambda: text_of(browser, "#message-body"), "the message's page", 30)
    assert text_of(browser, "#message-keys") == "order-4711"
    assert text_of(browser, "#message-body") == '{\n  "order": 4711\n}'

    # The broker's trace (trace_enabled; its records are written in batches): the send, stored.
    def traced() -> bool:
        if "stored" in text_of(browser, "#trace"):
            return True
        browser.refresh()
        return False

    wait_until(traced, "the send in the message's trace", 30, interval=1.0)
    assert "send" in text_of(browser, "#trace")

    # Delivering it again to a group that does not exist: the cluster's refusal, on a page.
    browser.find_element("id", "resend-group").send_keys("nobody-home")
    browser.find_element("id", "resend-button").click()
    wait_until(lambda: text_of(browser, "#error"), "the refusal", 30)
    refusal = text_of(browser, "#error")
    assert "SUBSCRIPTION_GROUP_NOT_EXIST" in refusal and "nobody-home does not exist" in refusal
    shot(env, browser, "message")


def test_topics_page_sets_a_topics_message_type_and_permission(env: Env, browser: Any) -> None:
    from selenium.webdriver.support.ui import Select

    browser.get(f"{env.url}/c/default/topics")
    browser.find_element("id", "new-topic").send_keys("ConsoleFifo")
    Select(browser.find_element("id", "new-type")).select_by_value("FIFO")
    browser.find_element("id", "create-topic-button").click()
    wait_until(lambda: "created" in text_of(browser, "#notice"), "the page to say created", 30)
    assert "message type FIFO" in text_of(browser, "#notice")
    # Listed under the FIFO filter, alone, with its type; not under scheduled.
    assert listed_topics(env, browser, "fifo") == ["ConsoleFifo"]
    assert text_of(browser, "#topics tr[data-topic] td.type") == "FIFO"
    assert text_of(browser, "#topics tr[data-topic] td.perm") == "RW-"
    shot(env, browser, "topics-fifo")
    browser.get(f"{env.url}/c/default/topics?kind=scheduled")
    assert not browser.find_elements("css selector", "#topics tr[data-topic]")
    # Read only, set from the form (the type kept): rmqctl sendMessage is refused.
    browser.get(f"{env.url}/c/default/topics")
    browser.find_element("id", "new-topic").send_keys("ConsoleFifo")
    Select(browser.find_element("id", "new-perm")).select_by_value("4")
    browser.find_element("id", "create-topic-button").click()
    wait_until(lambda: "perm R--" in text_of(browser, "#notice"), "the page to say R--", 30)
    sent = rmqctl(
        "-a", env.cluster.controller_addresses, "sendMessage", "-t", "ConsoleFifo", "-p", "x"
    )
    assert sent.returncode == 1, (sent.stdout, sent.stderr)
    assert "the topic[ConsoleFifo] sending message is forbidden" in sent.stderr, sent.stderr
    browser.find_element("link text", "ConsoleFifo").click()
    wait_until(lambda: text_of(browser, "#route"), "the topic's route", 30)
    topic_page = browser.current_url

    def route_perms() -> list[str]:
        # A follower's route may still have the permission from before (listed_topics).
        browser.get(topic_page)
        return [c.text for c in browser.find_elements("css selector", "#route td.perm")]

    wait_until(lambda: route_perms() == ["4 (R--)"], "the route to say R--", 30, interval=0.2)
    assert [c.text for c in browser.find_elements("css selector", "#route td.type")] == ["FIFO"]


def test_bad_input_is_refused_with_a_clear_message_and_changes_nothing(
    env: Env, browser: Any
) -> None:
    before = topic_names(env)
    browser.get(f"{env.url}/c/default/topics")
    browser.find_element("id", "new-topic").send_keys("bad name!")
    browser.find_element("id", "create-topic-button").click()
    wait_until(lambda: text_of(browser, "#error"), "the error page", 30)
    assert "bad topic 'bad name!'" in text_of(browser, "#error")
    assert "Traceback" not in browser.page_source
    shot(env, browser, "refused-topic")

    # A POST from elsewhere: without the console's cookie, then with a cookie but a forged token.
    status, page = post(env, "/c/default/topics/create", {"topic": "Forged", "queues": "1"})
    assert status == 403 and "CSRF token is missing or forged" in page
    status, page = post(
        env,
        "/c/default/topics/create",
        {"topic": "Forged", "queues": "1", "csrf": "x" * 43},
        cookie="rmq_console_csrf=" + "y" * 43,
    )
    assert status == 403 and "nothing was changed" in page
    assert topic_names(env) == before

    with urllib.request.urlopen(f"{env.url}/c/default/cluster", timeout=30) as resp:
        assert resp.status == 200
    for query, refusal in [
        ("page=0", "page must be a number from 1 (not '0')"),
        ("kind=bogus", "no topic kind 'bogus'"),
    ]:
        browser.get(f"{env.url}/c/default/topics?{query}")
        assert refusal in text_of(browser, "#error"), query
    browser.get(f"{env.url}/c/elsewhere/cluster")
    assert "no cluster named 'elsewhere'" in text_of(browser, "#error")


def test_group_page_shows_lag_rise_and_fall_and_resets_by_time(env: Env, browser: Any) -> None:
    env.ctl("updateTopic", "-t", LAG_TOPIC, "-q", "2")
    started = datetime.now(UTC).replace(microsecond=0)
    time.sleep(1.0)  # the reset's time is whole seconds: the sends come after it
    env.ctl("sendMessage", "-t", LAG_TOPIC, "-p", "first", "--count", "20")
    done = rmqctl(
        "-a", env.cluster.controller_addresses,
        "consumeMessage", "-t", LAG_TOPIC, "-g", LAG_GROUP, "--count", "20", "--timeout", "60",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr

    browser.get(f"{env.url}/c/default/groups/{LAG_GROUP}")
    wait_until(lambda: text_of(browser, "#total-lag") == "0", "lag 0 after consuming all", 30)
    env.ctl("sendMessage", "-t", LAG_TOPIC, "-p", "more", "--count", "7")
    # No reload: the page's own update shows the lag rise.
    wait_until(lambda: text_of(browser, "#total-lag") == "7", "the lag to rise to 7", 30)
    shot(env, browser, "group")

    browser.find_element("id", "skip-button").click()
    wait_until(lambda: "reset" in text_of(browser, "#notice"), "the skip's notice", 30)
    wait_until(lambda: text_of(browser, "#total-lag") == "0", "the lag back to 0", 30)

    reset_time = browser.find_element("id", "reset-time")
    reset_time.clear()
    reset_time.send_keys(str(int(time.time() * 1000) + 3_600_000))
    browser.find_element("id", "reset-button").click()
    wait_until(lambda: text_of(browser, "#error"), "the refusal", 30)
    assert "is in the future" in text_of(browser, "#error")
    browser.get(f"{env.url}/c/default/groups/{LAG_GROUP}")
    wait_until(lambda: text_of(browser, "#total-lag") == "0", "lag still 0 (nothing reset)", 30)

    reset_time = browser.find_element("id", "reset-time")
    reset_time.clear()
    reset_time.send_keys(started.isoformat())
    browser.find_element("id", "reset-button").click()
    wait_until(lambda: "reset" in text_of(browser, "#notice"), "the reset's notice", 30)
    wait_until(lambda: text_of(browser, "#total-lag") == "27", "every message again behind", 30)

    browser.get(f"{env.url}/c/default/groups")
    wait_until(lambda: LAG_GROUP in text_of(browser, "#groups"), "the group listed", 30)
    shot(env, browser, "groups")

    browser.get(f"{env.url}/c/default/groups/{LAG_GROUP}")
    browser.find_element("id", "delete-group-button").click()
    browser.switch_to.alert.accept()
    wait_until(lambda: "deleted" in text_of(browser, "#notice"), "the group deleted", 30)
    assert LAG_GROUP not in text_of(browser, "#groups")
    gone = rmqctl("-a", env.cluster.controller_addresses, "consumerProgress", "-g", LAG_GROUP)
    assert gone.returncode == 1, gone.stderr
    assert "has no offsets or members on any broker group" in gone.stderr, gone.stderr


class LiveConsumer:
    """A real SDK consumer of ``group`` on ``topic`` running in a thread of its own (its own
    event loop) while the browser watches; its handler waits at a gate until :meth:`open`,
    and keeps every body it was handed."""

    def __init__(self, addresses: str, group: str, topic: str) -> None:
        self.addresses, self.group, self.topic = addresses, group, topic
        self.bodies: list[bytes] = []
        self.ready = threading.Event()
        self.failed: list[BaseException] = []
        self._loop = asyncio.new_event_loop()
        self._gate = asyncio.Event()
        self._stop = asyncio.Event()
        self._thread = threading.Thread(target=self._run, name=f"consumer-{group}", daemon=True)

    def __enter__(self) -> LiveConsumer:
        self._thread.start()
        if not self.ready.wait(60) or self.failed:
            raise AssertionError(f"the consumer did not start: {self.failed}")
        return self

    def __exit__(self, *exc: object) -> None:
        self._loop.call_soon_threadsafe(self._gate.set)
        self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(60)

    def open(self) -> None:
        self._loop.call_soon_threadsafe(self._gate.set)

    def _run(self) -> None:
        try:
            self._loop.run_until_complete(self._consume())
        except BaseException as exc:
            self.failed.append(exc)
            self.ready.set()
        finally:
            self._loop.close()

    async def _consume(self) -> None:
        async def handle(msg: ReceivedMessage) -> None:
            await self._gate.wait()
            self.bodies.append(msg.body)

        async with Consumer(self.addresses, self.group, self.topic, **FAST_CONSUMER) as consumer:
            task = asyncio.ensure_future(consumer.process(handle))
            self.ready.set()
            await self._stop.wait()
            task.cancel()


def test_group_page_follows_a_live_consumer_and_resends_a_message_to_it(
    env: Env, browser: Any
) -> None:
    """A consumer running while the page watches: its member listed, the lag rising as
    messages are sent while its handler is held, and back to 0 once it consumes them, without
    a reload; a message re-sent to the group from its page is delivered to the member again."""
    topic, group = "ConsoleLive", "console-live"
    env.ctl("updateTopic", "-t", topic, "-q", "2")
    with LiveConsumer(env.cluster.controller_addresses, group, topic) as consumer:
        # The group exists for the console once a broker has the member's first heartbeat
        # (before that its page is a 404, and an error page does not update itself).
        page = f"{env.url}/c/default/groups/{group}"
        wait_until(lambda: status_of(page) == 200, "the group's page", 30, on_timeout=env.logs)
        browser.get(page)
        wait_until(lambda: topic in text_of(browser, "#members"), "the live member listed", 60)
        assert "python" in text_of(browser, "#members").lower()
        browser.execute_script("window.notReloaded = true;")
        seen: list[int] = []

        def lag_reaches(n: int) -> bool:
            text = text_of(browser, "#total-lag")
            if text.isdigit() and (not seen or seen[-1] != int(text)):
                seen.append(int(text))
            return text == str(n)

        for i in range(3):  # the lag rises batch by batch while the handler is held
            env.ctl("sendMessage", "-t", topic, "-p", f"live-{i}", "--count", "4")
            wait_until(
                lambda i=i: lag_reaches(4 * (i + 1)), f"the lag to rise to {4 * (i + 1)}", 30
            )
        shot(env, browser, "group-live-consumer")
        consumer.open()
        wait_until(lambda: lag_reaches(0), "the lag back to 0 as the consumer runs", 60)
        rise = seen[: seen.index(12) + 1]
        assert rise == sorted(rise) and {4, 8, 12} <= set(rise) and seen[-1] == 0, seen
        assert browser.execute_script("return window.notReloaded === true;")
        wait_until(lambda: len(consumer.bodies) == 12, "the consumer to have all 12", 30)

        # The groups list by TPS: the live group's committed offsets just moved by 12, so its
        # consume TPS (the brokers' last 10 s) is above 0, and the rows come busiest first.
        browser.get(f"{env.url}/c/default/groups?sort=tps")

        def tps_rows() -> list[tuple[str, float]]:
            return [
                (
                    row.get_attribute("data-group"),
                    float(row.find_element("css selector", ".tps").text),
                )
                for row in browser.find_elements("css selector", "#groups tr[data-group]")
            ]

        def live_group_busy() -> bool:
            browser.refresh()
            return any(g == group and tps > 0 for g, tps in tps_rows())

        wait_until(live_group_busy, "the live group's TPS above 0 on the groups page", 30)
        rates = [tps for _, tps in tps_rows()]
        assert rates == sorted(rates, reverse=True), rates
        shot(env, browser, "groups-by-tps")

        # Re-sent from the message's page to the group, whose member is live: it gets it again.
        sent = env.ctl("sendMessage", "-t", topic, "-p", "resend-me", "-k", "resend-me")
        msg_id = sent["results"][0]["msgId"]
        wait_until(lambda: consumer.bodies.count(b"resend-me") == 1, "the first delivery", 30)
        browser.get(f"{env.url}/c/default/messages/{msg_id}?topic={topic}")
        browser.find_element("id", "resend-group").send_keys(group)
        browser.find_element("id", "resend-button").click()
        wait_until(
            lambda: "again" in text_of(browser, "#notice"),
            "the resend's notice",
            30,
            on_timeout=lambda: f"{browser.current_url}: {text_of(browser, 'main')[:500]}",
        )
        assert "1 live member(s)" in text_of(browser, "#notice")
        wait_until(
            lambda: consumer.bodies.count(b"resend-me") == 2,
            "the live member to receive the re-sent message",
            60,
            on_timeout=env.logs,
        )
    assert not consumer.failed, consumer.failed


async def park_a_dead_letter(addresses: str, group: str, topic: str) -> str:
    """A message of ``topic`` in ``group``'s DLQ (retryMaxTimes 0, a handler that fails it);
    its id in the DLQ."""
    async with Admin(addresses) as admin:
        await admin.create_topic(topic, 1)
        await admin.update_sub_group({"groupName": group, "retryMaxTimes": 0})
        async with Producer(addresses) as producer:
            await producer.send(topic, b"poison", keys="poison-1")

        def fail(msg: ReceivedMessage) -> None:
            raise ValueError("cannot parse order")

        async def parked() -> list[dict[str, Any]]:
            return [m for ms in (await admin.query_dlq(group)).values() for m in ms]

        async with Consumer(addresses, group, topic, **FAST_CONSUMER) as consumer:
            task = asyncio.ensure_future(consumer.process(fail))
            try:
                (letter,) = await wait_until_async(parked, "the message in the DLQ", 60)
            finally:
                task.cancel()
    return str(letter["msgId"])


def test_dlq_page_resends_a_dead_letter(env: Env, browser: Any) -> None:
    msg_id = asyncio.run(
        park_a_dead_letter(env.cluster.controller_addresses, "console-dlq", "ConsoleDlq")
    )
    browser.get(f"{env.url}/c/default/groups/console-dlq/dlq")
    wait_until(lambda: msg_id in text_of(browser, "#dlq"), "the dead letter listed", 30)
    assert "cannot parse order" in text_of(browser, "#dlq")
    browser.find_element("css selector", "button.resend-one").click()
    wait_until(lambda: "re-sent 1" in text_of(browser, "#notice"), "the resend's notice", 30)
    assert "resent=True" in text_of(browser, "#dlq")
    shot(env, browser, "dlq")
    with urllib.request.urlopen(
        f"{env.url}/c/default/groups/console-dlq/dlq.jsonl", timeout=30
    ) as resp:
        (line,) = resp.read().decode().splitlines()
    assert json.loads(line)["msgId"] == msg_id
    # The group's settings (getSubGroup) on its page: retryMaxTimes 0 as set.
    browser.get(f"{env.url}/c/default/groups/console-dlq")
    wait_until(lambda: text_of(browser, "#settings"), "the group's settings", 30)
    assert text_of(browser, "#settings").splitlines()[1].split()[:2] == ["broker-a", "0"]


def test_cluster_page_shows_the_master_and_follows_a_failover_without_a_reload(
    env: Env, browser: Any
) -> None:
    state = env.ctl("getSyncStateSet", "-b", "broker-a")
    master = state["masterAddress"]
    browser.get(f"{env.url}/c/default/cluster")
    wait_until(lambda: master in text_of(browser, "#group-broker-a .master"), "the master", 30)
    roles = [e.text for e in browser.find_elements("css selector", "#controllers .role")]
    assert sorted(roles) == ["follower", "follower", "leader"], roles
    leader = env.ctl("getControllerMetaData")
    assert str(leader["term"]) in text_of(browser, "#controllers")
    # brokerStatus's figures beside each replica: put TPS a number, the TPS chart drawn.
    put = text_of(browser, "#group-broker-a .put-tps")
    assert put.replace(".", "", 1).isdigit(), put
    wait_until(
        lambda: browser.find_elements("css selector", "#group-broker-a svg polyline"),
        "the TPS chart",
        30,
    )
    shot(env, browser, "cluster")

    browser.execute_script("window.notReloaded = true;")
    victim = next(b for b in env.cluster.brokers if b.address == master)
    victim.kill9()
    other = next(b for b in env.cluster.brokers if b is not victim)
    started = time.monotonic()
    wait_until(
        lambda: other.address in text_of(browser, "#group-broker-a .master"),
        "the page to show the new master",
        60,
        on_timeout=env.logs,
    )
    print(f"the cluster page showed the new master {time.monotonic() - started:.1f}s after kill -9")
    assert browser.execute_script("return window.notReloaded === true;")
    shot(env, browser, "cluster-after-failover")


def test_cluster_page_shows_the_alerts_firing_in_prometheus(env: Env, browser: Any) -> None:
    """The module's Prometheus (the production rules, no controller scraped) fires
    RmqNoActiveController; the cluster page lists it, critical, with its summary."""
    if env.prometheus is None:
        prometheus_binary()  # skips where it is not installed, fails under CI
    assert env.prometheus is not None
    browser.get(f"{env.url}/c/default/cluster")
    wait_until(
        lambda: "RmqNoActiveController" in text_of(browser, "#alerts"),
        "the firing alert on the cluster page (its rule holds for 30 s first)",
        90,
        on_timeout=lambda: env.prometheus.log() if env.prometheus else "",
    )
    row = text_of(browser, "#alerts tr.alert")
    assert "critical" in row and "No active controller" in row, row
    shot(env, browser, "cluster-alerts")


def test_a_group_deleted_elsewhere_shows_on_its_open_page_without_a_reload(
    env: Env, browser: Any
) -> None:
    """The page's live part, whose update is now a 404, says the group is gone instead of
    keeping its last figures."""
    env.ctl("updateSubGroup", "-g", "console-gone")
    browser.get(f"{env.url}/c/default/groups/console-gone")
    wait_until(lambda: "Total lag" in text_of(browser, "#live"), "the group's live part", 30)
    # A replica another test killed may still be registered: rmqctl then says the group is
    # still there and exits 1; what the page reads (every broker that answers) has none of it.
    addresses = env.cluster.controller_addresses
    rmqctl("-a", addresses, "deleteSubGroup", "-g", "console-gone")
    gone = rmqctl("-a", addresses, "getSubGroup", "-g", "console-gone")
    assert gone.returncode == 1 and "does not exist" in gone.stderr, gone.stderr
    wait_until(
        lambda: "consumer group console-gone does not exist" in text_of(browser, "#live"),
        "the live part to say the group is gone",
        30,
        on_timeout=env.logs,
    )
    assert "Total lag" not in text_of(browser, "#live")
    assert "Authentication is off" not in text_of(browser, "#live")  # not the page's chrome
    shot(env, browser, "group-gone")


def test_the_reset_form_offers_a_static_topic_the_group_took_up_after_the_page_loaded(
    env: Env, browser: Any
) -> None:
    """The reset and skip forms listed the group's topics as of the page load: a static topic
    created (and consumed by the group) while the page was open could not be picked until a
    reload. They now follow the page's live part; the topic picked stays picked."""
    from selenium.webdriver.support.ui import Select

    group, plain, static = "console-pick", "ConsolePickPlain", "ConsolePickStatic"
    env.ctl("updateTopic", "-t", plain, "-q", "1")
    master = env.ctl("getSyncStateSet", "-b", "broker-a")["masterAddress"]

    async def commit(topic: str) -> None:
        conn = await RemotingClient.connect(master)
        try:
            ask = ConsumerOffsetUpdate(group=group, topic=topic, queue_id=0, offset=0)
            resp = await conn.request(ask.code, *ask.encode(), 30)
            assert resp.code == ResponseCode.SUCCESS, resp
        finally:
            conn.close()

    asyncio.run(commit(plain))
    browser.get(f"{env.url}/c/default/groups/{group}")

    def offered(form: str = "reset-offset") -> list[str]:
        found: list[str] = browser.execute_script(
            f"return Array.from(document.querySelector('#{form} select[name=topic]').options)"
            ".map(o => o.value)"
        )
        return found

    wait_until(lambda: offered() == [plain], "the reset form's topics", 30)
    env.ctl("updateStaticTopic", "-t", static, "-q", "1", "-b", "broker-a")
    asyncio.run(commit(static))  # logical queue 0 is broker-a's physical queue 0
    # The old code kept [plain] until a reload.
    wait_until(
        lambda: offered() == [plain, static], "the static topic offered", 30, on_timeout=env.logs
    )
    assert offered("skip-backlog") == [plain, static]
    reset_topic = "#reset-offset select[name=topic]"
    Select(browser.find_element("css selector", reset_topic)).select_by_value(static)
    for _ in range(2):  # two live updates: the pick is not reset by them
        browser.execute_script("document.getElementById('live-topics').dataset.seen = '1'")
        wait_until(
            lambda: browser.execute_script(
                "var e = document.getElementById('live-topics'); return !!e && !e.dataset.seen"
            ),
            "a live update",
            30,
        )
    assert browser.find_element("css selector", reset_topic).get_attribute("value") == static
    shot(env, browser, "group-static-topic-offered")
