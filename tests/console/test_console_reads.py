"""What the console computes itself (no cluster): a body's preview and a topic's kind, and a
group page's holders."""

from __future__ import annotations

from pathlib import Path

import jinja2

import console
from client.progress import Member, allocation
from client.routes import MessageQueue
from console.reads import PREVIEW_BYTES, GroupView, body_preview, topic_kind
from rmqctl.progress import ProgressRow


def test_a_json_body_is_pretty_printed() -> None:
    assert body_preview(b'{"a": [1, 2], "b": "\\u00e9"}') == (
        "JSON",
        '{\n  "a": [\n    1,\n    2\n  ],\n  "b": "\u00e9"\n}',
    )


def test_text_stays_text_and_binary_is_hex() -> None:
    assert body_preview("grüße".encode()) == ("text", "grüße")
    assert body_preview(b"42 apples") == ("text", "42 apples")
    kind, text = body_preview(bytes(range(250, 256)) + b"\x00")
    assert kind == "binary" and text == "00000000  fa fb fc fd fe ff 00"


def test_a_long_body_is_cut_and_says_so() -> None:
    kind, text = body_preview(b"x" * (PREVIEW_BYTES + 10))
    assert kind == "text" and text.endswith("\n... (10 more bytes)")
    # cut through a two-byte character: still text
    kind, text = body_preview("é".encode() * (PREVIEW_BYTES // 2 + 1))
    assert kind == "text"


def test_topic_kinds() -> None:
    assert [topic_kind(t) for t in ("Orders", "%RETRY%g", "%DLQ%g", "RMQ_SYS_TRACE_TOPIC")] == [
        "normal",
        "retry",
        "dlq",
        "system",
    ]


def test_tps_history_keeps_an_hour_and_scales_to_the_highest() -> None:
    from console.reads import BrokerGroup, ClusterView, Replica, TpsHistory

    def view(put: float, get: float) -> ClusterView:
        r = Replica(1, "b:1", "MASTER", True, True, put_tps=put, get_tps=get)
        return ClusterView([], [BrokerGroup("broker-a", "C", 1, "b:1", 1, [1], 1, [r])])

    history = TpsHistory()
    history.record("c", view(10.0, 5.0), now=0.0)
    history.record("c", view(20.0, 0.0), now=1800.0)
    history.record("c", view(40.0, 10.0), now=3700.0)  # the first sample is now past the hour
    chart = history.chart("c", "b:1", now=3700.0, width=100, height=10)
    assert chart["top"] == "40.0"
    assert chart["put"] == "47.2,5.0 100.0,0.0"
    assert chart["get"] == "47.2,10.0 100.0,7.5"
    assert history.chart("c", "elsewhere:1", now=3700.0)["put"] == ""


#: Prometheus's documented answer to GET /api/v1/alerts (one firing, one pending)
ALERTS_ANSWER = {
    "status": "success",
    "data": {
        "alerts": [
            {
                "labels": {"alertname": "RmqSlaveLagHigh", "severity": "warning",
                           "broker_name": "broker-a", "instance": "10.0.0.2:5557"},
                "annotations": {"summary": "broker-a slave 2 is 9 MiB behind"},
                "state": "firing",
                "activeAt": "2026-11-29T10:02:03.123456789Z",
                "value": "9.4e+06",
            },
            {
                "labels": {"alertname": "RmqTargetDown", "severity": "warning"},
                "annotations": {},
                "state": "pending",
                "activeAt": "2026-11-29T10:09:00Z",
                "value": "0e+00",
            },
        ]
    },
}  # fmt: skip


def test_parse_alerts_keeps_the_firing_ones_and_counts_the_pending() -> None:
    from console.reads import Alert, parse_alerts

    alerts = parse_alerts("http://p:9090", ALERTS_ANSWER)
    assert alerts.error is None and alerts.pending == 1
    assert alerts.firing == [
        Alert(
            name="RmqSlaveLagHigh",
            severity="warning",
            where="broker_name=broker-a, instance=10.0.0.2:5557",
            summary="broker-a slave 2 is 9 MiB behind",
            since="2026-11-29 10:02:03",
        )
    ]
    refused = parse_alerts("http://p:9090", {"status": "error", "error": "bad"})
    assert refused.error == "Prometheus at http://p:9090 answered no alerts: bad"
    assert parse_alerts("http://p:9090", ["not", "it"]).error is not None


def test_firing_alerts_from_a_prometheus_that_does_not_answer_is_an_error_not_a_raise() -> None:
    import asyncio

    from console.reads import firing_alerts
    from tests.support.procs import free_port

    url = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    alerts = asyncio.run(firing_alerts(url, 2.0))
    assert alerts.firing == [] and alerts.error is not None
    assert alerts.error.startswith(f"Prometheus at {url} did not answer:"), alerts.error


def test_prometheus_url_is_checked() -> None:
    from console.config import http_url

    assert http_url("") is None and http_url("https://prom.example:9090/sub") is None
    assert http_url("prom:9090") is not None and http_url("http://p:9090/?q=1") is not None


def test_pages_of_rows() -> None:
    from console.reads import Page

    rows = list(range(1, 251))
    first = Page.of(rows, 1, 100)
    assert (first.rows[0], first.rows[-1], first.pages, first.first, first.last) == (
        1, 100, 3, 1, 100,
    )  # fmt: skip
    last = Page.of(rows, 3, 100)
    assert (last.rows, last.first, last.last) == (list(range(201, 251)), 201, 250)
    assert Page.of(rows, 9, 100).number == 3  # past the end: the last page
    empty = Page.of([], 1, 100)
    assert (empty.rows, empty.pages, empty.first, empty.last) == ([], 1, 0, 0)


def test_a_normal_users_rights_follow_its_rules_as_the_cluster_decides() -> None:
    """console.rights: each console action as the requests it sends, decided by
    protocol.request_permissions over the user's rules."""
    from console.rights import Rights
    from protocol.acl import User, UserType, make_rule

    rules = (
        make_rule("Topic:*", ["sub", "get"], "allow"),
        make_rule("Topic:Orders", ["pub"], "allow"),
        make_rule("Group:billing*", ["update"], "allow"),
        make_rule("Group:billing-archive", ["update"], "deny"),
        make_rule("Topic:Local", ["pub"], "allow", ["10.0.0.0/8"]),
    )
    rights = Rights(User("sender", UserType.NORMAL, rules), source_ip="192.168.1.5")
    assert rights.may("send", topic="Orders")
    assert not rights.may("send", topic="Payments")
    assert rights.refusal("send", {"topic": "Payments"}) == (
        "no rule of sender allows pub on Topic:Payments"
    )
    assert not rights.may("send", topic="Local")  # the console is not where the rule allows
    assert Rights(rights.user, source_ip="10.1.2.3").may("send", topic="Local")
    assert not rights.may("create-topic")  # no create rule on any topic: no create form
    assert not rights.may("delete-topic", topic="Orders")
    # group changes: update or admin on the group; resetting needs it too
    assert rights.may("update-group", group="billing")
    assert rights.may("reset-offset", group="billing")
    assert rights.may("resend-dlq", group="billing")
    assert not rights.may("delete-group", group="billing")
    assert not rights.may("update-group", group="other")
    assert not rights.may("update-group", group="billing-archive")  # the deny wins
    # the super-only requests: users, static topics
    for action in ("users", "create-static-topic", "remap-static-topic"):
        assert not rights.may(action, topic="Orders"), action
    assert rights.changes_anything

    reader = Rights(
        User("reader", UserType.NORMAL, (make_rule("Topic:*", ["sub", "get"], "allow"),))
    )
    assert not reader.changes_anything and not reader.may("send", topic="Orders")
    unknown = Rights(User("someone", UserType.NORMAL), rules_known=False)
    assert not unknown.changes_anything
    assert "its rules could not be read" in (unknown.refusal("send", {"topic": "Orders"}) or "")
    for everyone in (Rights(None), Rights(User("root", UserType.SUPER))):
        assert everyone.may("users") and everyone.may("send", topic="Payments")


def test_a_pop_groups_page_names_no_holder_and_says_it_pops() -> None:
    """POP members hold no queue (docs/pop.md): the group's page computes no holder for them
    (allocation leaves them out), shows every POP member on the queues they read, and says the
    group pops; a queue-bound member's queues keep their holder."""
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(Path(console.__file__).parent / "templates"),
        autoescape=True,
    )
    env.filters["time"] = str

    def row(topic: str, queue_id: int) -> ProgressRow:
        return ProgressRow("P", topic, "broker-a", queue_id, 10, 5, 5, None)

    pops = [Member(f"pop-{i}", "h:1", "T", 1, ("broker-a",), consume_type="pop") for i in (1, 2)]
    queues = {"T": [MessageQueue("broker-a", q) for q in (0, 1)]}
    rows = [row("T", 0), row("T", 1), row("%RETRY%P", 0)]

    def page(members: list[Member]) -> tuple[str, list[str]]:
        held = allocation(members, queues)
        holders = {("T", q.broker_name, q.queue_id): c for c, qs in held.items() for q in qs}
        html = env.get_template("group_live.html").render(
            view=GroupView("P", rows, holders, members, [])
        )
        table = html.split('<table id="queues">')[1].split("</table>")[0]
        return html, [cells.split("<td>")[-1] for cells in table.split("</tr>")[1:-1]]

    html, held_by = page(pops)
    assert held_by == ["every POP member</td>\n"] * 3, held_by
    assert "The group consumes with POP" in html
    assert html.count("<td>pop</td>") == 2  # the members' Consume column
    bound = Member("bound", "h:2", "T", 1, ("broker-a",), consume_type="push")
    html, held_by = page([*pops, bound])
    assert held_by[:2] == ["bound, and every POP member</td>\n"] * 2, held_by
    assert "2 of 3 members consume with POP" in html
