"""The asyncio client SDK: producer, consumer-group consumer, route cache.

::

    async with Producer("127.0.0.1:9878;127.0.0.1:9868") as producer:
        result = await producer.send("orders", b"payload", keys="order-1")

    async with Consumer("127.0.0.1:9878", group="billing", topic="orders") as consumer:
        async for msg in consumer:
            handle(msg.body)
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from client.allocate import allocate_averagely
    from client.bootstrap import Bootstrap, parse_addresses
    from client.consumer import Consumer
    from client.credentials import CredentialsFileError, read_credentials_file
    from client.errors import (
        BrokerError,
        ClientError,
        ClosedError,
        NoRouteError,
        SendError,
        TopicNotFoundError,
        UnreachableError,
    )
    from client.message import Message, ReceivedMessage, SendResult
    from client.producer import Producer
    from client.routes import BrokerRoute, ClusterBroker, MessageQueue, RouteCache, TopicRoute
    from client.simple_consumer import PopMessage, SimpleConsumer
    from client.transaction import (
        Transaction,
        TransactionCheck,
        TransactionProducer,
        TransactionStatus,
    )
    from protocol.filter import Filter, FilterError
    from protocol.request_auth import Credentials

#: each public name and the module it is defined in: imported when first asked for, so that a
#: program that needs one part (rmqctl's ``client.errors``, say) does not import the producer,
#: the consumers and their dependencies too (PEP 562)
_WHERE: dict[str, str] = {
    "Bootstrap": "client.bootstrap",
    "BrokerError": "client.errors",
    "BrokerRoute": "client.routes",
    "ClientError": "client.errors",
    "ClosedError": "client.errors",
    "ClusterBroker": "client.routes",
    "Consumer": "client.consumer",
    "Credentials": "protocol.request_auth",
    "CredentialsFileError": "client.credentials",
    "Filter": "protocol.filter",
    "FilterError": "protocol.filter",
    "Message": "client.message",
    "MessageQueue": "client.routes",
    "NoRouteError": "client.errors",
    "PopMessage": "client.simple_consumer",
    "Producer": "client.producer",
    "ReceivedMessage": "client.message",
    "RouteCache": "client.routes",
    "SendError": "client.errors",
    "SendResult": "client.message",
    "SimpleConsumer": "client.simple_consumer",
    "TopicNotFoundError": "client.errors",
    "TopicRoute": "client.routes",
    "Transaction": "client.transaction",
    "TransactionCheck": "client.transaction",
    "TransactionProducer": "client.transaction",
    "TransactionStatus": "client.transaction",
    "UnreachableError": "client.errors",
    "allocate_averagely": "client.allocate",
    "parse_addresses": "client.bootstrap",
    "read_credentials_file": "client.credentials",
}


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'client' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


__all__ = [
    "Bootstrap",
    "BrokerError",
    "BrokerRoute",
    "ClientError",
    "ClosedError",
    "ClusterBroker",
    "Consumer",
    "Credentials",
    "CredentialsFileError",
    "Filter",
    "FilterError",
    "Message",
    "MessageQueue",
    "NoRouteError",
    "PopMessage",
    "Producer",
    "ReceivedMessage",
    "RouteCache",
    "SendError",
    "SendResult",
    "SimpleConsumer",
    "TopicNotFoundError",
    "TopicRoute",
    "Transaction",
    "TransactionCheck",
    "TransactionProducer",
    "TransactionStatus",
    "UnreachableError",
    "allocate_averagely",
    "parse_addresses",
    "read_credentials_file",
]
