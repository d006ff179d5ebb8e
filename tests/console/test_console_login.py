"""rmq-console with login (config key ``login``) on a cluster with authentication on, in a real
browser: three controllers and two broker groups as processes, the first super user made with
the cluster key, a read-only user (a normal user with a sub rule), and rmq-console as a process
whose own credentials (the super user's, credentials_file) serve only to read a logged-in
user's rules.

- A wrong secret is refused on the login page; nothing else is shown before a login.
- The super user sees every form and creates a topic through the page (rmqctl, signed as the
  super user, lists it); the action is logged with the user. It creates a user and gives it a
  rule on the users page (rmqctl listAcl shows it), then deletes the user.
- The read-only user sees the pages and no button that changes anything but its logout; a
  direct POST with its session and a valid CSRF token is refused (403) and changes nothing.
- A normal user allowed to send to one topic sees the send form there and nowhere else; a
  forged POST to another topic is refused by the console (403) and by the cluster.
- The super user edits a user's secret (the user logs in with the new one) and a rule in
  place, a group's settings (rmqctl getSubGroup shows them), creates a static topic and moves
  one of its logical queues (rmqctl staticTopicMapping agrees); bad values are refused with a
  clear message and change nothing.
"""

from __future__ import annotations

import json
import os
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

from tests.cluster.secured import ROOT, create_root, secured_cluster
from tests.console.browser import ConsoleEnv, console_process, post_form, require_chromium, text_of
from tests.support.cli import rmqctl_run as rmqctl
from tests.support.procs import port_open
from tests.support.wait import wait_until, wait_until_async

pytestmark = pytest.mark.multiprocess

READER = ("ops-reader", "reader-Secret-4242")


class Env(ConsoleEnv):
    def as_root(self, *args: str) -> Any:
        env = {**os.environ, "RMQ_ACCESS_KEY": ROOT.access_key, "RMQ_SECRET_KEY": ROOT.secret_key}
        done = rmqctl("--json", "-a", self.cluster.controller_addresses, *args, env=env)
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout) if done.stdout.strip() else None


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:
    require_chromium()
    tmp = tmp_path_factory.mktemp("console-login")
    cluster, key, settings = secured_cluster(tmp)
    config = tmp / "console.toml"
    own = tmp / "console-credentials.toml"
    own.write_text(f'access_key = "{ROOT.access_key}"\nsecret_key = "{ROOT.secret_key}"\n')
    own.chmod(0o600)
    config.write_text(
        f'login = true\ncontrollers = "{cluster.controller_addresses}"\n'
        f'credentials_file = "{own}"\n'
    )
    console, port = console_process(tmp, "--config", str(config))
    try:
        cluster.start_controllers()
        create_root(cluster, key)
        cluster.add_group("broker-a", 1, config=settings)
        cluster.add_group("broker-b", 1, config=settings)
        console.start()
        wait_until(lambda: port_open(port), "the console to listen", 30, on_timeout=console.log)
        e = Env(cluster, console, f"http://127.0.0.1:{port}", tmp)
        e.as_root("createUser", "-u", READER[0], "-p", READER[1])
        e.as_root(
            "createAcl",
            "-s",
            f"User:{READER[0]}",
            "-r",
            "Topic:*,Group:*,Cluster:*",
            "-A",
            "sub,get",
        )

        def listed() -> bool:
            done = rmqctl(
                "--json", "-a", cluster.controller_addresses, "clusterList",
                env={**os.environ, "RMQ_ACCESS_KEY": ROOT.access_key,
                     "RMQ_SECRET_KEY": ROOT.secret_key},
            )  # fmt: skip
            return done.returncode == 0 and all(b in done.stdout for b in ("broker-a", "broker-b"))

        wait_until(listed, "broker-a and broker-b registered", 60, on_timeout=cluster.logs)
        yield e
    finally:
        console.stop()
        cluster.stop()


def log_in(env: Env, browser: Any, user: str, secret: str) -> None:
    browser.delete_all_cookies()
    browser.get(f"{env.url}/c/default/cluster")
    wait_until(lambda: browser.find_elements("id", "login-button"), "the login page", 30)
    browser.find_element("id", "access-key").send_keys(user)
    browser.find_element("id", "secret-key").send_keys(secret)
    browser.find_element("id", "login-button").click()


def buttons(browser: Any) -> list[str]:
    return [b.text for b in browser.find_elements("css selector", "button")]


def test_a_wrong_secret_is_refused_and_nothing_shows_before_a_login(env: Env, browser: Any) -> None:
    log_in(env, browser, ROOT.access_key, "not-the-secret")
    wait_until(lambda: "refused" in text_of(browser, "#error"), "the refusal", 30)
    assert "not-the-secret" not in browser.page_source
    with urllib.request.urlopen(f"{env.url}/c/default/topics", timeout=30) as resp:
        assert resp.url.endswith("/c/default/login")  # redirected, no topic shown


def test_the_super_user_creates_a_topic_through_the_page(env: Env, browser: Any) -> None:
    log_in(env, browser, ROOT.access_key, ROOT.secret_key)
    wait_until(lambda: "Logged in as root" in text_of(browser, "#auth-note"), "the login", 30)
    assert "super user" in text_of(browser, "#auth-note")
    browser.get(f"{env.url}/c/default/topics")
    browser.find_element("id", "new-topic").send_keys("SecuredPageTopic")
    browser.find_element("id", "create-topic-button").click()
    wait_until(lambda: "created" in text_of(browser, "#notice"), "the page to say created", 30)
    topics = {t["topic"] for t in env.as_root("topicList")["topics"]}
    assert "SecuredPageTopic" in topics

    def logged_as_root() -> bool:
        # Log lines reach the file from a writer thread (daemon/logs.py): wait for it.
        actions = [
            json.loads(line) for line in env.console.log().splitlines() if "console action" in line
        ]
        return any(
            a.get("user") == "root" and a.get("target") == "SecuredPageTopic" for a in actions
        )

    wait_until(logged_as_root, "the creation logged as root's console action", 10)


def test_the_super_user_creates_a_user_and_its_rules_and_deletes_them(
    env: Env, browser: Any
) -> None:
    log_in(env, browser, ROOT.access_key, ROOT.secret_key)
    wait_until(lambda: "Logged in as root" in text_of(browser, "#auth-note"), "the login", 30)
    browser.get(f"{env.url}/c/default/users")
    assert READER[0] in text_of(browser, "#users")
    browser.find_element("id", "new-user").send_keys("console-made")
    browser.find_element("id", "new-secret").send_keys("made-Secret-4242")
    browser.find_element("id", "create-user-button").click()
    wait_until(lambda: "created" in text_of(browser, "#notice"), "the user created", 30)
    assert "made-Secret-4242" not in browser.page_source
    browser.find_element("id", "rule-user").send_keys("console-made")
    browser.find_element("id", "rule-resources").send_keys("Topic:Orders")
    browser.find_element("id", "rule-actions").send_keys("pub")
    browser.find_element("id", "create-rules-button").click()
    wait_until(lambda: "rule(s)" in text_of(browser, "#notice"), "the rule created", 30)
    acls = env.as_root("listAcl", "-s", "User:console-made")["acls"]
    rules = [(r["resource"], r["actions"], r["decision"]) for a in acls for r in a["rules"]]
    assert rules == [("Topic:Orders", ["pub"], "allow")]
    browser.save_screenshot(str(env.shots / "users.png"))
    row = browser.find_element("css selector", "tr[data-user='console-made'] button.delete-user")
    row.click()
    browser.switch_to.alert.accept()
    wait_until(lambda: "deleted" in text_of(browser, "#notice"), "the user deleted", 30)
    users = {u["username"] for u in env.as_root("listUser")["users"]}
    assert "console-made" not in users and READER[0] in users


def test_a_read_only_user_finds_no_button_that_changes_anything(env: Env, browser: Any) -> None:
    log_in(env, browser, *READER)
    wait_until(lambda: "read only" in text_of(browser, "#auth-note"), "the read-only login", 30)
    for page in ("cluster", "topics", "topics/SecuredPageTopic", "users"):
        browser.get(f"{env.url}/c/default/{page}")
        wait_until(lambda: text_of(browser, "h1"), f"the {page} page", 30)
        assert buttons(browser) == ["Log out"], (page, buttons(browser))
    browser.save_screenshot(str(env.shots / "read-only-topics.png"))

    # A POST as the read-only user, with its own session and a valid token: refused.
    status, page = forged_post(
        env, browser, "/c/default/topics/create", {"topic": "ReaderTopic", "queues": "1"}
    )
    assert status == 403
    assert "ops-reader may only read" in page
    assert "ReaderTopic" not in {t["topic"] for t in env.as_root("topicList")["topics"]}


SENDER = ("topic-sender", "sender-Secret-4242")


def as_user(env: Env, user: tuple[str, str], *args: str) -> Any:
    """rmqctl signed as ``user``: the finished process."""
    creds = {"RMQ_ACCESS_KEY": user[0], "RMQ_SECRET_KEY": user[1]}
    return rmqctl("--json", "-a", env.cluster.controller_addresses, *args,
                  env={**os.environ, **creds})  # fmt: skip


def forged_post(env: Env, browser: Any, path: str, fields: dict[str, str]) -> tuple[int, str]:
    """A POST with the browser's session and a valid CSRF token, not from a form of the page:
    the status and the page."""
    cookies = {c["name"]: c["value"] for c in browser.get_cookies()}
    cookie = "; ".join(f"{k}={v}" for k, v in cookies.items())
    return post_form(env.url + path, {**fields, "csrf": cookies["rmq_console_csrf"]}, cookie)


def submit(browser: Any, form: Any, values: dict[str, str]) -> None:
    """Fill ``form``'s fields by name (replacing what is there) and submit it."""
    for name, value in values.items():
        field = form.find_element("css selector", f"[name='{name}']")
        field.clear()
        field.send_keys(value)
    form.find_element("css selector", "button[type='submit']").click()


def error_text(browser: Any) -> str:
    wait_until(lambda: text_of(browser, "#error"), "the error page", 30)
    return text_of(browser, "#error")


def test_a_normal_user_sees_and_does_only_what_its_rules_allow(env: Env, browser: Any) -> None:
    env.as_root("createUser", "-u", SENDER[0], "-p", SENDER[1])
    env.as_root("createAcl", "-s", f"User:{SENDER[0]}", "-r", "Topic:*,Group:*,Cluster:*",
                "-A", "sub,get")  # fmt: skip
    env.as_root("createAcl", "-s", f"User:{SENDER[0]}", "-r", "Topic:RightsA", "-A", "pub")
    for topic in ("RightsA", "RightsB"):
        env.as_root("updateTopic", "-t", topic, "-q", "1")
    log_in(env, browser, *SENDER)
    wait_until(lambda: "what its rules allow" in text_of(browser, "#auth-note"), "the login", 30)

    browser.get(f"{env.url}/c/default/topics/RightsA")
    wait_until(lambda: browser.find_elements("id", "send-message"), "the send form on A", 30)
    browser.find_element("id", "message-keys").send_keys("rights-key")
    browser.find_element("id", "message-body").send_keys("allowed on A")
    browser.find_element("id", "send-button").click()
    wait_until(lambda: "sent" in text_of(browser, "#notice"), "the message sent to A", 30)
    browser.save_screenshot(str(env.shots / "normal-user-topic-a.png"))

    browser.get(f"{env.url}/c/default/topics/RightsB")
    wait_until(lambda: text_of(browser, "#queues"), "topic B's page", 30)
    assert not browser.find_elements("id", "send-message")
    assert buttons(browser) == ["Log out"]
    browser.get(f"{env.url}/c/default/topics")
    wait_until(lambda: text_of(browser, "h1"), "the topics page", 30)
    assert not browser.find_elements("id", "create-topic")  # no create rule
    assert not browser.find_elements("css selector", "button.delete-topic")

    status, page = forged_post(env, browser, "/c/default/topics/RightsB/send", {"body": "x"})
    assert status == 403, page
    assert "no rule of topic-sender allows pub on Topic:RightsB" in page
    assert "nothing was changed" in page
    refused = as_user(env, SENDER, "sendMessage", "-t", "RightsB", "-p", "x")
    assert refused.returncode != 0 and "Topic:RightsB" in refused.stderr  # the cluster too
    status, page = forged_post(env, browser, "/c/default/topics/create", {"topic": "RightsC"})
    assert status == 403, page
    topics = {t["topic"] for t in env.as_root("topicList")["topics"]}
    assert "RightsC" not in topics
    stats = env.as_root("topicStatus", "-t", "RightsB")
    assert all(q["maxOffset"] == 0 for q in stats["queues"]), stats

    # A rule given later counts once the console reads the rules again (every RULES_SECONDS).
    env.as_root("createAcl", "-s", f"User:{SENDER[0]}", "-r", "Topic:RightsB", "-A", "pub")

    def send_form_on_b() -> bool:
        browser.get(f"{env.url}/c/default/topics/RightsB")
        wait_until(lambda: text_of(browser, "#queues"), "topic B's page", 30)
        return bool(browser.find_elements("id", "send-message"))

    wait_until(send_form_on_b, "the send form on B once its new rule is read", 90, interval=2)


def test_the_super_user_edits_a_users_secret_and_rule_in_place(env: Env, browser: Any) -> None:
    env.as_root("createUser", "-u", "editable", "-p", "first-Secret-4242")
    env.as_root("createAcl", "-s", "User:editable", "-r", "Topic:Edited", "-A", "pub")
    log_in(env, browser, ROOT.access_key, ROOT.secret_key)
    wait_until(lambda: "Logged in as root" in text_of(browser, "#auth-note"), "the login", 30)
    browser.get(f"{env.url}/c/default/users")
    row = "tr[data-user='editable'] form.update-user"

    # Bad input first: a secret too short is refused, nothing changes.
    submit(browser, browser.find_element("css selector", row), {"secret": "short"})
    assert "secret must be 8 to 256 characters" in error_text(browser)
    assert "short" not in browser.page_source
    browser.get(f"{env.url}/c/default/users")
    submit(browser, browser.find_element("css selector", row), {"secret": "second-Secret-4242"})
    wait_until(lambda: "updated" in text_of(browser, "#notice"), "the user updated", 30)
    assert "second-Secret-4242" not in browser.page_source

    rule = "tr[data-rule='editable Topic:Edited'] form.update-rule"
    submit(browser, browser.find_element("css selector", rule), {"actions": "pub,bogus"})
    assert "unknown action 'bogus'" in error_text(browser)
    browser.get(f"{env.url}/c/default/users")
    submit(browser, browser.find_element("css selector", rule), {"actions": "pub,sub"})
    wait_until(lambda: "rule(s)" in text_of(browser, "#notice"), "the rule updated", 30)
    acls = env.as_root("listAcl", "-s", "User:editable")["acls"]
    rules = [(r["resource"], r["actions"], r["decision"]) for a in acls for r in a["rules"]]
    assert rules == [("Topic:Edited", ["pub", "sub"], "allow")]
    browser.save_screenshot(str(env.shots / "users-edit.png"))

    def logs_in(secret: str) -> bool:  # until every controller has applied the change
        log_in(env, browser, "editable", secret)
        answered = lambda: text_of(browser, "#error") or "Log in" not in text_of(browser, "h1")  # noqa: E731
        wait_until(answered, "the login's answer", 30)
        return "Logged in as editable" in text_of(browser, "#auth-note")

    wait_until(lambda: not logs_in("first-Secret-4242"), "the old secret refused", 60)
    wait_until(lambda: logs_in("second-Secret-4242"), "a login with the new secret", 60)


def test_the_group_page_edits_the_groups_settings(env: Env, browser: Any) -> None:
    env.as_root("updateSubGroup", "-g", "SettingsGroup", "--retry-max-times", "3")
    log_in(env, browser, ROOT.access_key, ROOT.secret_key)
    wait_until(lambda: "Logged in as root" in text_of(browser, "#auth-note"), "the login", 30)
    page = f"{env.url}/c/default/groups/SettingsGroup"
    browser.get(page)
    wait_until(lambda: browser.find_elements("id", "group-settings"), "the settings form", 30)
    assert browser.find_element("id", "retry-max-times").get_attribute("value") == "3"

    def stored() -> list[tuple[int, bool]]:
        doc = env.as_root("getSubGroup", "-g", "SettingsGroup")["brokers"]
        return [(d["retryMaxTimes"], d["consumeMessageOrderly"]) for _, d in sorted(doc.items())]

    for bad, says in (
        ("-1", "retry max times must be a whole number 0..10000"),
        ("10001", "retry max times must be a whole number 0..10000"),
    ):
        submit(browser, browser.find_element("id", "group-settings"), {"retry_max_times": bad})
        assert says in error_text(browser)
        browser.get(page)
    submit(browser, browser.find_element("id", "group-settings"),
           {"retry_max_times": "3", "retry_delays": "10x"})  # fmt: skip
    assert "bad settings for SettingsGroup" in error_text(browser)
    assert stored() == [(3, False), (3, False)]

    browser.get(page)
    wait_until(lambda: browser.find_elements("id", "group-settings"), "the settings form", 30)
    browser.find_element("id", "fifo").click()
    submit(browser, browser.find_element("id", "group-settings"), {"retry_max_times": "7"})
    wait_until(lambda: "settings of SettingsGroup" in text_of(browser, "#notice"), "saved", 30)
    assert stored() == [(7, True), (7, True)]
    wait_until(lambda: "7" in text_of(browser, "#settings"), "the settings table", 30)
    browser.save_screenshot(str(env.shots / "group-settings.png"))


def test_a_static_topic_created_and_remapped_from_the_console(env: Env, browser: Any) -> None:
    log_in(env, browser, ROOT.access_key, ROOT.secret_key)
    wait_until(lambda: "Logged in as root" in text_of(browser, "#auth-note"), "the login", 30)
    browser.get(f"{env.url}/c/default/static-topics")
    form = "create-static"
    wait_until(lambda: browser.find_elements("id", form), "the create form", 30)
    submit(browser, browser.find_element("id", form), {"topic": "Bad/Name", "queues": "2"})
    assert "bad topic 'Bad/Name'" in error_text(browser)
    browser.get(f"{env.url}/c/default/static-topics")
    submit(browser, browser.find_element("id", form), {"topic": "ConsoleMapped", "queues": "0"})
    assert "logical queues must be a whole number 1..1024" in error_text(browser)
    assert "ConsoleMapped" not in {t["topic"] for t in env.as_root("topicList")["topics"]}

    browser.get(f"{env.url}/c/default/static-topics")
    submit(browser, browser.find_element("id", form),
           {"topic": "ConsoleMapped", "queues": "2", "brokers": "broker-a"})  # fmt: skip
    wait_until(lambda: "2 logical queue(s)" in text_of(browser, "#notice"), "created", 30)

    def rows() -> list[list[str]]:
        cells = browser.find_elements("css selector", "#mapping tr[data-queue]")
        texts = [[c.text for c in r.find_elements("css selector", "td")] for r in cells]
        # logical queue, broker group, physical queue of the open items (an old one sealed by
        # a move may be dropped once it holds nothing)
        return [[t[0], t[2], t[3]] for t in texts if t[5] == "open"]

    assert rows() == [["0", "broker-a", "0"], ["1", "broker-a", "1"]]

    def mapped() -> list[tuple[int, str, int]]:
        doc = env.as_root("staticTopicMapping", "-t", "ConsoleMapped")
        return [(q["queueId"], i["brokerName"], i["physicalQueue"])
                for q in doc["queues"] for i in q["items"] if i["logicalEnd"] is None]  # fmt: skip

    assert mapped() == [(0, "broker-a", 0), (1, "broker-a", 1)]
    submit(browser, browser.find_element("id", "remap-static"),
           {"queue": "1", "broker": "broker-zz"})  # fmt: skip
    assert "broker-zz" in error_text(browser)
    assert mapped() == [(0, "broker-a", 0), (1, "broker-a", 1)]

    browser.get(f"{env.url}/c/default/static-topics?topic=ConsoleMapped")
    submit(
        browser, browser.find_element("id", "remap-static"), {"queue": "1", "broker": "broker-b"}
    )
    wait_until(lambda: "moved to broker-b" in text_of(browser, "#notice"), "the move", 60)
    assert [r[:2] for r in rows()] == [["0", "broker-a"], ["1", "broker-b"]]
    assert [m[:2] for m in mapped()] == [(0, "broker-a"), (1, "broker-b")]
    browser.save_screenshot(str(env.shots / "static-topic.png"))


def test_the_new_handlers_against_the_cluster(env: Env) -> None:
    """console.actions' and console.sessions' new work in this process against the module's
    cluster, signed as the super user as the console signs for it: what each changes, as
    rmqctl reads it, and bad input refused before anything is sent."""
    import asyncio

    from client.errors import ClientError
    from console import actions, reads
    from console.sessions import LoginRefused, check_user, read_rules
    from protocol.request_auth import Credentials
    from remoting.client import task_credentials, use_credentials

    addrs = env.cluster.controller_addresses
    env.as_root("createUser", "-u", "handled", "-p", "handled-Secret-1")
    env.as_root("createAcl", "-s", "User:handled", "-r", "Group:HandlerGroup", "-A", "update")
    env.as_root("updateSubGroup", "-g", "HandlerGroup")

    async def refused(work: Any) -> str:
        with pytest.raises(actions.Refused) as caught:
            await work
        return str(caught.value)

    async def scenario() -> None:
        # users and rules
        assert "secret must be 8" in await refused(actions.update_user(addrs, "handled", "x", ""))
        assert "give a new secret" in await refused(actions.update_user(addrs, "handled", "", ""))
        done = await actions.update_user(addrs, "handled", "handled-Secret-2", "")
        assert done == "user handled updated (secret)"

        async def accepted(secret: str) -> bool:  # every controller applies the change
            try:
                return await check_user(addrs, Credentials("handled", secret), 10) is False
            except LoginRefused:
                return False

        for _ in range(3):  # three asks: the controllers answer in turn
            await wait_until_async(lambda: accepted("handled-Secret-2"), "the new secret", 30)
            await wait_until_async(
                lambda: not_(accepted("handled-Secret-1")), "the old secret refused", 30
            )
        bad = actions.update_rules(addrs, "handled", "Group:HandlerGroup", "update,fly", "allow")
        assert "unknown action 'fly'" in await refused(bad)
        await actions.update_rules(addrs, "handled", "Group:HandlerGroup", "update,get", "allow")
        # the rules as the console reads them: with its own credentials, none without
        assert await read_rules(addrs, "handled", 10) is None  # this process signs nothing
        wanted = [("Group:HandlerGroup", ["get", "update"])]

        async def rules_read() -> list[tuple[str, list[str]]] | None:
            use_credentials(ROOT)
            try:
                with task_credentials(None):
                    rules = await read_rules(addrs, "handled", 10)
            finally:
                use_credentials(None)
            return None if rules is None else [(str(r.resource), sorted(r.actions)) for r in rules]

        async def rules_applied() -> bool:  # the controller asked may not have applied it yet
            return await rules_read() == wanted

        for _ in range(3):  # three asks: the controllers answer in turn
            await wait_until_async(rules_applied, "the new rules read", 30)
        assert await rules_read() == wanted
        # a group's settings
        with pytest.raises(actions.Refused, match="retry max times must be"):
            actions.group_settings("HandlerGroup", "ten", "", True, False)
        with pytest.raises(actions.Refused, match="bad settings for HandlerGroup"):
            actions.group_settings("HandlerGroup", "2", "10s 5q", True, False)
        doc = actions.group_settings("HandlerGroup", "2", "10s 30s", False, True)
        done = await actions.update_group(addrs, doc, "broker-b", 10)
        assert done == "settings of HandlerGroup stored on broker-b"
        # a static topic
        bad = actions.create_static(addrs, "HandlerStatic", "1025", "")
        assert "logical queues must be a whole number 1..1024" in await refused(bad)
        assert "bad topic" in await refused(actions.create_static(addrs, "a b", "1", ""))
        done = await actions.create_static(addrs, "HandlerStatic", "1", "broker-b")
        assert done == "static topic HandlerStatic has 1 logical queue(s)"
        assert "logical queue must be" in await refused(
            actions.remap_static(addrs, "HandlerStatic", "-1", "broker-a")
        )
        with pytest.raises(ClientError, match="broker-zz"):
            await actions.remap_static(addrs, "HandlerStatic", "0", "broker-zz")
        await actions.remap_static(addrs, "HandlerStatic", "0", "broker-a")

        async def last_item() -> tuple[str, bool]:
            items = await reads.static_mapping(addrs, "HandlerStatic", 10)
            return [(i.broker_name, i.logical_end is None) for i in items][-1]

        async def remap_applied() -> bool:  # as the rules above: a follower may answer first
            return await last_item() == ("broker-a", True)

        for _ in range(3):
            await wait_until_async(remap_applied, "the remapped queue read", 30)
        assert await last_item() == ("broker-a", True)

    async def not_(work: Any) -> bool:
        return not await work

    with task_credentials(ROOT):
        asyncio.run(scenario())
    settings = env.as_root("getSubGroup", "-g", "HandlerGroup")["brokers"]
    assert (settings["broker-b"]["retryMaxTimes"], settings["broker-b"]["retryDelays"]) == (
        2,
        "10s 30s",
    )
    assert settings["broker-b"]["consumeMessageOrderly"] is True
    assert settings["broker-a"]["retryMaxTimes"] == 16  # only broker-b was asked
    acls = env.as_root("listAcl", "-s", "User:handled")["acls"]
    assert [(r["resource"], r["actions"]) for a in acls for r in a["rules"]] == [
        ("Group:HandlerGroup", ["get", "update"])
    ]
