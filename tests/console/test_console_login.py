"""rmq-console with login (config key ``login``) on a cluster with authentication on, in a real
browser: three controllers and one broker as processes, the first super user made with the
cluster key, a read-only user (a normal user with a sub rule), and rmq-console as a process
signing nothing of its own.

- A wrong secret is refused on the login page; nothing else is shown before a login.
- The super user sees every form and creates a topic through the page (rmqctl, signed as the
  super user, lists it); the action is logged with the user. It creates a user and gives it a
  rule on the users page (rmqctl listAcl shows it), then deletes the user.
- The read-only user sees the pages and no button that changes anything but its logout; a
  direct POST with its session and a valid CSRF token is refused (403) and changes nothing.
"""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

from tests.cluster.secured import ROOT, create_root, secured_cluster
from tests.console.browser import ConsoleEnv, console_process, require_chromium, text_of
from tests.support.procs import port_open, rmqctl
from tests.support.wait import wait_until

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
    config.write_text(f'login = true\ncontrollers = "{cluster.controller_addresses}"\n')
    console, port = console_process(tmp, "--config", str(config))
    try:
        cluster.start_controllers()
        create_root(cluster, key)
        cluster.add_group("broker-a", 1, config=settings)
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
            return done.returncode == 0 and "broker-a" in done.stdout

        wait_until(listed, "broker-a registered", 60, on_timeout=cluster.logs)
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
    actions = [
        json.loads(line) for line in env.console.log().splitlines() if "console action" in line
    ]
    assert any(a.get("user") == "root" and a.get("target") == "SecuredPageTopic" for a in actions)


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
    cookies = {c["name"]: c["value"] for c in browser.get_cookies()}
    req = urllib.request.Request(
        f"{env.url}/c/default/topics/create",
        data=urllib.parse.urlencode(
            {"topic": "ReaderTopic", "queues": "1", "csrf": cookies["rmq_console_csrf"]}
        ).encode(),
        headers={"Cookie": "; ".join(f"{k}={v}" for k, v in cookies.items())},
        method="POST",
    )
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(req, timeout=30)
    assert refused.value.code == 403
    assert "ops-reader may only read" in refused.value.read().decode()
    assert "ReaderTopic" not in {t["topic"] for t in env.as_root("topicList")["topics"]}
