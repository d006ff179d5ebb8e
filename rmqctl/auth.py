"""User and access-rule commands (RocketMQ 5.3's names): createUser, updateUser, deleteUser,
listUser, createAcl, updateAcl, deleteAcl, listAcl.

They talk to the controllers (following CONTROLLER_NOT_LEADER to the leader); a change is
answered once it is committed in the controllers' Raft log. Arguments are validated here first,
so a malformed CIDR or an unknown action is one line on stderr and exit 1 before anything is
sent. Secrets are never printed. NOT ENFORCED YET: the controllers do not authenticate these
requests, and brokers do not check the rules (issue 14, items 2 and 3).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import click

from protocol.acl import AclError, check_secret, check_username, make_rule, resource_pattern
from protocol.acl import user_type as parse_user_type
from protocol.controller_requests.base import ControllerRequest
from protocol.controller_requests.users import (
    CreateAcl,
    CreateUser,
    DeleteAcl,
    DeleteUser,
    ListAcl,
    ListUsers,
    UpdateAcl,
    UpdateUser,
    UserAnswer,
)
from protocol.fields import FieldError
from protocol.remoting import Frame
from rmqctl.common import CommandError, Settings, addresses_option, emit, pass_settings, run, table
from rmqctl.controller_calls import answer_body, call_controllers

SUPER_USER_ONLY = (
    "With authentication on (auth_enabled) only a super user may do this: give its "
    "credentials (rmqctl --access-key/--secret-key, $RMQ_ACCESS_KEY/$RMQ_SECRET_KEY or "
    "--credentials-file); brokers apply the rules to every request."
)


def _checked(check: Any, *args: Any) -> Any:
    """``check(*args)``; a value it refuses (an option's) is a usage error, exit status 2."""
    try:
        return check(*args)
    except AclError as exc:
        raise click.UsageError(str(exc)) from None


def _subject(value: str) -> str:
    """``User:alice`` (RocketMQ's subject form) or plain ``alice``."""
    kind, sep, name = value.partition(":")
    if sep and kind.lower() != "user":
        raise click.UsageError(f"subject {value!r} must be User:name")
    username = name if sep else value
    _checked(check_username, username)
    return username


def _split(value: str | None) -> list[str]:
    return [p.strip() for p in (value or "").split(",") if p.strip()]


async def _send(addresses: str, ask: ControllerRequest) -> Frame:
    """One request to the controllers (the leader for a change); the secret, if any, travels in
    the msgpack body, never in a header."""
    return await call_controllers(addresses, ask.code, *ask.encode())


def _user_human(doc: Mapping[str, Any]) -> str:
    return f"user {doc.get('username')} ({doc.get('userType')}), version {doc.get('version')}"


def _rules_rows(acls: list[Mapping[str, Any]]) -> list[list[object]]:
    return [
        [
            acl.get("username"),
            rule.get("resource"),
            ",".join(rule.get("actions") or ()),
            rule.get("decision"),
            ",".join(rule.get("sources") or ()) or "*",
        ]
        for acl in acls
        for rule in acl.get("rules") or ()
    ]


def _acl_human(acls: list[Mapping[str, Any]]) -> str:
    return table(["User", "Resource", "Actions", "Decision", "Sources"], _rules_rows(acls))


def _header(frame: Frame) -> dict[str, Any]:
    """The user an answer names (:class:`UserAnswer`), as printed."""
    try:
        return UserAnswer.parse(frame.header, frame.body).to_doc()
    except FieldError as exc:
        raise CommandError(f"malformed answer from the controllers: {exc}") from None


# Users -----------------------------------------------------------------------------------------


def _change_user(settings: Settings, addresses: str, ask: ControllerRequest, verb: str) -> None:
    """Send a change of a user and print the user the answer names ("``verb`` user ...")."""
    doc = _header(run(_send(addresses, ask)))
    emit(settings, doc, lambda: f"{verb} {_user_human(doc)}")


username_option = click.option("-u", "--username", required=True, metavar="NAME", help="Username.")
user_type_option = click.option(
    "-t",
    "--user-type",
    metavar="TYPE",
    default=None,
    help="Super or Normal (createUser default: Normal).",
)


@click.command("createUser", short_help="Create a user (access key and secret).")
@addresses_option
@username_option
@click.option(
    "-p",
    "--password",
    metavar="SECRET",
    prompt="Secret",
    hide_input=True,
    help="The user's secret key, 8 to 256 printable characters (prompted when not given).",
)
@user_type_option
@pass_settings
def create_user(
    settings: Settings, addresses: str, username: str, password: str, user_type: str | None
) -> None:
    """Create a user: USERNAME is its access key, the secret is stored sealed under the
    controllers' auth key and never shown again.

    Prints {"username", "userType", "version"}.
    """
    _checked(check_username, username)
    _checked(check_secret, password)
    kind = _checked(parse_user_type, user_type or "normal")
    _change_user(
        settings,
        addresses,
        CreateUser(username=username, user_type=kind, secret=password),
        "created",
    )


@click.command("updateUser", short_help="Change a user's secret or type.")
@addresses_option
@username_option
@click.option("-p", "--password", metavar="SECRET", default=None, help="The new secret key.")
@user_type_option
@pass_settings
def update_user(
    settings: Settings,
    addresses: str,
    username: str,
    password: str | None,
    user_type: str | None,
) -> None:
    """Change a user's secret (-p) and/or type (-t).

    Prints {"username", "userType", "version"}.
    """
    _checked(check_username, username)
    if password is None and user_type is None:
        raise click.UsageError("nothing to update: give -p SECRET and/or -t TYPE")
    kind = None if user_type is None else _checked(parse_user_type, user_type)
    if password is not None:
        _checked(check_secret, password)
    _change_user(
        settings,
        addresses,
        UpdateUser(username=username, user_type=kind, secret=password),
        "updated",
    )


@click.command("deleteUser", short_help="Delete a user and its rules.")
@addresses_option
@username_option
@pass_settings
def delete_user(settings: Settings, addresses: str, username: str) -> None:
    """Delete a user and every rule of it.

    Prints {"username", "userType", "version"} of the deleted user.
    """
    _checked(check_username, username)
    _change_user(settings, addresses, DeleteUser(username=username), "deleted")


@click.command("listUser", short_help="List users (never their secrets).")
@addresses_option
@click.option("-f", "--filter", "prefix", default="", metavar="PREFIX", help="Username prefix.")
@pass_settings
def list_user(settings: Settings, addresses: str, prefix: str) -> None:
    """List the users whose name starts with PREFIX.

    Prints {"users": [{"username", "userType", "version"}]}.
    """
    resp = run(_send(addresses, ListUsers(prefix=prefix)))
    doc = _list_doc(resp, "users")
    emit(
        settings,
        doc,
        lambda: table(
            ["User", "Type", "Version"],
            [[u.get("username"), u.get("userType"), u.get("version")] for u in doc["users"]],
        ),
    )


def _list_doc(resp: Frame, key: str) -> dict[str, Any]:
    raw = answer_body(resp, key)
    if not isinstance(raw, dict) or not isinstance(raw.get(key), list):
        raise CommandError(f"malformed {key} answer")
    return {key: raw[key]}


# Access rules ----------------------------------------------------------------------------------


def _with_rules(resp: Frame) -> dict[str, Any]:
    """An access-rule change's answer: the user it names (:func:`_header`) and, under
    "rules", the user's rules after the change."""
    doc = _header(resp)
    doc["rules"] = _list_doc(resp, "rules")["rules"]
    return doc


subject_option = click.option(
    "-s", "--subject", required=True, metavar="User:NAME", help="The user (User:alice or alice)."
)


def _rule_options(func: Any) -> Any:
    for option in reversed(
        [
            click.option(
                "-r",
                "--resources",
                required=True,
                metavar="RES[,RES]",
                help="Cluster:NAME, Topic:NAME, Group:NAME; NAME may be prefix* or *.",
            ),
            click.option(
                "-A",
                "--actions",
                required=True,
                metavar="ACT[,ACT]",
                help="pub, sub, create, update, delete, get, list, admin.",
            ),
            click.option(
                "-d",
                "--decision",
                default="allow",
                show_default=True,
                metavar="allow|deny",
                help="Allow or Deny.",
            ),
            click.option(
                "-i",
                "--source-ip",
                default=None,
                metavar="CIDR[,CIDR]",
                help="Only from these address ranges (default: any address).",
            ),
        ]
    ):
        func = option(func)
    return func


def _put_acl(
    settings: Settings,
    addresses: str,
    kind: type[CreateAcl] | type[UpdateAcl],
    verb: str,
    subject: str,
    resources: str,
    actions: str,
    decision: str,
    source_ip: str | None,
) -> None:
    username = _subject(subject)
    names = _split(resources)
    if not names:
        raise click.UsageError("no resource given (-r)")
    rules = tuple(
        _checked(make_rule, r, _split(actions), decision, _split(source_ip)) for r in names
    )
    doc = _with_rules(run(_send(addresses, kind(username=username, rules=rules))))
    emit(settings, doc, lambda: f"{verb} {len(rules)} rule(s) of {username}")


@click.command("createAcl", short_help="Give a user rules on resources.")
@addresses_option
@subject_option
@_rule_options
@pass_settings
def create_acl(
    settings: Settings,
    addresses: str,
    subject: str,
    resources: str,
    actions: str,
    decision: str,
    source_ip: str | None,
) -> None:
    """Add one rule per resource to a user (none may exist on that resource yet). A deny
    matching a request wins over any allow; a request no rule matches is denied.

    Prints {"username", "userType", "version", "rules": [...]}.
    """
    _put_acl(
        settings,
        addresses,
        CreateAcl,
        "created",
        subject,
        resources,
        actions,
        decision,
        source_ip,
    )


@click.command("updateAcl", short_help="Replace a user's rules on resources.")
@addresses_option
@subject_option
@_rule_options
@pass_settings
def update_acl(
    settings: Settings,
    addresses: str,
    subject: str,
    resources: str,
    actions: str,
    decision: str,
    source_ip: str | None,
) -> None:
    """Replace the user's rule on each resource (each must exist).

    Prints {"username", "userType", "version", "rules": [...]}.
    """
    _put_acl(
        settings,
        addresses,
        UpdateAcl,
        "updated",
        subject,
        resources,
        actions,
        decision,
        source_ip,
    )


@click.command("deleteAcl", short_help="Delete a user's rules.")
@addresses_option
@subject_option
@click.option(
    "-r", "--resources", default=None, metavar="RES[,RES]", help="Only these (default: all)."
)
@pass_settings
def delete_acl(settings: Settings, addresses: str, subject: str, resources: str | None) -> None:
    """Delete the user's rules on the named resources, or all of its rules.

    Prints {"username", "userType", "version", "rules": [the rules left]}.
    """
    username = _subject(subject)
    patterns = tuple(_checked(resource_pattern, r) for r in _split(resources))
    doc = _with_rules(run(_send(addresses, DeleteAcl(username=username, resources=patterns))))
    named = ", ".join(str(p) for p in patterns)
    emit(settings, doc, lambda: f"deleted {named or 'all'} rules of {username}")


@click.command("listAcl", short_help="List users' rules.")
@addresses_option
@click.option("-s", "--subject", default=None, metavar="User:NAME", help="Only this user.")
@click.option(
    "-r", "--resource", default="", metavar="TEXT", help="Only rules whose resource contains TEXT."
)
@pass_settings
def list_acl(settings: Settings, addresses: str, subject: str | None, resource: str) -> None:
    """List the rules of every user (or of one).

    Prints {"acls": [{"username", "userType", "version", "rules": [{"resource", "actions",
    "decision", "sources"}]}]}.
    """
    ask = ListAcl(username=_subject(subject) if subject else None, resource=resource)
    doc = _list_doc(run(_send(addresses, ask)), "acls")
    emit(settings, doc, lambda: _acl_human(doc["acls"]))


for _command in (
    create_user,
    update_user,
    delete_user,
    list_user,
    create_acl,
    update_acl,
    delete_acl,
    list_acl,
):
    _command.help = f"{_command.help}\n\n{SUPER_USER_ONLY}"

__all__ = [
    "create_acl",
    "create_user",
    "delete_acl",
    "delete_user",
    "list_acl",
    "list_user",
    "update_acl",
    "update_user",
]
