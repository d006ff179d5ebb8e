"""The ``rmqctl`` command line: mqadmin's command names and short flags.

Commands live one module per area (:mod:`rmqctl.topic`, :mod:`rmqctl.cluster`,
:mod:`rmqctl.message`, :mod:`rmqctl.lookup`, :mod:`rmqctl.group`); a new area (e.g. the
controller commands) adds a module and one entry in ``COMMANDS``.
"""

from __future__ import annotations

import importlib
import logging
import sys
from pathlib import Path
from typing import Final

import click
import structlog

from remoting.client import advise_tls, use_credentials, use_tls
from remoting.tls import TlsError, client_context
from rmqctl.common import ADDRESSES_ENV, Settings
from rmqctl.credentials import (
    ACCESS_KEY_ENV,
    CREDENTIALS_FILE_ENV,
    SECRET_KEY_ENV,
    resolve_credentials,
)

COMMANDS: Final[dict[str, tuple[str, str]]] = {
    "updateTopic": ("rmqctl.topic", "update_topic"),
    "topicRoute": ("rmqctl.topic", "topic_route"),
    "topicList": ("rmqctl.topic_admin", "topic_list"),
    "topicStatus": ("rmqctl.topic_admin", "topic_status"),
    "deleteTopic": ("rmqctl.topic_admin", "delete_topic"),
    "updateStaticTopic": ("rmqctl.static_topic", "update_static_topic"),
    "staticTopicMapping": ("rmqctl.static_topic", "static_topic_mapping"),
    "remapStaticTopic": ("rmqctl.static_topic", "remap_static_topic"),
    "brokerTraffic": ("rmqctl.rebalance", "broker_traffic"),
    "rebalancePlan": ("rmqctl.rebalance", "rebalance_plan"),
    "rebalanceApply": ("rmqctl.rebalance", "rebalance_apply"),
    "clusterList": ("rmqctl.cluster", "cluster_list"),
    "brokerStatus": ("rmqctl.broker_admin", "broker_status"),
    "getBrokerConfig": ("rmqctl.broker_admin", "get_broker_config"),
    "updateBrokerConfig": ("rmqctl.broker_admin", "update_broker_config"),
    "statsAll": ("rmqctl.broker_stats", "stats_all"),
    "clusterRT": ("rmqctl.broker_stats", "cluster_rt"),
    "checkMsgSendRT": ("rmqctl.broker_stats", "check_msg_send_rt"),
    "sendMessage": ("rmqctl.message", "send_message"),
    "consumeMessage": ("rmqctl.message", "consume_message"),
    "consumerProgress": ("rmqctl.progress", "consumer_progress"),
    "consumerConnection": ("rmqctl.progress", "consumer_connection"),
    "producerConnection": ("rmqctl.progress", "producer_connection"),
    "resetOffsetByTime": ("rmqctl.offsets", "reset_offset_by_time"),
    "skipAccumulatedMessage": ("rmqctl.offsets", "skip_accumulated_message"),
    "queryMsgById": ("rmqctl.lookup", "query_msg_by_id"),
    "queryMsgByUniqueKey": ("rmqctl.lookup", "query_msg_by_unique_key"),
    "queryMsgByKey": ("rmqctl.lookup", "query_msg_by_key"),
    "queryMsgByOffset": ("rmqctl.lookup", "query_msg_by_offset"),
    "queryMsgByTime": ("rmqctl.message_range", "query_msg_by_time"),
    "printMsg": ("rmqctl.message_range", "print_msg"),
    "queryMsgTraceById": ("rmqctl.trace", "query_msg_trace_by_id"),
    "resendMessage": ("rmqctl.resend", "resend_message"),
    "recallMessage": ("rmqctl.message", "recall_message"),
    "updateSubGroup": ("rmqctl.group", "update_sub_group"),
    "getSubGroup": ("rmqctl.group", "get_sub_group"),
    "deleteSubGroup": ("rmqctl.topic_admin", "delete_sub_group"),
    "queryDLQ": ("rmqctl.group", "query_dlq"),
    "resendDLQ": ("rmqctl.group", "resend_dlq"),
    "getControllerMetaData": ("rmqctl.controller", "get_controller_metadata"),
    "getSyncStateSet": ("rmqctl.controller", "get_sync_state_set"),
    "electMaster": ("rmqctl.controller", "elect_master"),
    "getBrokerEpoch": ("rmqctl.controller", "get_broker_epoch"),
    "skipCorruptMessage": ("rmqctl.repair", "skip_corrupt_message"),
    "cleanBrokerMetadata": ("rmqctl.controller", "clean_broker_metadata"),
    "getControllerConfig": ("rmqctl.controller", "get_controller_config"),
    "addController": ("rmqctl.controller", "add_controller"),
    "removeController": ("rmqctl.controller", "remove_controller"),
    "transferControllerLeader": ("rmqctl.controller", "transfer_controller_leader"),
    "createUser": ("rmqctl.auth", "create_user"),
    "updateUser": ("rmqctl.auth", "update_user"),
    "deleteUser": ("rmqctl.auth", "delete_user"),
    "listUser": ("rmqctl.auth", "list_user"),
    "createAcl": ("rmqctl.auth", "create_acl"),
    "updateAcl": ("rmqctl.auth", "update_acl"),
    "deleteAcl": ("rmqctl.auth", "delete_acl"),
    "listAcl": ("rmqctl.auth", "list_acl"),
}
"""Each command's name and where it is defined (module, attribute), in the order of mqadmin's
areas. A command's module is imported when the command is run (or ``--help`` lists them all),
so a run imports what its own command needs, not every area's client code."""


class _Commands(click.Group):
    """The command group whose commands :data:`COMMANDS` names, each imported when asked for."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*self.commands, *COMMANDS})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in self.commands and cmd_name in COMMANDS:
            module, attribute = COMMANDS[cmd_name]
            self.add_command(getattr(importlib.import_module(module), attribute), cmd_name)
        return self.commands.get(cmd_name)


@click.group(cls=_Commands, context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--json",
    "json_output",
    is_flag=True,
    help="Print one JSON document (consumeMessage: one per line).",
)
@click.option(
    "-a",
    "-n",
    "--addresses",
    "addresses",
    envvar=ADDRESSES_ENV,
    metavar="ADDRS",
    help="Controller addresses (or a lone broker's), ';'-separated; -n is mqadmin's name for "
    f"it; default ${ADDRESSES_ENV}.",
)
@click.option(
    "-v", "--verbose", is_flag=True, help="Log the SDK's warnings and progress to stderr."
)
@click.option(
    "--access-key",
    envvar=ACCESS_KEY_ENV,
    metavar="NAME",
    help=f"Sign every request as this user (default ${ACCESS_KEY_ENV}).",
)
@click.option(
    "--secret-key",
    envvar=SECRET_KEY_ENV,
    metavar="SECRET",
    help=f"The user's secret key (default ${SECRET_KEY_ENV}; a flag shows in ps: prefer the "
    "variable or a credentials file).",
)
@click.option(
    "--credentials-file",
    envvar=CREDENTIALS_FILE_ENV,
    type=click.Path(dir_okay=False, path_type=Path),
    metavar="FILE",
    help=f"TOML file with access_key and secret_key, mode 600 (default ${CREDENTIALS_FILE_ENV}).",
)
@click.option(
    "--auth-key-file",
    type=click.Path(dir_okay=False, path_type=Path),
    metavar="FILE",
    help="Sign as the cluster itself, with the cluster's auth key (a super user): to create "
    "the first super user on a host that holds the key.",
)
@click.option(
    "--tls",
    is_flag=True,
    envvar="RMQ_TLS",
    help="Connect over TLS (a cluster with tls_enabled), checking the servers' certificates "
    "against --ca-file or the system's CAs (default $RMQ_TLS).",
)
@click.option(
    "--ca-file",
    envvar="RMQ_CA_FILE",
    type=click.Path(dir_okay=False, path_type=Path),
    metavar="FILE",
    help="PEM CA certificates the servers' certificates must chain to; implies --tls "
    "(default $RMQ_CA_FILE).",
)
@click.option(
    "--cert",
    type=click.Path(dir_okay=False, path_type=Path),
    metavar="FILE",
    help="PEM client certificate (with --key), for what only the cluster may send when the "
    "servers have tls_verify_client: --auth-key-file's requests; implies --tls.",
)
@click.option(
    "--key",
    type=click.Path(dir_okay=False, path_type=Path),
    metavar="FILE",
    help="PEM private key of --cert.",
)
@click.version_option(package_name="rmq-py", message="rmqctl %(version)s")
@click.pass_context
def cli(
    ctx: click.Context,
    json_output: bool,
    addresses: str | None,
    verbose: bool,
    access_key: str | None,
    secret_key: str | None,
    credentials_file: Path | None,
    auth_key_file: Path | None,
    tls: bool,
    ca_file: Path | None,
    cert: Path | None,
    key: Path | None,
) -> None:
    """Administer and exercise an rmq cluster (controllers and brokers).

    -a takes the controller addresses, or in development mode a lone broker's,
    separated by ';'. With credentials (--access-key and --secret-key, their
    environment variables, or --credentials-file) every request is signed: a cluster
    with authentication on refuses unsigned ones; --tls (and --ca-file) for a cluster
    with TLS on. Exit status: 0 on success, 1 on
    failure (one line on stderr), 2 on a usage error.
    """
    settings = ctx.ensure_object(Settings)
    settings.json = settings.json or json_output
    settings.verbose = verbose
    settings.addresses = addresses
    _configure_logging(verbose)
    use_credentials(resolve_credentials(access_key, secret_key, credentials_file, auth_key_file))
    advise_tls("use --tls, or --ca-file with a private CA", "drop --tls and --ca-file")
    if (cert is None) != (key is None):
        raise click.UsageError("give both --cert and --key")
    if tls or ca_file is not None or cert is not None:
        try:
            use_tls(client_context(ca_file, cert, key))
        except TlsError as exc:
            raise click.BadParameter(str(exc), param_hint="--ca-file/--cert") from None


def all_commands() -> dict[str, click.Command]:
    """Every command by name, each imported (for the tests and documents that list them)."""
    ctx = click.Context(cli)
    found = {name: cli.get_command(ctx, name) for name in cli.list_commands(ctx)}
    return {name: command for name, command in found.items() if command is not None}


def _configure_logging(verbose: bool) -> None:
    # The SDK logs through structlog; keep stdout for command output only.
    structlog.configure(
        processors=[
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="%H:%M:%S"),
            structlog.dev.ConsoleRenderer(colors=False),
        ],
        logger_factory=structlog.PrintLoggerFactory(sys.stderr),
        wrapper_class=structlog.make_filtering_bound_logger(
            logging.INFO if verbose else logging.ERROR
        ),
        cache_logger_on_first_use=False,
    )


def main() -> None:
    """Console-script entry point."""
    try:
        cli.main(prog_name="rmqctl")
    except KeyboardInterrupt:
        sys.exit(130)
    except Exception as exc:  # never a traceback: one line, exit 1
        click.echo(f"rmqctl: internal error: {type(exc).__name__}: {exc}", err=True)
        sys.exit(1)
