"""``rmq-pipeline``: the archive and traffic jobs on Spark.

::

    rmq-pipeline archive -a ADDRS -t TOPIC --output DIR --checkpoint DIR [--interval "1 minute"]
    rmq-pipeline traffic -a ADDRS -t TOPIC [-t TOPIC ...] [--output DIR] [--threshold 5000]

Both run on ``local[*]`` by default; ``--master`` picks another (``spark://...``, ``yarn``, ...),
``--conf key=value`` sets Spark options. A secured cluster: ``--access-key``/``--secret-key``
(or ``$RMQ_ACCESS_KEY``/``$RMQ_SECRET_KEY``) sign every request, ``--tls``/``--ca-file`` connect
over TLS; they go to the pre-check, the jobs' own requests and the ``rmq`` source's options. Under spark-submit (``spark-submit [--master URL]
pipeline/cli.py archive ...``) spark-submit's master and conf are used.

Like a good command-line tool: the controllers and topics are checked before Spark starts; the
result (JSON) is all that goes to stdout, Spark's log and progress bar are off (``--verbose``:
Spark's warnings and the pipeline's log on stderr); a failure is one line on stderr,
``rmq-pipeline: <what is wrong>``, with exit status 1 (2 for a usage error, and for a job where
the spark extra is not installed: the line names what is missing and ``make pipeline-deps``), and
no Java or Python stack unless ``--verbose``.
"""

from __future__ import annotations

import json
import logging
import re
import sys
import traceback
from dataclasses import dataclass, field
from typing import Any

import click
import structlog

from pipeline.archive import ArchiveSpec, run_archive
from pipeline.errors import OptionError, PipelineError
from pipeline.offsets import parse_spec
from pipeline.options import credentials_option, tls_option
from pipeline.traffic import DEFAULT_THRESHOLD, TrafficSpec, run_traffic

ADDRESSES_ENV = "RMQ_PIPELINE_CONTROLLERS"
#: the same variables rmqctl reads
ACCESS_KEY_ENV = "RMQ_ACCESS_KEY"
SECRET_KEY_ENV = "RMQ_SECRET_KEY"
TLS_ENV = "RMQ_TLS"
CA_FILE_ENV = "RMQ_CA_FILE"


@dataclass(slots=True)
class Settings:
    master: str | None = None
    conf: dict[str, str] = field(default_factory=dict)
    verbose: bool = False
    #: the ``rmq`` source options of every connection (accessKey/secretKey, tls/caFile)
    connection: dict[str, str] = field(default_factory=dict)


pass_settings = click.make_pass_decorator(Settings, ensure=True)


class JobError(click.ClickException):
    """A failed job: one line on stderr (with ``--verbose``, the full detail of ``detail``
    first)."""

    exit_code = 1

    def __init__(self, message: str, detail: BaseException | None = None, verbose: bool = False):
        super().__init__(message)
        self.detail = detail
        self.verbose = verbose

    def show(self, file: Any = None) -> None:
        if self.verbose and self.detail is not None:
            click.echo("".join(traceback.format_exception(self.detail)).rstrip(), err=True)
        click.echo(f"rmq-pipeline: {self.format_message()}", err=True)


class OneLineGroup(click.Group):
    """Usage errors as one line too (``rmq-pipeline archive: Missing option '--output'. (see
    rmq-pipeline archive --help)``), exit status 2."""

    def main(self, *args: Any, **kwargs: Any) -> Any:
        kwargs["standalone_mode"] = False
        try:
            code = super().main(*args, **kwargs)
        except click.UsageError as exc:
            where = exc.ctx.command_path if exc.ctx is not None else "rmq-pipeline"
            click.echo(f"{where}: {exc.format_message()} (see {where} --help)", err=True)
            sys.exit(exc.exit_code)
        except click.ClickException as exc:
            exc.show()
            sys.exit(exc.exit_code)
        except click.Abort:
            click.echo("rmq-pipeline: aborted", err=True)
            sys.exit(1)
        sys.exit(code if isinstance(code, int) else 0)


_OUR_ERROR = re.compile(r"pipeline\.errors\.\w+: (.+)")


def short_error(exc: BaseException) -> str:
    """One line for a failure: our own error's message when Spark wrapped it, else the first
    line of Spark's."""
    text = str(exc)
    found = _OUR_ERROR.findall(text)
    if found:
        return str(found[-1]).strip()
    first = next((line.strip() for line in text.splitlines() if line.strip()), "")
    return first or type(exc).__name__


def _conf(ctx: click.Context, _param: click.Parameter, values: tuple[str, ...]) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in values:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise click.BadParameter(f"{item!r} is not key=value", ctx=ctx)
        out[key.strip()] = value
    return out


@click.group(cls=OneLineGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--master", metavar="URL", help="Spark master (default local[*], or spark-submit's).")
@click.option(
    "--conf", "conf", multiple=True, callback=_conf, metavar="KEY=VALUE", help="A Spark option."
)
@click.option(
    "-v",
    "--verbose",
    is_flag=True,
    help="Log the pipeline's progress and Spark's warnings to stderr; on failure, the full "
    "detail (stacks) before the one-line error.",
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
    "variable).",
)
@click.option(
    "--tls",
    is_flag=True,
    envvar=TLS_ENV,
    help="Connect over TLS (a cluster with tls_enabled), checking the servers' certificates "
    f"against --ca-file or the system's CAs (default ${TLS_ENV}).",
)
@click.option(
    "--ca-file",
    envvar=CA_FILE_ENV,
    metavar="FILE",
    help="PEM CA certificates the servers' certificates must chain to; implies --tls; the "
    f"path must exist on every Spark executor too (default ${CA_FILE_ENV}).",
)
@click.pass_context
def cli(
    ctx: click.Context,
    master: str | None,
    conf: dict[str, str],
    verbose: bool,
    access_key: str | None,
    secret_key: str | None,
    tls: bool,
    ca_file: str | None,
) -> None:
    """The data pipeline jobs on Spark (archive, traffic).

    A cluster with authentication on needs --access-key and --secret-key (every request
    signed), one with TLS on --tls or --ca-file: they apply to both jobs.
    """
    if ctx.invoked_subcommand is not None:
        require_spark_extra()
    settings = ctx.ensure_object(Settings)
    settings.master = master
    settings.conf = conf
    settings.verbose = verbose
    settings.connection = connection_options(access_key, secret_key, tls, ca_file)
    structlog.configure(
        processors=[
            structlog.processors.add_log_level,
            structlog.dev.ConsoleRenderer(colors=False),
        ],
        logger_factory=structlog.PrintLoggerFactory(sys.stderr),
        wrapper_class=structlog.make_filtering_bound_logger(
            logging.INFO if verbose else logging.WARNING
        ),
    )


class MissingExtra(click.ClickException):
    """The spark extra is not installed: a refused start, one line and exit status 2."""

    exit_code = 2

    def show(self, file: Any = None) -> None:
        click.echo(f"rmq-pipeline: {self.format_message()}", err=True)


def require_spark_extra() -> None:
    """Before a job parses its options or imports anything of Spark's: pyspark, pyarrow and
    numpy are there, else one line naming what is missing and ``make pipeline-deps``."""
    from pipeline.session import spark_session_class

    try:
        spark_session_class()
    except PipelineError as exc:
        raise MissingExtra(str(exc)) from None


def connection_options(
    access_key: str | None, secret_key: str | None, tls: bool, ca_file: str | None
) -> dict[str, str]:
    """The ``rmq`` source options for the flags, checked as the source checks them."""
    if bool(access_key) != bool(secret_key):
        raise click.UsageError(
            f"give both --access-key and --secret-key (or ${ACCESS_KEY_ENV} and "
            f"${SECRET_KEY_ENV}), not one"
        )
    if ca_file is not None and not ca_file.strip():
        raise click.BadParameter(
            "must be the path of a PEM CA file, not empty", param_hint="--ca-file"
        )
    options: dict[str, str] = {}
    if access_key and secret_key:
        options.update(accessKey=access_key, secretKey=secret_key)
    if tls or ca_file:
        options["tls"] = "true"
    if ca_file:
        options["caFile"] = ca_file.strip()
    try:
        credentials_option(options)
        tls_option(options)
    except OptionError as exc:
        raise click.UsageError(_flag_words(str(exc))) from None
    return options


def _flag_words(message: str) -> str:
    """An error the ``rmq`` source words with its option names, with the flags' instead."""
    for option, flag in (
        ("set option tls or caFile", "use --tls or --ca-file"),
        ("drop options tls and caFile", "drop --tls and --ca-file"),
        ("option caFile", "--ca-file"),
        ("options accessKey and secretKey", "--access-key and --secret-key"),
    ):
        message = message.replace(option, flag)
    return message


def controllers_option(func: Any) -> Any:
    return click.option(
        "-a",
        "--controllers",
        required=True,
        envvar=ADDRESSES_ENV,
        metavar="ADDRS",
        help=f"Controller addresses (or a lone broker's), ';'-separated; default ${ADDRESSES_ENV}.",
    )(func)


def _precheck(settings: Settings, controllers: str, topics: tuple[str, ...]) -> None:
    """Before Spark starts (tens of seconds): the controllers answer (over TLS and signed as
    the flags say) and every topic exists (the spark extra was checked before the job's options
    were parsed: :func:`require_spark_extra`)."""
    from pipeline.snapshot import snapshot

    try:
        credentials = credentials_option(settings.connection)
        tls = tls_option(settings.connection)
        for topic in topics:
            snapshot(controllers, topic, 5.0, credentials, tls)
    except PipelineError as exc:
        raise JobError(_flag_words(str(exc)), exc, settings.verbose) from None


def _session(settings: Settings, app: str) -> Any:
    from pipeline.session import build_session

    try:
        spark = build_session(
            app, settings.master, settings.conf, quiet=True, verbose=settings.verbose
        )
    except PipelineError as exc:
        raise JobError(str(exc), exc, settings.verbose) from None
    except Exception as exc:  # the JVM did not start (no Java, bad --master, ...)
        message = short_error(exc)
        if "java" in message.lower() or "gateway" in message.lower():
            message += " (Spark needs Java 17: is JAVA_HOME set?)"
        raise JobError(f"cannot start Spark: {message}", exc, settings.verbose) from None
    spark.sparkContext.setLogLevel("WARN" if settings.verbose else "OFF")
    return spark


def _failed(settings: Settings, exc: BaseException) -> JobError:
    return JobError(short_error(exc), exc, settings.verbose)


@cli.command("archive")
@controllers_option
@click.option("-t", "--topic", required=True, help="The topic to archive.")
@click.option("--output", required=True, metavar="DIR", help="Parquet directory (by day).")
@click.option("--checkpoint", required=True, metavar="DIR", help="Spark checkpoint directory.")
@click.option(
    "--starting-offsets",
    default="earliest",
    show_default=True,
    help="Where a new archive starts: earliest, latest or JSON offsets.",
)
@click.option("--max-offsets-per-trigger", type=click.IntRange(1), help="Messages per batch.")
@click.option(
    "--fail-on-data-loss/--no-fail-on-data-loss",
    default=True,
    show_default=True,
    help="Fail when retention removed messages not archived yet.",
)
@click.option(
    "--interval",
    metavar="DURATION",
    help='Keep running, a batch every DURATION ("1 minute"), until Ctrl-C or SIGTERM (then '
    "the result, exit status 0); default: archive what is there now and stop.",
)
@pass_settings
def archive_command(
    settings: Settings,
    controllers: str,
    topic: str,
    output: str,
    checkpoint: str,
    starting_offsets: str,
    max_offsets_per_trigger: int | None,
    fail_on_data_loss: bool,
    interval: str | None,
) -> None:
    """Stream TOPIC into Parquet under OUTPUT, partitioned by day (UTC), exactly once through
    the checkpoint: run it again with the same --checkpoint to continue where it stopped.

    Prints {"topic", "batches", "rows", "files", "offsetsBehindLatest", "endOffset"}: the
    batches, rows and Parquet files this run wrote, how far its last batch was behind the
    latest offsets (avg, max, min per queue), and where the archive now stands.
    """
    _check_offsets(starting_offsets, "--starting-offsets")
    spec = ArchiveSpec(
        controllers=controllers,
        topic=topic,
        output=output,
        checkpoint=checkpoint,
        starting_offsets=starting_offsets,
        max_offsets_per_trigger=max_offsets_per_trigger,
        fail_on_data_loss=fail_on_data_loss,
        interval=interval,
        connection=tuple(settings.connection.items()),
    )
    _precheck(settings, controllers, (topic,))
    spark = _session(settings, f"rmq-archive-{topic}")
    try:
        result = run_archive(spark, spec)
    except Exception as exc:
        raise _failed(settings, exc) from None
    click.echo(
        json.dumps(
            {
                "topic": topic,
                "batches": result.batches,
                "rows": result.rows,
                "files": result.files,
                "offsetsBehindLatest": result.behind,
                "endOffset": json.loads(result.end_offset) if result.end_offset else None,
            }
        )
    )
    if result.stopped_by is not None and interval is None:
        # stopped before it archived everything there was: the status a shell gives a command a
        # signal ended (130 for Ctrl-C); with --interval a signal is the way to end the job
        click.get_current_context().exit(128 + result.stopped_by)


@cli.command("traffic")
@controllers_option
@click.option("-t", "--topic", "topics", required=True, multiple=True, help="Topic (repeatable).")
@click.option("--starting-offsets", default="earliest", show_default=True)
@click.option("--ending-offsets", default="latest", show_default=True)
@click.option(
    "--threshold",
    type=click.FloatRange(0),
    default=DEFAULT_THRESHOLD,
    show_default=True,
    help="Re-balance only when the busiest and idlest broker groups differ by more (msg/s).",
)
@click.option(
    "--output",
    metavar="DIR",
    help="Write hourly/ and daily/ Parquet and plan.json under DIR (default: print the tables).",
)
@pass_settings
def traffic_command(
    settings: Settings,
    controllers: str,
    topics: tuple[str, ...],
    starting_offsets: str,
    ending_offsets: str,
    threshold: float,
    output: str | None,
) -> None:
    """Messages per second by topic, queue and broker group, per hour and per day, for the
    messages between --starting-offsets and --ending-offsets, and a queue re-balance plan.
    JSON offsets name every queue, by topic when several -t are given:
    '{"orders": {"broker-a": {"0": 42, "1": -2}}, "clicks": {...}}' (-2 earliest, -1 latest).
    Each hour shows its average and its per-second peaks (the p99 second and the busiest), per
    topic and per queue (--output: hourly/, topics_hourly/ and daily/ Parquet).

    The plan, printed last as one JSON document, places topics by traffic descending onto
    broker groups by traffic ascending, only when the spread between groups passes --threshold.
    """
    several = tuple(dict.fromkeys(topics))
    for value, name in (
        (starting_offsets, "--starting-offsets"),
        (ending_offsets, "--ending-offsets"),
    ):
        if len(several) > 1:
            _check_topic_keys(value, name, several)
        _check_offsets(value, name, multi=len(several) > 1)
    spec = TrafficSpec(
        controllers=controllers,
        topics=tuple(dict.fromkeys(topics)),
        starting_offsets=starting_offsets,
        ending_offsets=ending_offsets,
        threshold=threshold,
        connection=tuple(settings.connection.items()),
    )
    _precheck(settings, controllers, spec.topics)
    spark = _session(settings, "rmq-traffic")
    try:
        report = run_traffic(spark, spec)
        if output:
            base = output.rstrip("/")
            report.hourly.write.mode("overwrite").parquet(f"{base}/hourly")
            report.topics_hourly.write.mode("overwrite").parquet(f"{base}/topics_hourly")
            report.daily.write.mode("overwrite").parquet(f"{base}/daily")
            from pathlib import Path

            Path(base).mkdir(parents=True, exist_ok=True)
            Path(base, "plan.json").write_text(json.dumps(report.plan, indent=2) + "\n")
        else:
            click.echo("messages per second by topic, per hour (UTC): average, p99 second, peak:")
            _print_table(report.topics_hourly)
            click.echo("messages per second by queue, per hour (UTC): average, p99 second, peak:")
            _print_table(report.hourly)
            click.echo("messages per second, per day (UTC):")
            _print_table(report.daily)
    except Exception as exc:
        raise _failed(settings, exc) from None
    click.echo(json.dumps(report.plan, indent=2))


def _print_table(df: Any) -> None:
    rows = df.collect()
    if not rows:
        click.echo("  (no messages)")
        return
    names = df.columns
    cells = [[_cell(r[n]) for n in names] for r in rows]
    widths = [max(len(n), *(len(c[i]) for c in cells)) for i, n in enumerate(names)]
    click.echo("  ".join(n.ljust(w) for n, w in zip(names, widths, strict=True)))
    for c in cells:
        click.echo("  ".join(v.ljust(w) for v, w in zip(c, widths, strict=True)))


def _cell(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.3f}"
    return str(value)


def _check_topic_keys(value: str, name: str, topics: tuple[str, ...]) -> None:
    """With several topics, JSON offsets are keyed by topic: a key that is none of them (JSON
    keyed by broker group, as for one topic) is refused, naming the form expected."""
    try:
        doc = json.loads(value)
    except ValueError:
        return  # not JSON: earliest, latest, or what _check_offsets refuses
    if not isinstance(doc, dict):
        return
    unknown = [key for key in doc if key not in topics]
    if unknown:
        raise click.BadParameter(
            f"{name}: with several -t, JSON offsets are keyed by topic, "
            f'{{"{topics[0]}": {{"broker-a": {{"0": 42}}}}, ...}}: '
            f"{', '.join(map(repr, unknown))} is none of the topics {', '.join(topics)}"
        )


def _check_offsets(value: str, name: str, *, multi: bool = False) -> Any:
    try:
        return parse_spec(value, name, "earliest", multi=multi)
    except OptionError as exc:
        raise click.BadParameter(str(exc)) from None


def main() -> None:
    """Console-script entry point."""
    try:
        cli.main(prog_name="rmq-pipeline")
    except KeyboardInterrupt:
        sys.exit(130)


if __name__ == "__main__":
    main()
