"""The console's web app: Starlette routes rendering Jinja2 templates, htmx for the parts that
update themselves (the cluster page, a group's lag), served from the vendored
``static/htmx.min.js`` (no CDN: the pages work with no internet).

Every form is a POST carrying a CSRF token (double submit: the token of a SameSite=Strict,
HttpOnly cookie, repeated in a hidden field; a POST whose field does not match is refused and
changes nothing). Every action that changes something is logged (``console action``) with who
did it, the cluster, what and the outcome. A cluster that cannot be reached, a refused action or
bad input is a page saying so, never a stack trace.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import secrets
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final, TypeVar
from urllib.parse import quote, unquote, urlencode

import click
import jinja2
import structlog
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.base import BaseHTTPMiddleware, RequestResponseEndpoint
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response, StreamingResponse
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.templating import Jinja2Templates

from client.bootstrap import describe_failure
from client.errors import (
    BrokerError,
    ClientError,
    GroupNotFoundError,
    MalformedIdError,
    MessageNotFoundError,
    TopicNotFoundError,
)
from console import actions, reads
from console.config import Settings
from console.rights import Rights
from console.sessions import (
    SESSION_COOKIE,
    LoginRefused,
    Session,
    Sessions,
    check_user,
    read_rules,
    source_ip,
)
from protocol.acl import User, UserType
from protocol.broker_requests.offsets import TO_MAX
from protocol.codes import ResponseCode
from protocol.request_auth import Credentials
from protocol.topic_attrs import MessageType, perm_text
from remoting.client import task_credentials
from remoting.errors import RemotingError, ResponseError
from rmqctl.common import PastTimeType, utc_iso
from rmqctl.trace import TRACE_HEADERS

T = TypeVar("T")
HERE: Final = Path(__file__).resolve().parent
CSRF_COOKIE: Final = "rmq_console_csrf"
CSRF_FIELD: Final = "csrf"
#: the pages a visitor who has not logged in may see (config key ``login``)
LOGIN_PATHS: Final = ("login",)

log = structlog.get_logger("console")


class PageError(Exception):
    """A page that cannot be shown or an action refused: ``status`` and one line."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def _time(ms: int | None) -> str:
    if not ms or ms <= 0:
        return "-"
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S")


def make_app(settings: Settings) -> Starlette:
    """The console for ``settings``' clusters."""
    cfg = settings.config
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(HERE / "templates"),
        autoescape=jinja2.select_autoescape(["html"]),
    )
    env.filters["time"] = _time
    env.filters["q"] = lambda s: quote(str(s), safe="")
    env.filters["perm"] = perm_text
    templates = Jinja2Templates(env=env)
    clusters = settings.clusters
    secure_cookie = cfg.tls_cert_file is not None
    sessions = Sessions(cfg.session_hours)
    tps = reads.TpsHistory()

    async def cluster_view(request: Request) -> reads.ClusterView:
        view = await _read(reads.cluster_view(addresses(request), cfg.request_timeout))
        tps.record(request.path_params["cluster"], view, time.monotonic())
        return view

    def charts(request: Request, view: reads.ClusterView) -> dict[str, dict[str, str]]:
        now = time.monotonic()
        name = request.path_params["cluster"]
        return {r.address: tps.chart(name, r.address, now) for g in view.groups for r in g.replicas}

    def session(request: Request) -> Session | None:
        found: Session | None = getattr(request.state, "session", None)
        return found

    def rights(request: Request) -> Rights:
        """Without login, anyone may do anything; with it, what the user's rules allow
        (:mod:`console.rights`)."""
        current = session(request)
        if not cfg.login:
            return Rights(None)
        if current is None:
            return Rights(None, rules_known=False)
        return current.rights

    def can_change(request: Request) -> bool:
        return rights(request).changes_anything

    def auth_note(request: Request) -> str:
        if not cfg.login:
            return (
                "Authentication is off on this console: no login, and anyone who can reach it "
                "can change the cluster."
            )
        current = session(request)
        if current is None:
            return "Log in with a user of this cluster."
        if current.is_super:
            role = "super user: every action"
        elif current.rules is None:
            role = "read only: the console could not read its rules"
        elif current.rights.changes_anything:
            role = "normal user: what its rules allow"
        else:
            role = "read only"
        return f"Logged in as {current.user} ({role})."

    def addresses(request: Request) -> str:
        """The controller addresses of the page's cluster (a 404 page for an unknown name)."""
        name = request.path_params["cluster"]
        if name not in clusters:
            raise PageError(404, f"no cluster named {name!r} (known: {', '.join(clusters)})")
        return clusters[name]

    def render(
        request: Request, template: str, status_code: int = 200, **values: Any
    ) -> HTMLResponse:
        context = {
            "clusters": list(clusters),
            "cluster": request.path_params.get("cluster"),
            "csrf": request.state.csrf,
            "csrf_field": CSRF_FIELD,
            "notice": request.query_params.get("notice", ""),
            "refresh": cfg.refresh_seconds,
            "auth_note": auth_note(request),
            "can_change": can_change(request),
            "may": rights(request).may,
            "session": session(request),
            **values,
        }
        return templates.TemplateResponse(request, template, context, status_code=status_code)

    async def form(request: Request) -> dict[str, str]:
        """The POST's fields once its CSRF token matches the cookie's, else a 403 page."""
        data = await request.form()
        sent = data.get(CSRF_FIELD)
        cookie = request.cookies.get(CSRF_COOKIE, "")
        if not isinstance(sent, str) or not cookie or not hmac.compare_digest(sent, cookie):
            raise PageError(
                403, "refused: the form's CSRF token is missing or forged; nothing was changed"
            )
        return {k: v for k, v in data.items() if isinstance(v, str)}

    async def change_form(
        request: Request,
        action: str,
        named: Callable[[dict[str, str]], dict[str, str]] | None = None,
    ) -> dict[str, str]:
        """:func:`form` for ``action`` (:data:`console.rights.ACTIONS`) on the page's topic or
        group (and what ``named`` takes from the form): refused (403) for a user whose rules
        do not allow it, before anything is sent."""
        data = await form(request)
        names = {**request.path_params, **(named(data) if named else {})}
        current = session(request)
        if not rights(request).changes_anything:
            refusal: str | None = "may only read on this console (not a super user)"
        else:
            refusal = rights(request).refusal(action, names)
        if refusal is not None:
            who = current.user if current is not None else "nobody"
            log.warning("console action", user=who, path=request.url.path, outcome="refused",
                        action=action, reason=refusal)  # fmt: skip
            reason = refusal if refusal.startswith(who) else f"{who} {refusal}"
            raise PageError(403, f"refused: {reason}; nothing was changed")
        return data

    async def act(
        request: Request,
        what: str,
        target: str,
        do: Awaitable[str],
        back: str,
    ) -> Response:
        """Run an action, log it with who did it, and go back to ``back`` saying what it did
        (a refusal: the error page, status 400 for bad input, 404 for a topic, group or
        message that does not exist, 502 for the cluster's other failures)."""
        name = request.path_params["cluster"]
        current = session(request)
        who = {
            "user": current.user if current is not None else "anonymous",
            "remote": request.client.host if request.client else "-",
        }
        try:
            done = await do
        except actions.Refused as exc:
            log.warning("console action", **who, cluster=name, action=what, target=target,
                        outcome="refused", reason=str(exc))  # fmt: skip
            raise PageError(400, str(exc)) from None
        except (ClientError, RemotingError) as exc:
            status, reason = _failure(exc)
            log.warning("console action", **who, cluster=name, action=what, target=target,
                        outcome="failed", reason=reason)  # fmt: skip
            raise PageError(status, f"{what} {target} failed: {reason}") from None
        log.info("console action", **who, cluster=name, action=what, target=target,
                 outcome="done", result=done)  # fmt: skip
        joint = "&" if "?" in back else "?"  # back may have its own query (?topic=)
        return RedirectResponse(f"{back}{joint}{urlencode({'notice': done})}", status_code=303)

    # --- pages ----------------------------------------------------------------------------------

    async def home(request: Request) -> Response:
        return RedirectResponse(f"/c/{quote(next(iter(clusters)))}/cluster", status_code=303)

    async def firing_alerts() -> reads.Alerts | None:
        if not cfg.prometheus_url:
            return None
        return await reads.firing_alerts(cfg.prometheus_url, cfg.request_timeout)

    async def cluster_page(request: Request) -> Response:
        asked = asyncio.ensure_future(firing_alerts())
        try:
            view = await cluster_view(request)
        except PageError as exc:
            if exc.status != 502 or not cfg.prometheus_url:
                asked.cancel()
                raise
            # A cluster that cannot be reached: what Prometheus says about it matters most.
            return render(
                request, "error.html", exc.status, status=exc.status, message=exc.message,
                alerts=await asked,
            )  # fmt: skip
        return render(
            request, "cluster.html", view=view, addresses=addresses(request),
            charts=charts(request, view), alerts=await asked,
        )  # fmt: skip

    async def cluster_live(request: Request) -> Response:
        view, alerts = await asyncio.gather(cluster_view(request), firing_alerts())
        return render(
            request, "cluster_live.html", view=view, charts=charts(request, view), alerts=alerts
        )

    async def topics_page(request: Request) -> Response:
        addrs = addresses(request)
        params = request.query_params
        kind, name = params.get("kind", ""), params.get("q", "").strip()
        if kind and kind not in reads.TOPIC_FILTERS:
            known = ", ".join(reads.TOPIC_FILTERS)
            raise PageError(400, f"no topic kind {kind!r} (kinds: {known})")
        number = _page_number(params.get("page", "1"))
        rows = await _read(reads.topics(addrs, cfg.request_timeout))
        kinds = (*reads.TOPIC_KINDS, *reads.TOPIC_TYPES)
        counts = {k: sum(r.is_a(k) for r in rows) for k in kinds}
        matching = [
            r
            for r in rows
            if (not kind or kind == "static" or r.is_a(kind))
            and (not name or name.lower() in r.topic.lower())
        ]
        if kind == "static":
            normal = [r.topic for r in matching if r.kind == "normal"]
            static = await _read(reads.static_topics(addrs, normal, cfg.request_timeout))
            matching = [r for r in matching if r.topic in static]
            counts["static"] = len(matching)
        page = reads.Page.of(matching, number, reads.TOPICS_PER_PAGE)

        def link(**change: Any) -> str:
            query = {"kind": kind, "q": name, "page": page.number, **change}
            return "?" + urlencode({k: v for k, v in query.items() if v and v != 1})

        return render(
            request, "topics.html", listing=page, total=len(rows), counts=counts, kind=kind,
            q=name, kinds=reads.TOPIC_FILTERS, link=link,
            message_types=[t.value for t in MessageType],
        )  # fmt: skip

    async def topic_page(request: Request) -> Response:
        addrs = addresses(request)
        topic = request.path_params["topic"]
        detail = await _read(reads.topic_detail(addrs, topic, cfg.request_timeout))
        return render(request, "topic.html", topic=topic, **detail)

    async def create_topic(request: Request) -> Response:
        addrs = addresses(request)
        name = request.path_params["cluster"]
        data = await change_form(request, "create-topic", _topic_field)
        topic = data.get("topic", "")

        async def do() -> str:
            queues = actions.parse_queues(data.get("queues", "8"))
            perm, kind = actions.parse_attrs(data.get("perm", ""), data.get("message_type", ""))
            timeout = cfg.request_timeout
            return await actions.create_topic(addrs, topic, queues, timeout, perm, kind)

        return await act(request, "create topic", topic, do(), f"/c/{quote(name)}/topics")

    async def delete_topic(request: Request) -> Response:
        addrs = addresses(request)
        name = request.path_params["cluster"]
        data = await change_form(request, "delete-topic", _topic_field)
        topic = data.get("topic", "")
        return await act(
            request,
            "delete topic",
            topic,
            actions.delete_topic(addrs, topic),
            f"/c/{quote(name)}/topics",
        )

    async def send_message(request: Request) -> Response:
        addrs = addresses(request)
        name = request.path_params["cluster"]
        topic = request.path_params["topic"]
        data = await change_form(request, "send")
        return await act(
            request,
            "send test message",
            topic,
            actions.send_test_message(
                addrs,
                topic,
                data.get("body", ""),
                data.get("keys", ""),
                data.get("tag", ""),
                cfg.request_timeout,
            ),
            f"/c/{quote(name)}/topics/{quote(topic, safe='')}",
        )

    async def groups_page(request: Request) -> Response:
        addrs = addresses(request)
        sort = request.query_params.get("sort", "lag")
        if sort not in reads.GROUP_SORTS:
            sort = "lag"
        number = _page_number(request.query_params.get("page", "1"))
        rows, notes = await _read(reads.groups(addrs, cfg.request_timeout, sort))
        page = reads.Page.of(rows, number, reads.GROUPS_PER_PAGE)

        def link(**change: Any) -> str:
            query = {"sort": sort, "page": page.number, **change}
            return "?" + urlencode({k: v for k, v in query.items() if v and v != 1})

        return render(request, "groups.html", listing=page, notes=notes, sort=sort, link=link)

    async def group_view(request: Request) -> reads.GroupView:
        addrs = addresses(request)
        group = request.path_params["group"]
        return await _read(reads.group_detail(addrs, group, cfg.request_timeout))

    async def group_page(request: Request) -> Response:
        view = await group_view(request)
        return render(request, "group.html", view=view, now=utc_iso(_now_ms()))

    async def group_live(request: Request) -> Response:
        return render(request, "group_live.html", view=await group_view(request))

    async def reset_offset(request: Request) -> Response:
        addrs = addresses(request)
        name = request.path_params["cluster"]
        group = request.path_params["group"]
        data = await change_form(request, "reset-offset")
        topic = data.get("topic", "")

        async def do() -> str:
            when = _past_time(data.get("time", ""))
            return await actions.reset_offset(addrs, group, topic, when, cfg.request_timeout)

        return await act(
            request, "reset offset", f"{group} on {topic}", do(), _group_url(name, group)
        )

    async def skip_backlog(request: Request) -> Response:
        addrs = addresses(request)
        name = request.path_params["cluster"]
        group = request.path_params["group"]
        data = await change_form(request, "reset-offset")
        topic = data.get("topic", "")
        return await act(
            request,
            "skip backlog",
            f"{group} on {topic}",
            actions.reset_offset(addrs, group, topic, TO_MAX, cfg.request_timeout),
            _group_url(name, group),
        )

    async def dlq_page(request: Request) -> Response:
        addrs = addresses(request)
        group = request.path_params["group"]
        found = await _read(reads.dead_letters(addrs, group, cfg.request_timeout))
        messages = [(broker, m) for broker, ms in sorted(found.items()) for m in ms]
        return render(request, "dlq.html", group=group, messages=messages)

    async def dlq_export(request: Request) -> Response:
        addrs = addresses(request)
        group = request.path_params["group"]
        found = await _read(reads.dead_letters(addrs, group, cfg.request_timeout))
        lines = (
            json.dumps({"brokerName": broker, **m}, default=_jsonable) + "\n"
            for broker, ms in sorted(found.items())
            for m in ms
        )
        return StreamingResponse(
            iter(list(lines)),
            media_type="application/x-ndjson",
            headers={"Content-Disposition": f'attachment; filename="dlq-{group}.jsonl"'},
        )

    async def dlq_resend(request: Request) -> Response:
        addrs = addresses(request)
        name = request.path_params["cluster"]
        group = request.path_params["group"]
        data = await change_form(request, "resend-dlq")
        msg_id = data.get("msg_id", "").strip() or None
        return await act(
            request,
            "resend dead letters",
            f"{group} {msg_id or '(all)'}",
            actions.resend_dlq(addrs, group, msg_id, cfg.request_timeout),
            f"{_group_url(name, group)}/dlq",
        )

    async def messages_page(request: Request) -> Response:
        addrs = addresses(request)
        q = request.query_params
        topic, key = q.get("topic", "").strip(), q.get("key", "").strip()
        begin, end = q.get("begin", "-1h").strip() or "-1h", q.get("end", "now").strip() or "now"
        values: dict[str, Any] = {"topic": topic, "key": key, "begin": begin, "end": end}
        if not topic:
            return render(request, "messages.html", found=None, **values)
        try:
            actions.checked_topic(topic)
            begin_ms, end_ms = _past_time(begin), _past_time(end)
        except actions.Refused as exc:
            raise PageError(400, str(exc)) from None
        if begin_ms > end_ms:
            raise PageError(400, f"the range begins ({begin}) after it ends ({end})")
        found, more, errors = await _read(
            reads.find_messages(addrs, topic, key, begin_ms, end_ms, cfg.request_timeout)
        )
        return render(
            request,
            "messages.html",
            found=found,
            more=more,
            errors=errors,
            max_found=reads.MAX_FOUND,
            **values,
        )

    async def message_page(request: Request) -> Response:
        addrs = addresses(request)
        msg_id = request.path_params["msg_id"]
        topic = request.query_params.get("topic", "").strip()
        view = await _read(reads.message(addrs, msg_id, topic, cfg.request_timeout))
        return render(request, "message.html", view=view, trace_headers=TRACE_HEADERS)

    async def resend_message(request: Request) -> Response:
        addrs = addresses(request)
        name = request.path_params["cluster"]
        msg_id = request.path_params["msg_id"]
        data = await change_form(
            request, "resend-message", lambda d: {"group": d.get("group", "").strip()}
        )
        group, topic = data.get("group", ""), data.get("topic", "").strip()
        back = f"/c/{quote(name)}/messages/{quote(msg_id, safe='')}"
        return await act(
            request,
            "resend message",
            f"{msg_id} to {group}",
            actions.resend_message(addrs, msg_id, group, topic, cfg.request_timeout),
            back + (f"?{urlencode({'topic': topic})}" if topic else ""),
        )

    async def delete_group(request: Request) -> Response:
        addrs = addresses(request)
        name = request.path_params["cluster"]
        group = request.path_params["group"]
        data = await change_form(request, "delete-group")
        return await act(
            request,
            "delete group",
            group,
            actions.delete_group(addrs, group, data.get("remove_dlq") == "yes"),
            f"/c/{quote(name)}/groups",
        )

    async def users_page(request: Request) -> Response:
        addrs = addresses(request)
        users, acls = await _read(reads.users_and_rules(addrs, cfg.request_timeout))
        return render(request, "users.html", users=users, acls=acls)

    async def user_action(request: Request) -> Response:
        addrs = addresses(request)
        name = request.path_params["cluster"]
        what = request.path_params["action"]
        data = await change_form(request, "users")
        user = data.get("username", "")
        do: Awaitable[str]
        if what == "create-user":
            do = actions.create_user(addrs, user, data.get("secret", ""), data.get("type", ""))
        elif what == "delete-user":
            do = actions.delete_user(addrs, user)
        elif what == "create-rules":
            do = actions.create_rules(
                addrs, user, data.get("resources", ""), data.get("actions", ""),
                data.get("decision", "allow"),
            )  # fmt: skip
        elif what == "delete-rules":
            do = actions.delete_rules(addrs, user, data.get("resources", ""))
        elif what == "update-user":
            do = actions.update_user(addrs, user, data.get("secret", ""), data.get("type", ""))
        elif what == "update-rules":
            do = actions.update_rules(
                addrs, user, data.get("resources", ""), data.get("actions", ""),
                data.get("decision", "allow"),
            )  # fmt: skip
        else:
            raise PageError(404, f"no action {what!r}")
        return await act(request, what.replace("-", " "), user, do, f"/c/{quote(name)}/users")

    async def group_settings(request: Request) -> Response:
        addrs = addresses(request)
        name = request.path_params["cluster"]
        group = request.path_params["group"]
        data = await change_form(request, "update-group")

        async def do() -> str:
            doc = actions.group_settings(
                group,
                data.get("retry_max_times", ""),
                data.get("retry_delays", ""),
                data.get("consume_retry") == "yes",
                data.get("fifo") == "yes",
            )
            broker = data.get("broker", "").strip()
            return await actions.update_group(addrs, doc, broker, cfg.request_timeout)

        return await act(request, "update group settings", group, do(), _group_url(name, group))

    async def static_topics_page(request: Request) -> Response:
        addresses(request)
        topic = request.query_params.get("topic", "").strip()
        if topic:
            url = (
                f"/c/{quote(request.path_params['cluster'])}/static-topics/{quote(topic, safe='')}"
            )
            return RedirectResponse(url, status_code=303)
        return render(request, "static_topic.html", topic="", mapping=None)

    async def static_topic_page(request: Request) -> Response:
        addrs = addresses(request)
        topic = request.path_params["topic"]
        mapping = await _read(reads.static_mapping(addrs, topic, cfg.request_timeout))
        return render(request, "static_topic.html", topic=topic, mapping=mapping)

    async def create_static_topic(request: Request) -> Response:
        addrs = addresses(request)
        name = request.path_params["cluster"]
        data = await change_form(request, "create-static-topic", _topic_field)
        topic = data.get("topic", "").strip()
        do = actions.create_static(addrs, topic, data.get("queues", ""), data.get("brokers", ""))
        back = f"/c/{quote(name)}/static-topics/{quote(topic, safe='')}"
        return await act(request, "create static topic", topic, do, back)

    async def remap_static_topic(request: Request) -> Response:
        addrs = addresses(request)
        name = request.path_params["cluster"]
        topic = request.path_params["topic"]
        data = await change_form(request, "remap-static-topic")
        queue, target = data.get("queue", ""), data.get("broker", "")
        return await act(
            request,
            "remap static topic",
            f"{topic} queue {queue.strip()} to {target.strip()}",
            actions.remap_static(addrs, topic, queue, target),
            f"/c/{quote(name)}/static-topics/{quote(topic, safe='')}",
        )

    # --- errors ---------------------------------------------------------------------------------

    async def page_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, PageError)
        return _error_page(request, exc.status, exc.message)

    async def server_error(request: Request, exc: Exception) -> Response:
        log.error(
            "console page failed", path=request.url.path, error=f"{type(exc).__name__}: {exc}"
        )
        return _error_page(request, 500, "the console failed to show this page (its log says why)")

    async def not_found(request: Request, exc: Exception) -> Response:
        return _error_page(request, 404, f"no page at {request.url.path}")

    def _error_page(request: Request, status: int, message: str) -> HTMLResponse:
        if not hasattr(request.state, "csrf"):
            request.state.csrf = ""
        return render(request, "error.html", status, status=status, message=message)

    # --- login ----------------------------------------------------------------------------------

    async def login_page(request: Request) -> Response:
        addresses(request)
        if not cfg.login:
            return RedirectResponse(f"/c/{quote(request.path_params['cluster'])}/cluster", 303)
        return render(request, "login.html", error="")

    async def login(request: Request) -> Response:
        addrs = addresses(request)
        name = request.path_params["cluster"]
        data = await form(request)
        user, secret = data.get("access_key", "").strip(), data.get("secret_key", "")
        remote = request.client.host if request.client else "-"
        try:
            if not user or not secret:
                raise LoginRefused("give an access key and its secret key")
            is_super = await check_user(addrs, Credentials(user, secret), cfg.request_timeout)
            rules = None if is_super else await read_rules(addrs, user, cfg.request_timeout)
        except (ClientError, RemotingError) as exc:
            log.warning("console login", user=user, remote=remote, cluster=name,
                        outcome="refused", reason=_why(exc))  # fmt: skip
            return render(request, "login.html", 401, error=_why(exc))
        sid = sessions.create(name, Credentials(user, secret), is_super, rules, source_ip(addrs))
        role = "super" if is_super else "read-only"
        if rules is not None and Rights(User(user, UserType.NORMAL, rules)).changes_anything:
            role = "normal"
        log.info("console login", user=user, remote=remote, cluster=name, role=role,
                 rules=None if rules is None else len(rules))  # fmt: skip
        response = RedirectResponse(f"/c/{quote(name)}/cluster", status_code=303)
        response.set_cookie(
            SESSION_COOKIE,
            sid,
            httponly=True,
            samesite="strict",
            secure=secure_cookie,
        )
        return response

    async def logout(request: Request) -> Response:
        await form(request)
        sessions.drop(request.cookies.get(SESSION_COOKIE))
        response = RedirectResponse(f"/c/{quote(request.path_params['cluster'])}/login", 303)
        response.delete_cookie(SESSION_COOKIE)
        return response

    async def csrf_cookie(request: Request, call_next: RequestResponseEndpoint) -> Response:
        token = request.cookies.get(CSRF_COOKIE, "")
        fresh = len(token) < 32
        if fresh:
            token = secrets.token_urlsafe(32)
        request.state.csrf = token
        parts = request.url.path.split("/")
        cluster = unquote(parts[2]) if len(parts) > 3 and parts[1] == "c" else None
        sid = request.cookies.get(SESSION_COOKIE)
        current = sessions.get(sid)
        if current is not None and current.cluster != cluster:
            current = None  # a session is for the cluster it logged in to
        if current is not None and sid and current.rules_stale and cluster in clusters:
            rules = await read_rules(clusters[cluster], current.user, cfg.request_timeout)
            current = sessions.new_rules(sid, rules)
        request.state.session = current
        if cfg.login and cluster in clusters and current is None and parts[3] not in LOGIN_PATHS:
            response: Response = RedirectResponse(f"/c/{quote(cluster)}/login", status_code=303)
        else:
            with task_credentials(current.credentials if current is not None else None):
                response = await call_next(request)
        if fresh:
            response.set_cookie(
                CSRF_COOKIE, token, httponly=True, samesite="strict", secure=secure_cookie
            )
        response.headers.setdefault("Cache-Control", "no-store")
        response.headers.setdefault("X-Frame-Options", "DENY")
        return response

    c = "/c/{cluster}"
    routes = [
        Route("/", home),
        Route(f"{c}/login", login_page),
        Route(f"{c}/login", login, methods=["POST"]),
        Route(f"{c}/logout", logout, methods=["POST"]),
        Route(f"{c}/cluster", cluster_page),
        Route(f"{c}/cluster/live", cluster_live),
        Route(f"{c}/topics", topics_page),
        Route(f"{c}/topics/create", create_topic, methods=["POST"]),
        Route(f"{c}/topics/delete", delete_topic, methods=["POST"]),
        Route(f"{c}/topics/{{topic}}", topic_page),
        Route(f"{c}/topics/{{topic}}/send", send_message, methods=["POST"]),
        Route(f"{c}/messages", messages_page),
        Route(f"{c}/messages/{{msg_id}}", message_page),
        Route(f"{c}/messages/{{msg_id}}/resend", resend_message, methods=["POST"]),
        Route(f"{c}/users", users_page),
        Route(f"{c}/users/{{action}}", user_action, methods=["POST"]),
        Route(f"{c}/groups", groups_page),
        Route(f"{c}/groups/{{group}}", group_page),
        Route(f"{c}/groups/{{group}}/live", group_live),
        Route(f"{c}/groups/{{group}}/reset", reset_offset, methods=["POST"]),
        Route(f"{c}/groups/{{group}}/delete", delete_group, methods=["POST"]),
        Route(f"{c}/groups/{{group}}/skip", skip_backlog, methods=["POST"]),
        Route(f"{c}/groups/{{group}}/settings", group_settings, methods=["POST"]),
        Route(f"{c}/static-topics", static_topics_page),
        Route(f"{c}/static-topics/create", create_static_topic, methods=["POST"]),
        Route(f"{c}/static-topics/{{topic}}", static_topic_page),
        Route(f"{c}/static-topics/{{topic}}/remap", remap_static_topic, methods=["POST"]),
        Route(f"{c}/groups/{{group}}/dlq", dlq_page),
        Route(f"{c}/groups/{{group}}/dlq.jsonl", dlq_export),
        Route(f"{c}/groups/{{group}}/dlq/resend", dlq_resend, methods=["POST"]),
        Mount("/static", StaticFiles(directory=HERE / "static"), name="static"),
    ]
    return Starlette(
        routes=routes,
        middleware=[Middleware(BaseHTTPMiddleware, dispatch=csrf_cookie)],
        exception_handlers={PageError: page_error, 404: not_found, Exception: server_error},
    )


async def _read(work: Awaitable[T]) -> T:
    """A read for a page; its failure is an error page (:func:`_failure`)."""
    try:
        return await work
    except (ClientError, RemotingError) as exc:
        raise PageError(*_failure(exc)) from None


#: the cluster's answers that say what a request names does not exist (a 404 page)
NOT_FOUND_CODES: Final = frozenset(
    {ResponseCode.TOPIC_NOT_EXIST, ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST}
)


def _failure(exc: ClientError | RemotingError) -> tuple[int, str]:
    """The status and line of a read or action that failed with ``exc``: 404 when what it
    names does not exist (a topic, a consumer group, a message every broker that could hold
    it was asked for), 400 for a malformed message id, else 502: the cluster could not be
    reached, answered something unreadable, or refused."""
    if isinstance(exc, MalformedIdError):
        return 400, str(exc)
    if isinstance(exc, TopicNotFoundError):
        return 404, f"topic {exc.topic} does not exist"
    if isinstance(exc, GroupNotFoundError):
        return 404, str(exc)
    if isinstance(exc, MessageNotFoundError) and not exc.unanswered:
        return 404, str(exc)
    if isinstance(exc, BrokerError | ResponseError) and exc.code in NOT_FOUND_CODES:
        return 404, _why(exc)
    return 502, _why(exc)


def _why(exc: BaseException) -> str:
    return describe_failure(exc) if isinstance(exc, RemotingError) else str(exc)


def _jsonable(value: Any) -> Any:
    if isinstance(value, bytes):
        try:
            return value.decode()
        except UnicodeDecodeError:
            return value.hex()
    return str(value)


def _now_ms() -> int:
    return int(datetime.now(UTC).timestamp() * 1000)


def _past_time(text: str) -> int:
    """The reset form's time, read as resetOffsetByTime's -s (now, -1h, epoch ms, ISO 8601)."""
    try:
        return PastTimeType().convert(text.strip(), None, None)
    except click.BadParameter as exc:
        raise actions.Refused(exc.format_message()) from None


def _page_number(text: str) -> int:
    """A page number from the URL (1 when absent); anything but a positive integer is a 400."""
    if not text.isdigit() or int(text) < 1:
        raise PageError(400, f"page must be a number from 1 (not {text!r})")
    return int(text)


def _topic_field(data: dict[str, str]) -> dict[str, str]:
    """The topic a form names (create, delete): what the user's rules are checked on."""
    return {"topic": data.get("topic", "").strip()}


def _group_url(cluster: str, group: str) -> str:
    return f"/c/{quote(cluster)}/groups/{quote(group, safe='')}"
