"""StaticTopicTable: the static topics of the metadata state machine, decisions and apply.

Each static topic maps its logical queues to mapping items (:mod:`controller.metadata.static_topic`).
Decisions are validated against the applied state and the broker groups the caller names; apply
re-checks the same rules, so a decision that raced another change is rejected identically on
every controller and changes nothing.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass

from controller.metadata.events import (
    AddQueueItem,
    CreateStaticTopic,
    DropQueueItem,
    Event,
    RemapQueueItem,
    SealQueueItem,
    StaticTopicEvent,
    UpdateTopic,
    check_physical_queue,
    check_queues,
    check_topic,
)
from controller.metadata.results import APPLIED, Applied, Decision, rejected
from controller.metadata.rules import fail
from controller.metadata.static_topic import (
    LogicalQueue,
    MappingError,
    MappingItem,
    appended,
    check_new_item,
    check_target,
    first_item,
    newest,
    seal_end,
    sealed,
    without_oldest,
)
from protocol.codes import ResponseCode as RC

StaticTopicMapping = tuple[LogicalQueue, ...]
"""A static topic's logical queues, by queue id."""


@dataclass(frozen=True, slots=True, kw_only=True)
class RemapPlan:
    """A re-map the controllers may carry out: what to fence where, decided on applied state."""

    topic: str
    queue_id: int
    generation: int
    """The newest item's generation (the compare-and-set of the commit)."""
    source: str
    source_queue: int
    source_epoch: int
    """The source group's master epoch: the fence goes to that master, the commit checks it."""
    target: str


def placements(queues: int, groups: Sequence[str]) -> tuple[tuple[str, int], ...]:
    """Logical queue ``i`` on ``groups[i % len(groups)]``, physical queue ``i // len(groups)``:
    the queues spread evenly, each group's physical queues numbered from 0."""
    return tuple((groups[i % len(groups)], i // len(groups)) for i in range(queues))


def physical_counts(placed: Sequence[tuple[str, int]]) -> dict[str, int]:
    """How many physical queues each group needs for ``placed``."""
    counts: dict[str, int] = {}
    for name, queue in placed:
        counts[name] = max(counts.get(name, 0), queue + 1)
    return counts


class StaticTopicTable:
    __slots__ = ("_topics",)

    def __init__(self, topics: Mapping[str, StaticTopicMapping] | None = None) -> None:
        self._topics: dict[str, StaticTopicMapping] = dict(topics or {})

    # Reads -------------------------------------------------------------------------------------

    def get(self, topic: str) -> StaticTopicMapping | None:
        return self._topics.get(topic)

    def __contains__(self, topic: object) -> bool:
        return topic in self._topics

    def __iter__(self) -> Iterator[str]:
        return iter(sorted(self._topics))

    def remove(self, topic: str) -> None:
        """Forget a static topic and all its mapping items (DeleteTopic); no-op when absent."""
        self._topics.pop(topic, None)

    def records(self) -> dict[str, StaticTopicMapping]:
        return {t: self._topics[t] for t in sorted(self._topics)}

    # Decisions ---------------------------------------------------------------------------------

    def create(
        self, topic: str, queues: int, groups: Sequence[str], ordinary: Collection[str]
    ) -> Decision[StaticTopicMapping]:
        """Create ``topic`` with ``queues`` logical queues spread over ``groups`` (ascending
        names, the groups that may take it). ``ordinary``: the groups that have an ordinary
        topic of that name. Events: CreateStaticTopic, then an UpdateTopic per group so the
        physical queues exist on its brokers."""
        try:
            check_topic("topic", topic)
            check_queues("queues", queues)
        except (TypeError, ValueError) as exc:
            return rejected(RC.CONTROLLER_INVALID_REQUEST, str(exc))
        current = self._topics.get(topic)
        if current is not None:
            if len(current) == queues:
                return Decision(response=current)  # a retry of the same request
            return rejected(
                RC.BAD_REQUEST,
                f"static topic {topic} already exists with {len(current)} queues",
            )
        if ordinary:
            return rejected(
                RC.BAD_REQUEST,
                f"topic {topic} exists as an ordinary topic on {', '.join(sorted(ordinary))}",
            )
        if not groups:
            return rejected(
                RC.CONTROLLER_BROKER_METADATA_NOT_EXIST, "no broker group can take the topic"
            )
        placed = placements(queues, groups)
        events: tuple[Event, ...] = (
            CreateStaticTopic(topic=topic, placements=placed),
            *(
                UpdateTopic(broker_name=name, topic=topic, queues=count)
                for name, count in sorted(physical_counts(placed).items())
            ),
        )
        mapping = tuple(first_item(name, queue) for name, queue in placed)
        return Decision(events=events, response=mapping)

    def _queue(self, topic: str, queue_id: int) -> LogicalQueue | Applied:
        mapping = self._topics.get(topic)
        if mapping is None:
            return fail(RC.TOPIC_NOT_EXIST, f"static topic {topic} does not exist")
        if type(queue_id) is not int or not 0 <= queue_id < len(mapping):
            return fail(
                RC.CONTROLLER_INVALID_REQUEST,
                f"static topic {topic} has queues 0 to {len(mapping) - 1}, not {queue_id}",
            )
        return mapping[queue_id]

    def seal(
        self,
        topic: str,
        queue_id: int,
        physical_max: int,
        target: str,
        groups: Collection[str],
    ) -> Decision[int]:
        """Step 1 of re-mapping ``topic``'s queue ``queue_id`` to ``target``: seal its newest item
        at the physical max offset the group reports. The response is the sealed logical end."""
        items = self._queue(topic, queue_id)
        if isinstance(items, Applied):
            return rejected(items.code, items.remark)
        try:
            check_target(items, target, groups)
            generation = newest(items).generation
            end = seal_end(items, generation, physical_max)
        except (MappingError, TypeError, ValueError) as exc:
            return rejected(RC.BAD_REQUEST, f"{topic} queue {queue_id}: {exc}")
        event = SealQueueItem(
            topic=topic, queue_id=queue_id, generation=generation, logical_end=end
        )
        return Decision(events=(event,), response=end)

    def add_item(
        self, topic: str, queue_id: int, target: str, target_queues: int
    ) -> Decision[MappingItem]:
        """Step 2: the sealed queue continues on ``target`` in a new physical queue (index
        ``target_queues``, the physical queues the group has of the topic), from physical 0.
        Events: the UpdateTopic that grows the topic on ``target``, then AddQueueItem."""
        items = self._queue(topic, queue_id)
        if isinstance(items, Applied):
            return rejected(items.code, items.remark)
        last = newest(items)
        if last.logical_end is None:
            return rejected(RC.BAD_REQUEST, f"{topic} queue {queue_id}: no move in progress")
        try:
            check_physical_queue("physical_queue", target_queues)
            item = MappingItem(
                broker_name=target,
                physical_queue=target_queues,
                logical_start=last.logical_end,
                physical_start=0,
                generation=last.generation + 1,
            )
            check_new_item(items, item)
        except (MappingError, TypeError, ValueError) as exc:
            return rejected(RC.BAD_REQUEST, f"{topic} queue {queue_id}: {exc}")
        events = (
            UpdateTopic(broker_name=target, topic=topic, queues=target_queues + 1),
            AddQueueItem(
                topic=topic,
                queue_id=queue_id,
                generation=item.generation,
                broker_name=target,
                physical_queue=item.physical_queue,
                physical_start=item.physical_start,
            ),
        )
        return Decision(events=events, response=item)

    def plan_remap(
        self, topic: str, queue_id: int, target: str, masters: Mapping[str, int | None]
    ) -> Decision[RemapPlan]:
        """Whether ``topic``'s queue ``queue_id`` may move to ``target`` now. ``masters``: every
        known group's master epoch (None: the group has no master). No events: the caller
        fences the source queue, then commits :meth:`remap`."""
        if not isinstance(target, str) or not target:
            return rejected(RC.CONTROLLER_INVALID_REQUEST, "a target broker group is required")
        items = self._queue(topic, queue_id)
        if isinstance(items, Applied):
            return rejected(items.code, items.remark)
        last = newest(items)
        where = f"{topic} queue {queue_id}"
        if last.sealed:
            return rejected(RC.BAD_REQUEST, f"a move of {where} is in progress")
        if target not in masters:
            return rejected(
                RC.CONTROLLER_BROKER_METADATA_NOT_EXIST, f"broker group {target} does not exist"
            )
        if target == last.broker_name:
            return rejected(RC.BAD_REQUEST, f"{where} is already on broker group {target}")
        if masters[target] is None:
            return rejected(
                RC.CONTROLLER_MASTER_NOT_AVAILABLE, f"broker group {target} has no master"
            )
        epoch = masters.get(last.broker_name)
        if epoch is None:
            return rejected(
                RC.CONTROLLER_MASTER_NOT_AVAILABLE,
                f"broker group {last.broker_name} (holding {where}) has no master",
            )
        plan = RemapPlan(
            topic=topic,
            queue_id=queue_id,
            generation=last.generation,
            source=last.broker_name,
            source_queue=last.physical_queue,
            source_epoch=epoch,
            target=target,
        )
        return Decision(response=plan)

    def remap(
        self, plan: RemapPlan, physical_max: int, target_queues: int
    ) -> Decision[MappingItem]:
        """Commit ``plan`` once the source master is fenced at ``physical_max`` (the physical
        queue's max offset there): the UpdateTopic that adds physical queue ``target_queues``
        on the target, then one RemapQueueItem that seals the old item and appends the new one
        (both or neither). The response is the new item."""
        items = self._queue(plan.topic, plan.queue_id)
        if isinstance(items, Applied):
            return rejected(items.code, items.remark)
        where = f"{plan.topic} queue {plan.queue_id}"
        try:
            end = seal_end(items, plan.generation, physical_max)
            check_physical_queue("physical_queue", target_queues)
            item = MappingItem(
                broker_name=plan.target,
                physical_queue=target_queues,
                logical_start=end,
                physical_start=0,
                generation=plan.generation + 1,
            )
            check_new_item(sealed(items, end), item)
        except (MappingError, TypeError, ValueError) as exc:
            return rejected(RC.BAD_REQUEST, f"{where}: {exc}")
        events: tuple[Event, ...] = (
            UpdateTopic(broker_name=plan.target, topic=plan.topic, queues=target_queues + 1),
            RemapQueueItem(
                topic=plan.topic,
                queue_id=plan.queue_id,
                generation=plan.generation,
                logical_end=end,
                source_master_epoch=plan.source_epoch,
                broker_name=plan.target,
                physical_queue=target_queues,
            ),
        )
        return Decision(events=events, response=item)

    def sealed_on(self, broker_name: str) -> list[tuple[str, int]]:
        """The (topic, physical queue) pairs of ``broker_name`` whose items are sealed: sends
        there are refused by the group's brokers."""
        return sorted(
            {
                (topic, item.physical_queue)
                for topic, mapping in self._topics.items()
                for items in mapping
                for item in items
                if item.broker_name == broker_name and item.sealed
            }
        )

    def droppable(self) -> list[tuple[str, int, MappingItem]]:
        """Each logical queue's oldest item when it is not the newest (so it is sealed): the
        items retention may have deleted, as (topic, queue id, item)."""
        return [
            (topic, queue_id, items[0])
            for topic, mapping in sorted(self._topics.items())
            for queue_id, items in enumerate(mapping)
            if len(items) > 1
        ]

    def drop_item(self, topic: str, queue_id: int, generation: int) -> Decision[MappingItem]:
        """Drop ``topic``'s queue ``queue_id``'s oldest item, of ``generation``, once its group's
        min offset of its physical queue reached the item's physical end (the caller asked).
        The response is the dropped item."""
        items = self._queue(topic, queue_id)
        if isinstance(items, Applied):
            return rejected(items.code, items.remark)
        try:
            without_oldest(items, generation)
        except MappingError as exc:
            return rejected(RC.BAD_REQUEST, f"{topic} queue {queue_id}: {exc}")
        event = DropQueueItem(topic=topic, queue_id=queue_id, generation=generation)
        return Decision(events=(event,), response=items[0])

    def mapped_on(self, broker_name: str) -> list[tuple[str, int]]:
        """The (topic, logical queue) pairs with an item on ``broker_name``."""
        return sorted(
            {
                (topic, queue_id)
                for topic, mapping in self._topics.items()
                for queue_id, items in enumerate(mapping)
                if any(item.broker_name == broker_name for item in items)
            }
        )

    # Apply -------------------------------------------------------------------------------------

    def apply(self, event: StaticTopicEvent, groups: Collection[str]) -> Applied:
        """Apply one committed static topic event; ``groups``: the known broker groups."""
        match event:
            case CreateStaticTopic():
                if event.topic in self._topics:
                    return fail(RC.BAD_REQUEST, f"static topic {event.topic} already exists")
                unknown = sorted({name for name, _ in event.placements} - set(groups))
                if unknown:
                    return fail(
                        RC.CONTROLLER_BROKER_METADATA_NOT_EXIST,
                        f"broker groups {unknown} do not exist",
                    )
                self._topics[event.topic] = tuple(
                    first_item(name, queue) for name, queue in event.placements
                )
                return APPLIED
            case SealQueueItem():
                items = self._queue(event.topic, event.queue_id)
                if isinstance(items, Applied):
                    return items
                try:
                    end = _seal_at(items, event.generation, event.logical_end)
                except (MappingError, ValueError) as exc:
                    return fail(RC.BAD_REQUEST, f"{event.topic} queue {event.queue_id}: {exc}")
                self._replace(event.topic, event.queue_id, sealed(items, end))
                return APPLIED
            case AddQueueItem():
                items = self._queue(event.topic, event.queue_id)
                if isinstance(items, Applied):
                    return items
                if event.broker_name not in groups:
                    return _no_group(event.broker_name)
                last = newest(items)
                try:
                    item = MappingItem(
                        broker_name=event.broker_name,
                        physical_queue=event.physical_queue,
                        logical_start=last.logical_end
                        if last.logical_end is not None
                        else last.logical_start,
                        physical_start=event.physical_start,
                        generation=event.generation,
                    )
                    check_new_item(items, item)
                except (MappingError, ValueError) as exc:
                    return fail(RC.BAD_REQUEST, f"{event.topic} queue {event.queue_id}: {exc}")
                self._replace(event.topic, event.queue_id, appended(items, item))
                return APPLIED
            case RemapQueueItem():
                return self._apply_remap(event, groups)
            case DropQueueItem():
                items = self._queue(event.topic, event.queue_id)
                if isinstance(items, Applied):
                    return items
                try:
                    kept = without_oldest(items, event.generation)
                except MappingError as exc:
                    return fail(RC.BAD_REQUEST, f"{event.topic} queue {event.queue_id}: {exc}")
                self._replace(event.topic, event.queue_id, kept)
                return APPLIED
            case _:
                raise TypeError(f"not a static topic event: {type(event).__name__}")

    def source_of(self, event: RemapQueueItem) -> str | None:
        """The group a re-map leaves: its queue's newest item's (None: no such queue)."""
        items = self._queue(event.topic, event.queue_id)
        return None if isinstance(items, Applied) else newest(items).broker_name

    def _apply_remap(self, event: RemapQueueItem, groups: Collection[str]) -> Applied:
        """Seal and append in one step (the source master epoch is checked by the caller)."""
        items = self._queue(event.topic, event.queue_id)
        if isinstance(items, Applied):
            return items
        if event.broker_name not in groups:
            return _no_group(event.broker_name)
        try:
            end = _seal_at(items, event.generation, event.logical_end)
            closed = sealed(items, end)
            item = MappingItem(
                broker_name=event.broker_name,
                physical_queue=event.physical_queue,
                logical_start=end,
                physical_start=0,
                generation=event.generation + 1,
            )
            check_new_item(closed, item)
        except (MappingError, ValueError) as exc:
            return fail(RC.BAD_REQUEST, f"{event.topic} queue {event.queue_id}: {exc}")
        self._replace(event.topic, event.queue_id, appended(closed, item))
        return APPLIED

    def _replace(self, topic: str, queue_id: int, items: LogicalQueue) -> None:
        mapping = self._topics[topic]
        self._topics[topic] = (*mapping[:queue_id], items, *mapping[queue_id + 1 :])


def _seal_at(items: LogicalQueue, generation: int, logical_end: int) -> int:
    """The newest item's seal at ``logical_end``, checked by ``seal_end`` (raises as it does)."""
    last = newest(items)
    return seal_end(items, generation, last.physical_start + (logical_end - last.logical_start))


def _no_group(broker_name: str) -> Applied:
    return fail(
        RC.CONTROLLER_BROKER_METADATA_NOT_EXIST, f"broker group {broker_name} does not exist"
    )
