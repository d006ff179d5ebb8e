"""Errors raised by the remoting drivers."""

from __future__ import annotations

from protocol.codes import code_name
from protocol.remoting import Frame


class RemotingError(Exception):
    """Base of remoting failures."""


class ConnectError(RemotingError):
    """Could not connect to the peer."""


class ConnectionClosedError(RemotingError):
    """The connection closed while a request was waiting for its response."""


class NotSentError(ConnectionClosedError):
    """The connection was closed before the request was written: the peer never saw it, so
    it did nothing (a caller may send it again elsewhere without doing anything twice)."""


class RequestTimeoutError(RemotingError):
    """No response arrived within the request's timeout."""


class ResponseError(RemotingError):
    """The peer answered with a non-success response code."""

    def __init__(self, code: int, remark: str = "", address: str = "") -> None:
        self.code = code
        self.remark = remark
        self.address = address
        where = f" from {address}" if address else ""
        super().__init__(
            f"{code_name(code)} ({code}){where}: {remark}"
            if remark
            else f"{code_name(code)} ({code}){where}"
        )

    @classmethod
    def of(cls, answer: Frame, address: str = "") -> ResponseError:
        """The error of an answer that is not SUCCESS, from ``address``."""
        return cls(answer.code, answer.remark, address)


class UnreachableError(RemotingError):
    """No address of a list (controllers, or a lone broker) could serve a request."""

    def __init__(self, addresses: list[str], reasons: list[str], *, answered: bool = False) -> None:
        """``answered``: every address answered, none could serve now (busy, or a controller
        with no leader known: an election in progress), rather than some not answering."""
        self.addresses = addresses
        self.reasons = reasons
        self.answered = answered
        unique = list(dict.fromkeys(reasons)) or ["no address given"]
        super().__init__(f"cannot reach any of {';'.join(addresses)}: {', '.join(unique)}")
