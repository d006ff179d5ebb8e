"""The controller service: every request of docs/protocol.md "Controller requests".

Request handling (the decisions are the state machine's, :mod:`controller.metadata`):

- writes (1012, 1013, 1003, 1002, 1001, 1011, and the membership requests) are served by the
  active controller only: validated against applied state, the event appended to the Raft log,
  the answer given once it is applied (``Decision.settle``). A follower answers
  CONTROLLER_NOT_LEADER (2007) with ``leaderAddress`` when it knows the leader;
- BROKER_HEARTBEAT (904) feeds the active controller's BrokerLiveTable; the connection it came
  on closing makes the broker inactive at once;
- GET_SYNC_STATE_DATA (1006) needs liveness, so the active controller answers it, after a
  read-index barrier; GET_REPLICA_INFO (1004) and the routes (105, 106) are answered by any
  controller: the leader after a read-index barrier (linearizable), a follower from what it has
  applied;
- a scan every ``scan_interval_ms`` (and at once after a broker turned inactive or alive) runs
  the elections ``elections_needed`` asks for; after any master change the active controller
  pushes NOTIFY_BROKER_ROLE_CHANGED (1008) to every broker of the group (best effort: brokers
  also poll with 1004);
- REGISTER_BROKER (103) fills the route table (soft state) on every controller.

Modules, one concern each:

- requests.py: request decoding, ``Refused`` and the answers, request counting;
- gate.py: the leadership and lease gate, read barriers;
- commit.py: a decision's events through the Raft log, its answer once they are applied;
- admission.py: load shedding, the cap on decisions in flight (SYSTEM_BUSY past it);
- brokers.py: broker ids, registration, clean, the group's replica info;
- heartbeats.py: BROKER_HEARTBEAT and liveness;
- elections.py: ELECT_MASTER and the controller-triggered elections;
- sync_state.py: AlterSyncStateSet and GetSyncStateData;
- static_topics.py: static topics, their creation (513), mapping (5120) and re-map (5121);
- rebalance.py: traffic (5123), the re-balance plan (5124), placement, the automatic mode;
- topics_routes.py: route registrations, routes, topics;
- membership.py: controller membership and the controllers' own metadata;
- scheduler.py: the election scan;
- notifier.py: role-change and topic pushes to brokers;
- connections.py, tasks.py: connection numbers, background tasks;
- composition.py: ControllerService, which builds the above and registers the handlers.
"""

from controller.service.composition import ControllerService

__all__ = ["ControllerService"]
