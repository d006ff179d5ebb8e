"""Who this SDK says it is in its heartbeats (rmqctl producerConnection and consumerConnection
list it): its language and its package's version."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

SDK_LANGUAGE = "PYTHON"

try:
    SDK_VERSION = version("rmq-py")
except PackageNotFoundError:  # run from a source tree that was not installed
    SDK_VERSION = "dev"
