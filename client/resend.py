"""One message delivered to a consumer group again (what ``rmqctl resendMessage`` uses): found by
either id, then CONSUME_MESSAGE_DIRECTLY on the master of the broker group that stores it,
which appends a copy to the group's retry topic (docs/operations.md, "Finding a message").

::

    async with Resender("127.0.0.1:9878") as resender:
        found, copy = await resender.resend("0156F7E7...", "billing")
        consumed = await resender.consumed(found.broker_name, "billing", copy)
"""

from __future__ import annotations

from client.errors import BrokerError, ClientError
from client.lookup import FoundMessage, Lookup
from client.routes import fetch_cluster_info
from protocol.broker_requests.consume_directly import ConsumedDirectly, ConsumeMessageDirectly
from protocol.codes import ResponseCode
from protocol.fields import FieldError
from protocol.pull import AnswerError, ConsumerOffsetQuery, decode_offset
from remoting.errors import RemotingError, ResponseError

__all__ = ["Resender"]


class Resender(Lookup):
    """CONSUME_MESSAGE_DIRECTLY through the bootstrap addresses."""

    async def master_of(self, broker_name: str) -> str:
        """The master address of ``broker_name``; :class:`ClientError` while it has none."""
        for brokers in (await fetch_cluster_info(self.bootstrap)).values():
            for b in brokers:
                if b.broker_name == broker_name and b.is_master:
                    return b.address
        raise ClientError(
            f"broker group {broker_name} has no master now: nothing resent (try again once it "
            "has one)"
        )

    async def resend(
        self,
        msg_id: str,
        group: str,
        *,
        topic: str | None = None,
        client_id: str = "",
        force: bool = False,
    ) -> tuple[FoundMessage, ConsumedDirectly]:
        """Deliver the message ``msg_id`` (either id form, see :meth:`Lookup.by_id`) to
        ``group`` again; the message found and where its copy was stored. Raises
        :class:`ClientError` (a :class:`BrokerError` with the broker's code for a refusal)."""
        found = await self.by_id(msg_id, topic)
        master = await self.master_of(found.broker_name)
        ask = ConsumeMessageDirectly(
            group=group,
            msg_id=found.msg_id,
            client_id=client_id,
            topic=topic or "",
            force=force,
        )
        try:
            frame = await self._call(master, ask.code, ask.encode()[0])
        except ResponseError as exc:
            raise BrokerError(exc.code, exc.remark, master) from None
        except RemotingError as exc:
            raise ClientError(f"{master}: {exc}") from None
        try:
            return found, ConsumedDirectly.parse(frame.header, frame.body)
        except FieldError as exc:
            raise ClientError(f"malformed answer from {master}: {exc}") from None

    async def consumed(self, broker_name: str, group: str, copy: ConsumedDirectly) -> bool:
        """Whether ``group`` moved its offset of the retry queue past the copy (a member
        consumed it, or sent it back; a POP group: handed it out), at the group's master."""
        master = await self.master_of(broker_name)
        ask = ConsumerOffsetQuery(group=group, topic=copy.topic, queue_id=0)
        try:
            frame = await self._call(master, ask.code, ask.encode()[0])
        except ResponseError as exc:
            if exc.code == ResponseCode.QUERY_NOT_FOUND:
                return False  # nothing committed on the retry queue yet
            raise BrokerError(exc.code, exc.remark, master) from None
        except RemotingError as exc:
            raise ClientError(f"{master}: {exc}") from None
        try:
            return decode_offset(frame) > copy.queue_offset
        except (AnswerError, FieldError) as exc:
            raise ClientError(f"malformed offset from {master}: {exc}") from None
