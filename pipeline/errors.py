"""Errors of the Spark pipeline. Each says what is wrong and what to change; Spark shows the
message inside its own exception (AnalysisException, PythonException, StreamingQueryException)."""

from __future__ import annotations


class PipelineError(Exception):
    """Base of every pipeline failure."""


class OptionError(PipelineError):
    """A data source option is missing or has a bad value."""


class UnknownTopicError(PipelineError):
    """The topic does not exist."""


class DataLossError(PipelineError):
    """Messages a query needs are gone (retention deleted them, or a queue shrank) or a broker
    cannot read them (MESSAGE_CORRUPT).

    Raised only with ``failOnDataLoss`` true (the default); with false the reader skips ahead.
    """


class ReadError(PipelineError):
    """A read task could not get the messages of its range (broker unreachable too long, ...)."""


class WriteError(PipelineError):
    """A write task failed; the message says how many of its rows were already acknowledged
    (those stay in the topic, and Spark's task retry may write them again: at-least-once)."""


class StoreReadError(PipelineError):
    """The offline reader found a CommitLog segment it cannot read (corrupt record, bad file)."""


def describe(exc: BaseException) -> str:
    return str(exc) or type(exc).__name__
