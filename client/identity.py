"""Who this SDK says it is in its heartbeats (rmqctl producerConnection and consumerConnection
list it): its language and its package's version."""

from __future__ import annotations

import os
import socket
import uuid
from importlib.metadata import PackageNotFoundError, version

SDK_LANGUAGE = "PYTHON"

try:
    SDK_VERSION = version("rmq-py")
except PackageNotFoundError:  # run from a source tree that was not installed
    SDK_VERSION = "dev"


def default_client_id() -> str:
    """host@pid@random: unique per consumer instance, readable in member lists."""
    return f"{socket.gethostname()}@{os.getpid()}@{uuid.uuid4().hex[:8]}"
