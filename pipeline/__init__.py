"""The data pipeline on Spark (DESIGN.md section 9), installed with the ``spark`` extra.

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

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["register"]


def register(spark: SparkSession) -> None:
    """Register the ``rmq`` and ``rmqstore`` formats with ``spark``."""
    from pipeline.source import RmqDataSource
    from pipeline.store import RmqStoreDataSource

    spark.dataSource.register(RmqDataSource)
    spark.dataSource.register(RmqStoreDataSource)
