"""The ``rmqctl`` command line: mqadmin's command names and short flags.

Commands live one module per area (:mod:`rmqctl.topic`, :mod:`rmqctl.cluster`,
:mod:`rmqctl.message`, :mod:`rmqctl.lookup`, :mod:`rmqctl.group`); a new area (e.g. the
controller commands) adds a module and one entry in ``COMMANDS``.
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path

import click
import structlog

from remoting.client import advise_tls, use_credentials, use_tls
from remoting.tls import TlsError, client_context
from rmqctl import auth, broker_admin, broker_stats
from rmqctl import controller as ctl
from rmqctl.cluster import cluster_list
from rmqctl.common import ADDRESSES_ENV, Settings
from rmqctl.credentials import (
    ACCESS_KEY_ENV,
    CREDENTIALS_FILE_ENV,
    SECRET_KEY_ENV,
    resolve_credentials,
)
from rmqctl.group import get_sub_group, query_dlq, resend_dlq, update_sub_group
from rmqctl.lookup import (
    query_msg_by_id,
    query_msg_by_key,
    query_msg_by_offset,
    query_msg_by_unique_key,
)
from rmqctl.message import consume_message, recall_message, send_message
from rmqctl.message_range import print_msg, query_msg_by_time
from rmqctl.offsets import reset_offset_by_time, skip_accumulated_message
from rmqctl.progress import consumer_connection, consumer_progress, producer_connection
from rmqctl.rebalance import broker_traffic, rebalance_apply, rebalance_plan
from rmqctl.repair import skip_corrupt_message
from rmqctl.resend import resend_message
from rmqctl.static_topic import remap_static_topic, static_topic_mapping, update_static_topic
from rmqctl.topic import topic_route, update_topic
from rmqctl.topic_admin import delete_sub_group, delete_topic, topic_list, topic_status
from rmqctl.trace import query_msg_trace_by_id

COMMANDS: list[click.Command] = [
    update_topic,
    topic_route,
    topic_list,
    topic_status,
    delete_topic,
    update_static_topic,
    static_topic_mapping,
    remap_static_topic,
    broker_traffic,
    rebalance_plan,
    rebalance_apply,
    cluster_list,
    broker_admin.broker_status,
    broker_admin.get_broker_config,
    broker_admin.update_broker_config,
    broker_stats.stats_all,
    broker_stats.cluster_rt,
    broker_stats.check_msg_send_rt,
    send_message,
    consume_message,
    consumer_progress,
    consumer_connection,
    producer_connection,
    reset_offset_by_time,
    skip_accumulated_message,
    query_msg_by_id,
    query_msg_by_unique_key,
    query_msg_by_key,
    query_msg_by_offset,
    query_msg_by_time,
    print_msg,
    query_msg_trace_by_id,
    resend_message,
    recall_message,
    update_sub_group,
    get_sub_group,
    delete_sub_group,
    query_dlq,
    resend_dlq,
    ctl.get_controller_metadata,
    ctl.get_sync_state_set,
    ctl.elect_master,
    ctl.get_broker_epoch,
    skip_corrupt_message,
    ctl.clean_broker_metadata,
    ctl.get_controller_config,
    ctl.add_controller,
    ctl.remove_controller,
    ctl.transfer_controller_leader,
    auth.create_user,
    auth.update_user,
    auth.delete_user,
    auth.list_user,
    auth.create_acl,
    auth.update_acl,
    auth.delete_acl,
    auth.list_acl,
]


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
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


for _command in COMMANDS:
    cli.add_command(_command)


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
