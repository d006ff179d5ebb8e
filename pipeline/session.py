"""The SparkSession of the pipeline jobs: any ``--master``, the formats registered, UTC."""

from __future__ import annotations

import atexit
import contextlib
import os
import tempfile
from collections.abc import Mapping
from typing import TYPE_CHECKING

from pipeline.errors import PipelineError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def under_spark_submit() -> bool:
    """True when spark-submit started this interpreter (it then owns master and conf)."""
    return "PYSPARK_GATEWAY_PORT" in os.environ


def spark_session_class() -> type[SparkSession]:
    """pyspark's SparkSession, or a :class:`PipelineError` saying how to install the spark
    extra (numpy and pyarrow too: the source's readers and Spark's Python data sources need
    them)."""
    try:
        import numpy  # noqa: F401 - the source's readers need it: say so now
        import pyarrow  # noqa: F401 - Spark's Python data sources need it: say so now
        from pyspark.sql import SparkSession
    except ImportError as exc:
        missing = (exc.name or "pyspark").partition(".")[0]
        raise PipelineError(
            f"{missing} is not installed: the pipeline needs the spark extra; run "
            "`make pipeline-deps` (or `.venv/bin/pip install -e '.[spark]'`)"
        ) from None
    return SparkSession


#: Spark's own log (log4j2) for the jobs: to stderr, and only at ``{level}``
LOG4J2 = """\
rootLogger.level = {level}
# pyspark counts as a shell: without a level of its own for the gateway's logger, Spark sets
# WARN and says so on stderr
logger.gateway.name = org.apache.spark.api.python.PythonGatewayServer
logger.gateway.level = {level}
logger.repl.name = org.apache.spark.repl.Main
logger.repl.level = {level}
rootLogger.appenderRef.stderr.ref = stderr
appender.console.type = Console
appender.console.name = stderr
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{{yy/MM/dd HH:mm:ss}} %p %c{{1}}: %m%n%ex
"""


def quiet_conf(verbose: bool) -> dict[str, str]:
    """Spark settings that keep a job's stdout for its result: no progress bar, and Spark's
    log to stderr only with ``verbose`` (warnings and errors), else off. (The JVM's own notice
    ``WARNING: Using incubator modules`` is printed before any log configuration applies.)"""
    level = "warn" if verbose else "off"
    fd, path = tempfile.mkstemp(prefix="rmq-pipeline-log4j2-", suffix=".properties")
    with os.fdopen(fd, "w") as f:
        f.write(LOG4J2.format(level=level))
    atexit.register(_unlink, path)
    return {
        "spark.ui.showConsoleProgress": "false",
        "spark.driver.extraJavaOptions": f"-Dlog4j2.configurationFile=file:{path}",
    }


def _unlink(path: str) -> None:
    with contextlib.suppress(OSError):
        os.unlink(path)


def build_session(
    app_name: str,
    master: str | None = None,
    conf: Mapping[str, str] | None = None,
    *,
    quiet: bool = False,
    verbose: bool = False,
) -> SparkSession:
    """A session on ``master`` (default ``local[*]``, or spark-submit's), with ``rmq`` and
    ``rmqstore`` registered and the session time zone UTC (days and hours are UTC days and
    hours) unless ``conf`` says otherwise. ``quiet`` (the jobs): :func:`quiet_conf`.

    Python workers run this interpreter unless PYSPARK_PYTHON says otherwise (checked to exist on
    a local master): on a cluster, point PYSPARK_PYTHON at the executors' interpreter with
    rmq-py and the spark extra installed.
    """
    session_class = spark_session_class()

    import pipeline

    local = (master or ("" if under_spark_submit() else "local")).startswith("local")
    os.environ[pipeline.PYTHON_ENV] = pipeline.worker_python(
        "local" if local else "cluster", os.environ.get(pipeline.PYTHON_ENV)
    )
    builder = session_class.builder.appName(app_name)
    if master:
        builder = builder.master(master)
    elif not under_spark_submit():
        builder = builder.master("local[*]")
    settings = {
        **(quiet_conf(verbose) if quiet else {}),
        "spark.sql.session.timeZone": "UTC",
        # the jobs report counts from the query's progress reports: keep them all
        "spark.sql.streaming.numRecentProgressUpdates": "100000",
        **(conf or {}),
    }
    for key, value in settings.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    pipeline.register(spark)
    return spark
