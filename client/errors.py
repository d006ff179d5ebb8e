"""Errors the SDK raises. Every one is a :class:`ClientError`, so a caller can catch them all."""

from __future__ import annotations

from collections.abc import Iterable

from client.logs import SdkLogger
from protocol.codes import ResponseCode, code_name
from protocol.remoting import Frame


class ClientError(Exception):
    """Base of every SDK failure."""


class UnreachableError(ClientError):
    """No bootstrap address (controller or broker) answered."""

    def __init__(self, addresses: list[str], reasons: list[str]) -> None:
        self.addresses = addresses
        self.reasons = reasons
        unique = list(dict.fromkeys(reasons)) or ["no address given"]
        super().__init__(f"cannot reach any of {';'.join(addresses)}: {', '.join(unique)}")


class BrokerError(ClientError):
    """A broker or controller answered with a non-success code."""

    def __init__(self, code: int, remark: str = "", address: str = "") -> None:
        self.code = code
        self.remark = remark
        self.address = address
        where = f" from {address}" if address else ""
        text = f"{code_name(code)} ({code}){where}"
        super().__init__(f"{text}: {remark}" if remark else text)

    @classmethod
    def of(cls, answer: Frame, address: str = "") -> BrokerError:
        """The error of an answer that is not SUCCESS, from ``address``."""
        return BrokerError(answer.code, answer.remark, address)


class TopicNotFoundError(BrokerError):
    """The topic does not exist (TOPIC_NOT_EXIST); never retried."""

    def __init__(self, topic: str, address: str = "") -> None:
        self.topic = topic
        super().__init__(ResponseCode.TOPIC_NOT_EXIST, f"topic {topic!r} does not exist", address)


class MalformedIdError(ClientError):
    """A message id of neither form (:mod:`client.lookup`); the message says what is wrong
    with it. Raised before anything is asked."""


class MessageNotFoundError(ClientError):
    """No broker holds the message. ``unanswered``: what the brokers and broker groups that
    could not be asked said; empty when every one that could hold it answered (the message is
    in none of them)."""

    def __init__(self, message: str, unanswered: Iterable[str] = ()) -> None:
        super().__init__(message)
        self.unanswered = tuple(unanswered)


class GroupNotFoundError(ClientError):
    """The consumer group does not exist: no broker group knows it (``Admin.require_group``),
    or every one asked to reset its offsets answered SUBSCRIPTION_GROUP_NOT_EXIST, nothing
    changed."""


class NoRouteError(ClientError):
    """The topic's route names no broker that can take the request (e.g. no master right now)."""


class SendError(ClientError):
    """A send failed after its retries; ``__cause__`` holds the last failure.
    ``maybe_stored``: an idempotent producer's attempt may have been stored (its retries stayed
    on that queue); a request sent again as another one could then be stored twice."""

    maybe_stored: bool = False


class ClosedError(ClientError):
    """The producer or consumer is closed (or was never started)."""


class CorruptMessageError(BrokerError):
    """A broker cannot read the message at a queue offset (MESSAGE_CORRUPT): it fails its CRC or
    its bytes were lost. The consumer raises it once per message and asks the broker again every
    ``CORRUPT_RETRY_MAX`` (30) s at most: an operator must act (``rmqctl skipCorruptMessage``),
    after which pulling that queue goes on by itself."""

    def __init__(
        self,
        *,
        broker_name: str,
        topic: str,
        queue_id: int,
        queue_offset: int,
        physical_offset: int,
        reason: str,
        address: str = "",
    ) -> None:
        self.broker_name = broker_name
        self.topic = topic
        self.queue_id = queue_id
        self.queue_offset = queue_offset
        self.physical_offset = physical_offset
        self.reason = reason
        super().__init__(ResponseCode.MESSAGE_CORRUPT, reason, address)
        where = f" at {address}" if address else ""
        self.args = (f"broker {broker_name}{where}: {reason}",)


def report_nack_outcomes(
    log: SdkLogger, msg_ids: Iterable[str], outcomes: Iterable[object]
) -> None:
    """After a batch of nacks run together (``asyncio.gather(..., return_exceptions=True)``):
    log each nack that failed with a :class:`ClientError` (its message comes back later
    anyway) and raise any other exception."""
    for msg_id, outcome in zip(msg_ids, outcomes, strict=True):
        if isinstance(outcome, ClientError):
            log.error("nack failed", msg_id=msg_id, error=str(outcome))
        elif isinstance(outcome, BaseException):
            raise outcome
