"""The asyncio client SDK: producer, consumer-group consumer, route cache.

::

    async with Producer("127.0.0.1:9878;127.0.0.1:9868") as producer:
        result = await producer.send("orders", b"payload", keys="order-1")

    async with Consumer("127.0.0.1:9878", group="billing", topic="orders") as consumer:
        async for msg in consumer:
            handle(msg.body)
"""

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
