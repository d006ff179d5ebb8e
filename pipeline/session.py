"""The SparkSession of the pipeline jobs: any ``--master``, the formats registered, UTC."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import TYPE_CHECKING

from pipeline.errors import PipelineError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def under_spark_submit() -> bool:
    """True when spark-submit started this interpreter (it then owns master and conf)."""
    return "PYSPARK_GATEWAY_PORT" in os.environ


def build_session(
    app_name: str, master: str | None = None, conf: Mapping[str, str] | None = None
) -> SparkSession:
    """A session on ``master`` (default ``local[*]``, or spark-submit's), with ``rmq`` and
    ``rmqstore`` registered and the session time zone UTC (days and hours are UTC days and
    hours) unless ``conf`` says otherwise.

    Python workers run this interpreter unless PYSPARK_PYTHON says otherwise (checked to exist on
    a local master): on a cluster, point PYSPARK_PYTHON at the executors' interpreter with
    rmq-py and the spark extra installed.
    """
    try:
        import pyarrow  # noqa: F401 - Spark's Python data sources need it: say so now
        from pyspark.sql import SparkSession
    except ImportError as exc:
        missing = (exc.name or "pyspark").partition(".")[0]
        raise PipelineError(
            f"{missing} is not installed: the pipeline needs the spark extra; run "
            "`make pipeline-deps` (or `.venv/bin/pip install -e '.[spark]'`)"
        ) from None

    import pipeline

    local = (master or ("" if under_spark_submit() else "local")).startswith("local")
    os.environ[pipeline.PYTHON_ENV] = pipeline.worker_python(
        "local" if local else "cluster", os.environ.get(pipeline.PYTHON_ENV)
    )
    builder = SparkSession.builder.appName(app_name)
    if master:
        builder = builder.master(master)
    elif not under_spark_submit():
        builder = builder.master("local[*]")
    settings = {
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
