"""BROKER_HEARTBEAT to the active controller, with this broker's offsets, epoch and traffic.

Runs on the controller link's loop (its own thread, ``broker.controller_link``), not the
broker's, so a busy main loop cannot delay it past the controllers' timeout: what it touches of
the broker is read whole (offsets, epoch, the role) or handed to the main loop (:meth:`on_main`);
the lease (``broker.replicas.lease``) is written with one swap of the role.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable, Coroutine

import structlog

from broker.config import BrokerConfig
from broker.context import BrokerContext
from broker.controller_link import ControllerLink
from broker.ha.service import HAService
from broker.metrics import TopicTraffic
from broker.replicas.lease import FencingLease, monotonic
from broker.traffic_meter import TrafficMeter
from daemon.tasks import turn_after
from protocol.codes import ResponseCode
from protocol.controller_requests.heartbeats import BrokerHeartbeat, HeartbeatAnswer
from protocol.fields import FieldError
from remoting.errors import RemotingError, ResponseError

log = structlog.get_logger(__name__)

LATE_HEARTBEAT_S = 0.2
"""A heartbeat that leaves this much after it was due is logged (``controller heartbeat late``)."""


def sample_traffic(meter: TrafficMeter, traffic: TopicTraffic, now_ms: int) -> None:
    """The traffic report's sample, when one is due: the counters of the topics put to since
    the last sample (not every topic's: issue 34); after a role change, the window's restart
    from every topic's counters."""
    if meter.restart_pending:  # the role changed (broker.replicas.roles)
        traffic.moved_totals()  # taken: the restart's totals include them
        meter.restart(now_ms, traffic.queue_totals())
    elif meter.due(now_ms):
        meter.observe(now_ms, traffic.moved_totals())


class Heartbeats:
    """The heartbeat loop. ``register`` registers again on the main loop (the controllers asked
    for it: a new active controller); ``poll_now`` and ``topics_changed`` are called on the main
    loop; ``on_auth_digest`` (read at each answer) gets the answer's ``authDigest``, and
    ``on_producer_id_limit`` its ``producerIdLimit`` (on the main loop)."""

    def __init__(
        self,
        cfg: BrokerConfig,
        ctx: BrokerContext,
        ha: HAService,
        link: ControllerLink,
        traffic: TrafficMeter,
        lease: FencingLease,
        broker_id: Callable[[], int],
        register: Callable[[], Coroutine[object, object, None]],
        poll_now: Callable[[], None],
        topics_changed: Callable[[], None],
        on_auth_digest: Callable[[], Callable[[str], None] | None],
        damaged: Callable[[], int] = lambda: 0,
        on_producer_id_limit: Callable[[], Callable[[int], None] | None] = lambda: None,
    ) -> None:
        """``damaged``: the damaged CommitLog records this broker holds unrepaired (read on the
        heartbeat thread: a plain int the loop keeps, ``Scrubber.damaged_records``)."""
        self.cfg = cfg
        self.ctx = ctx
        self.ha = ha
        self.link = link
        self.traffic = traffic
        self.lease = lease
        self._broker_id = broker_id
        self._register = register
        self._poll_now = poll_now
        self._topics_changed = topics_changed
        self._on_auth_digest = on_auth_digest
        self._damaged = damaged
        self._on_producer_id_limit = on_producer_id_limit
        self.loop: asyncio.AbstractEventLoop | None = None
        """The broker's main loop (set when the manager starts)."""

    def on_main(self, callback: Callable[[], object]) -> None:
        """Run ``callback`` on the broker's main loop (from the controller link's thread)."""
        loop = self.loop
        if loop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(callback)

    def _beat(self) -> BrokerHeartbeat:
        store = self.ctx.store
        return BrokerHeartbeat(
            cluster=self.cfg.cluster,
            broker_name=self.cfg.broker_name,
            broker_id=self._broker_id(),
            broker_address=self.cfg.listen,
            epoch=self.ha.epoch_file.last_epoch() or 0,
            max_offset=store.max_offset,
            confirm_offset=store.confirm_offset,
            election_priority=self.cfg.election_priority,
            heartbeat_timeout_ms=self.cfg.broker_heartbeat_timeout_ms,
            traffic_report=self.traffic.body(),
            damaged_records=self._damaged(),
        )

    async def run(self) -> None:
        interval = self.cfg.broker_heartbeat_interval_ms / 1000
        timeout = self.cfg.broker_heartbeat_timeout_ms / 1000
        again = False
        late_reported = -60.0
        # At a fixed rate from this broker's own start (``daemon.tasks.next_due``), not
        # ``interval`` after each answer: a stall of the active controller answers every broker
        # that was waiting at once, and brokers that then slept ``interval`` stayed in step for
        # good, so the controller met its brokers' heartbeats in bursts (issue 34).
        loop = asyncio.get_running_loop()
        due = loop.time()
        while True:
            registered = False
            sent = monotonic()
            now_ms = int(sent * 1000)
            sample_traffic(self.traffic, self.ctx.metrics.traffic, now_ms)
            beat = self._beat()
            try:
                resp = await self.link.heartbeats.call(
                    beat.code, *beat.encode(), timeout=min(timeout, 2.0)
                )
                # The controller heard us no earlier than ``sent``: a lease counted from there
                # ends before the controller's own timeout for us does.
                if self.lease.silent_for(sent) > timeout:
                    # Back after a silence (frozen, partitioned): the controllers may have
                    # dropped our route registration with our liveness; register at once.
                    self.on_main(self._topics_changed)
                answer = HeartbeatAnswer.parse(resp.header, resp.body)
                if self.lease.answered(sent, answer, self._broker_id()):
                    self.on_main(self._poll_now)
                on_digest = self._on_auth_digest()
                if on_digest is not None and answer.auth_digest is not None:
                    self.on_main(functools.partial(on_digest, answer.auth_digest))
                on_limit = self._on_producer_id_limit()
                if on_limit is not None and answer.producer_id_limit is not None:
                    self.on_main(functools.partial(on_limit, answer.producer_id_limit))
            except ResponseError as exc:
                if exc.code == ResponseCode.CONTROLLER_BROKER_NEED_TO_BE_REGISTERED:
                    await self._register_from_link()
                    registered = True
            except RemotingError:
                pass
            except FieldError as exc:  # nothing taken from it: the lease is not renewed
                log.warning("malformed heartbeat answer", error=str(exc))
            self.lease.check(monotonic())
            if registered and not again:
                # A new active controller wanted our registration: heartbeat it at once (once),
                # the lease has waited long enough.
                again = True
                continue
            again = False
            due = turn_after(due, interval, loop.time())
            await asyncio.sleep(max(0.0, due - loop.time()))
            late = loop.time() - due
            if late > LATE_HEARTBEAT_S and due - late_reported > 10.0:
                # The whole process stalled (this thread has its own loop): starved of CPU,
                # swapping, a long garbage collection. Logged at most every 10 s.
                late_reported = due
                log.info("controller heartbeat late", late_ms=round(late * 1000))

    async def _register_from_link(self) -> None:
        """Register (on the main loop, which holds the role's writer) and wait for it."""
        loop = self.loop
        if loop is None or loop.is_closed():
            return
        done = asyncio.run_coroutine_threadsafe(self._register(), loop)
        try:
            await asyncio.wrap_future(done)
        except Exception as exc:  # the main loop logs its own failures; keep heart-beating
            log.warning("registering again failed", error=f"{type(exc).__name__}: {exc}")
