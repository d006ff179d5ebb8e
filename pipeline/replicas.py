"""Where a topic's messages are: its route from the controllers, and the replicas of a group."""

from __future__ import annotations

from client.bootstrap import Bootstrap
from client.errors import ClientError, TopicNotFoundError, UnreachableError
from client.routes import TopicRoute, fetch_route
from pipeline.errors import PipelineError, UnknownTopicError

#: how a port with TLS on answers a plaintext connection (remoting.failover's wording), when
#: the client could not tell that the port speaks TLS (it says so otherwise)
_CLOSED_UNANSWERED = "closed the connection without answering"


async def topic_route(bootstrap: Bootstrap, controllers: str, topic: str) -> TopicRoute:
    try:
        return await fetch_route(bootstrap, topic)
    except TopicNotFoundError:
        raise UnknownTopicError(f"topic {topic!r} does not exist (asked {controllers})") from None
    except UnreachableError as exc:
        hint = ""
        if bootstrap.pool.tls is None and _CLOSED_UNANSWERED in str(exc):
            hint = " (a port with TLS on closes plaintext connections: set option tls or caFile)"
        raise PipelineError(f"controllers unreachable: {exc}{hint}") from None
    except ClientError as exc:
        raise PipelineError(f"cannot get the route of topic {topic!r}: {exc}") from None


def replica_addresses(route: TopicRoute, broker: str) -> list[str]:
    """Where a group's messages can be read: its master first, then its slaves."""
    out: list[str] = []
    for b in route.brokers:
        if b.broker_name == broker:
            if b.master_address:
                out.append(b.master_address)
            out.extend(b.slaves)
    return out
