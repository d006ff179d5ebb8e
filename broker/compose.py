"""The broker's composition root: the context, then the services built on it.

Each service is given a narrow Protocol of what it uses of the broker (its package's ``host``
module: :class:`~broker.timer.host.TimerHost`, :class:`~broker.pop.host.PopHost`,
:class:`~broker.transaction.host.TransactionHost`), never the context's type, so the services
do not import the context and the context does not build them: no import circle, and
``broker.pop``, ``broker.timer`` and ``broker.transaction`` stay apart (the ``independence``
contract of pyproject.toml). The context keeps a reference to each for the request processors.
"""

from __future__ import annotations

from broker.config import BrokerConfig
from broker.context import BrokerContext
from broker.metrics import BrokerMetrics
from broker.pop.service import PopService
from broker.timer.service import TimerService
from broker.transaction.service import TransactionService

__all__ = ["compose"]


def compose(cfg: BrokerConfig, metrics: BrokerMetrics) -> BrokerContext:
    """The broker's context with its services built and attached."""
    ctx = BrokerContext(cfg, metrics)
    ctx.timer = TimerService(ctx)
    ctx.pop = PopService(ctx)
    ctx.transactions = TransactionService(ctx)
    return ctx
