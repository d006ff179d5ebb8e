"""Who this SDK says it is in its heartbeats (rmqctl producerConnection and consumerConnection
list it): its language and its package's version."""

from __future__ import annotations

import os
import socket
import uuid
from importlib.metadata import PackageNotFoundError, version

from protocol.broker_requests.clients import Heartbeat
from protocol.remoting import Header

SDK_LANGUAGE = "PYTHON"

try:
    SDK_VERSION = version("rmq-py")
except PackageNotFoundError:  # run from a source tree that was not installed
    SDK_VERSION = "dev"


def default_client_id() -> str:
    """host@pid@random: unique per consumer instance, readable in member lists."""
    return f"{socket.gethostname()}@{os.getpid()}@{uuid.uuid4().hex[:8]}"


def heartbeat(
    group: str,
    client_id: str,
    *,
    topic: str = "",
    producer: bool = False,
    consume_type: str = "",
) -> Header:
    """The HEART_BEAT header this SDK sends as ``client_id`` of ``group``: a consumer of
    ``topic`` that consumes as ``consume_type`` says (``pop``, ``push``), or with ``producer``
    a transactional producer; with this SDK's language and version."""
    header, _ = Heartbeat(
        group=group,
        client_id=client_id,
        topic=topic,
        producer=producer,
        language=SDK_LANGUAGE,
        version=SDK_VERSION,
        consume_type=consume_type,
    ).encode()
    return header
