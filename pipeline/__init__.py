"""The data pipeline on Spark (docs/pipeline.md), installed with the ``spark`` extra.

::

    import pipeline

    pipeline.register(spark)
    df = (spark.read.format("rmq")
          .option("controllers", "127.0.0.1:9878;127.0.0.1:9868")
          .option("topic", "orders")
          .load())

Formats: ``rmq`` (topics, batch and streaming, read and write; :mod:`pipeline.source`) and
``rmqstore`` (a broker's store directory read offline; :mod:`pipeline.store`). Jobs:
``rmq-pipeline archive`` and ``rmq-pipeline traffic`` (:mod:`pipeline.cli`).
"""

from __future__ import annotations

import os
import shutil
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["register", "worker_python"]

PYTHON_ENV = "PYSPARK_PYTHON"


def worker_python(master: str, configured: str | None) -> str:
    """The interpreter Spark's Python workers should run: ``configured`` (PYSPARK_PYTHON) when
    set, else this one (``sys.executable``: the interpreter that has rmq-py and pyspark, so a
    script run as ``.venv/bin/python job.py`` works without activating the venv).

    On a local master a configured interpreter that does not exist here is an error saying what
    to set; on a cluster it names a path on the executors, which cannot be checked from here.
    """
    from pipeline.errors import PipelineError

    if not configured:
        return sys.executable
    if master.startswith("local") and shutil.which(configured) is None:
        raise PipelineError(
            f"{PYTHON_ENV}={configured} is not an interpreter on this machine: unset it or set "
            f"{PYTHON_ENV}={sys.executable} (an interpreter with rmq-py and pyspark installed)"
        )
    return configured


def register(spark: SparkSession) -> None:
    """Register the ``rmq`` and ``rmqstore`` formats with ``spark``, and make Spark's Python
    workers (those of the formats and of UDFs defined afterwards) run :func:`worker_python`."""
    from pipeline.source import RmqDataSource
    from pipeline.store import RmqStoreDataSource

    try:
        sc = spark.sparkContext
    except Exception:  # Spark Connect has none: its server picks its own workers
        sc = None
    if sc is not None:
        python = worker_python(sc.master or "", os.environ.get(PYTHON_ENV))
        os.environ[PYTHON_ENV] = python
        # The session exists already and read PYSPARK_PYTHON when it started: the data
        # sources (and UDFs) registered from now on carry this interpreter to the workers.
        sc.pythonExec = python
    spark.dataSource.register(RmqDataSource)
    spark.dataSource.register(RmqStoreDataSource)
