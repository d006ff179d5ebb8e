"""How a send that must wait for its flush or its replicas ends (see
:meth:`broker.context.BrokerContext.when_durable`): the callback type, the outcomes, and the
join of the two waits under ``flush = sync`` with all-ack."""

from __future__ import annotations

from collections.abc import Callable

from broker.config import BrokerConfig
from protocol.codes import ResponseCode

__all__ = ["SUCCESS", "BothDone", "DurableDone", "flush_timeout", "slave_timeout"]

DurableDone = Callable[[int, str], None]
"""``done(code, remark)``: how a send waiting for its flush or its replicas ends."""

SUCCESS: tuple[int, str] = (ResponseCode.SUCCESS, "")


def flush_timeout(cfg: BrokerConfig) -> tuple[int, str]:
    return (
        ResponseCode.FLUSH_DISK_TIMEOUT,
        f"flush not done within {cfg.sync_flush_timeout_ms} ms",
    )


def slave_timeout(cfg: BrokerConfig) -> tuple[int, str]:
    return (
        ResponseCode.FLUSH_SLAVE_TIMEOUT,
        f"not every SyncStateSet member acknowledged within {cfg.slave_ack_timeout_ms} ms",
    )


class BothDone:
    """Sync flush and all-ack together: answers once both waits ended."""

    __slots__ = ("_cfg", "_done", "_flush_ok", "_pending", "_replicas_ok")

    def __init__(self, cfg: BrokerConfig, done: DurableDone) -> None:
        self._cfg = cfg
        self._done = done
        self._pending = 2
        self._flush_ok = self._replicas_ok = True

    def flushed(self, ok: bool) -> None:
        self._flush_ok = ok
        self._step()

    def replicated(self, ok: bool) -> None:
        self._replicas_ok = ok
        self._step()

    def _step(self) -> None:
        self._pending -= 1
        if self._pending:
            return
        if not self._flush_ok:
            self._done(*flush_timeout(self._cfg))
        elif not self._replicas_ok:
            self._done(*slave_timeout(self._cfg))
        else:
            self._done(*SUCCESS)
