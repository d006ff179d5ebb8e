"""This broker's own services, as the gRPC endpoint calls them in-process.

While this broker is its group's master, the endpoint serves a SendMessage by calling the send
service the remoting processor calls (:class:`broker.send.service.SendService`): the same checks,
metrics, durability wait, timer admission and half messages, without a loopback connection and
without encoding and decoding a remoting request. EndTransaction and RecallMessage likewise call
what END_TRANSACTION's and RECALL_MESSAGE's processors call, ReceiveMessage (its POP, with long
polling), AckMessage and ChangeInvisibleDuration what the POP processor calls
(:mod:`broker.pop.receive`, :mod:`broker.pop.acks`). The consumers' heartbeats still reach the
master as remoting requests, over a loopback connection when that is this broker. A slave's endpoint (and one of a broker with no
role yet) forwards over the network to its master, as before.

Authorization is the endpoint's own (:mod:`broker.grpc.access`) on both paths: what it forwards
signs as the cluster, which the master's remoting guard admits as a super user, and the loopback
connection carried the cluster's client certificate, so the in-process path skips no check that
could refuse it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from broker.durable_wait import Durability
from broker.pop.service import PopService
from broker.send.service import SendService
from broker.transaction.ending import Ended
from protocol.broker_requests.transaction import EndTransaction
from storage.store import PutResult

__all__ = ["Here"]


@dataclass(frozen=True, slots=True)
class Here:
    """What the endpoint calls in-process, and when it may."""

    is_master: Callable[[], bool]
    """Whether this broker is its group's master now (read at each call)."""
    sends: SendService
    end_transaction: Callable[[EndTransaction], Ended]
    """:func:`broker.transaction.ending.end_transaction` of this broker's transactions."""
    recall: Callable[[str, str], PutResult]
    """(topic, message id): :func:`broker.recall_scheduled.recall_scheduled` of this broker."""
    pop: PopService
    """POP consumption: the endpoint's receives, acks and changes of invisible time
    (:mod:`broker.pop.receive`, :mod:`broker.pop.acks`)."""
    durability: Durability
    """How a write becomes as durable as a send must be (the broker's context)."""
