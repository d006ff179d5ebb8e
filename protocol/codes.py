"""Request and response codes of the remoting protocol.

Numbers reuse RocketMQ's where RocketMQ has them; codes of our own start at 5000.
"""

from __future__ import annotations

from enum import IntEnum, unique


@unique
class RequestCode(IntEnum):
    SEND_MESSAGE = 10
    PULL_MESSAGE = 11
    QUERY_MESSAGE = 12
    QUERY_CONSUMER_OFFSET = 14
    UPDATE_CONSUMER_OFFSET = 15
    UPDATE_AND_CREATE_TOPIC = 17
    GET_ALL_TOPIC_CONFIG = 21
    UPDATE_BROKER_CONFIG = 25
    GET_BROKER_CONFIG = 26
    GET_BROKER_RUNTIME_INFO = 28
    SEARCH_OFFSET_BY_TIMESTAMP = 29
    GET_MAX_OFFSET = 30
    GET_MIN_OFFSET = 31
    VIEW_MESSAGE_BY_ID = 33
    HEART_BEAT = 34
    UNREGISTER_CLIENT = 35
    CONSUMER_SEND_MSG_BACK = 36
    END_TRANSACTION = 37
    GET_CONSUMER_LIST_BY_GROUP = 38
    CHECK_TRANSACTION_STATE = 39
    NOTIFY_CONSUMER_IDS_CHANGED = 40
    GET_ALL_CONSUMER_OFFSET = 43
    REGISTER_BROKER = 103
    UNREGISTER_BROKER = 104
    GET_ROUTEINFO_BY_TOPIC = 105
    GET_BROKER_CLUSTER_INFO = 106
    UPDATE_AND_CREATE_SUBSCRIPTIONGROUP = 200
    GET_ALL_SUBSCRIPTIONGROUP_CONFIG = 201
    GET_TOPIC_STATS_INFO = 202
    GET_CONSUMER_CONNECTION_LIST = 203
    DELETE_SUBSCRIPTIONGROUP = 207
    GET_PRODUCER_CONNECTION_LIST = 204
    GET_CONSUME_STATS = 208
    DELETE_TOPIC_IN_BROKER = 215
    DELETE_TOPIC_IN_NAMESRV = 216
    GET_TOPICS_BY_CLUSTER = 224
    # Offsets moved by an operator while the group's members run (docs/operations.md).
    RESET_CONSUMER_CLIENT_OFFSET = 220
    INVOKE_BROKER_TO_RESET_OFFSET = 222
    VIEW_BROKER_STATS_DATA = 315
    SEND_BATCH_MESSAGE = 320
    # RocketMQ's: rmqctl resendMessage; the broker delivers one message to a consumer group.
    CONSUME_MESSAGE_DIRECTLY = 309
    GET_SUBSCRIPTIONGROUP_CONFIG = 352
    RECALL_MESSAGE = 470
    BROKER_HEARTBEAT = 904
    CONTROLLER_ALTER_SYNC_STATE_SET = 1001
    CONTROLLER_ELECT_MASTER = 1002
    CONTROLLER_REGISTER_BROKER = 1003
    CONTROLLER_GET_REPLICA_INFO = 1004
    CONTROLLER_GET_METADATA_INFO = 1005
    CONTROLLER_GET_SYNC_STATE_DATA = 1006
    GET_BROKER_EPOCH_CACHE = 1007
    NOTIFY_BROKER_ROLE_CHANGED = 1008
    CLEAN_BROKER_DATA = 1011
    CONTROLLER_GET_NEXT_BROKER_ID = 1012
    CONTROLLER_APPLY_BROKER_ID = 1013
    # POP consumption (RocketMQ 5's numbers; docs/pop.md).
    POP_MESSAGE = 200050
    ACK_MESSAGE = 200051
    CHANGE_MESSAGE_INVISIBLETIME = 200053
    BATCH_ACK_MESSAGE = 200151
    # Our own: a consumer group's dead-letter queue (issue 11).
    QUERY_DLQ_MESSAGES = 5200
    RESEND_DLQ_MESSAGES = 5201
    # Our own: a queue's messages stored in a time range (rmqctl queryMsgByTime, printMsg).
    QUERY_MESSAGE_BY_TIME = 5160
    # Our own: an idempotent producer's id and epoch from the controllers (issue 29,
    # docs/idempotence.md).
    CONTROLLER_GET_PRODUCER_ID = 5180
    # Our own: a re-map fences a static topic's physical queue on its master (static-topics.md).
    FENCE_STATIC_QUEUE = 5122
    # Our own, served by brokers and controllers with authentication on: a signed request that
    # authenticates the rest of its TLS connection (docs/protocol.md, "Sessions over TLS").
    AUTHENTICATE = 5112
    # Our own: a damaged CommitLog record's bytes fetched from a replica (docs/protocol.md,
    # "Repairing a record"; issue 31).
    REPAIR_RECORD = 5190
    # Our own: reads of a queue pass over a message no replica can read (rmqctl
    # skipCorruptMessage; issue 31).
    SKIP_CORRUPT_MESSAGE = 5191


@unique
class ControllerCode(IntEnum):
    """Request codes only the controllers serve, beyond :class:`RequestCode`.

    GET_CONTROLLER_CONFIG reuses RocketMQ's number (1010); the rest are our own (5000 and up, see
    docs/protocol.md). The Raft peer messages travel as oneway RAFT_MESSAGE frames whose body
    is one :mod:`protocol.raft` message.
    """

    GET_CONTROLLER_CONFIG = 1010
    RAFT_MESSAGE = 5100
    ADD_CONTROLLER = 5101
    REMOVE_CONTROLLER = 5102
    TRANSFER_CONTROLLER_LEADER = 5103
    # Users and access rules (RocketMQ 5.3's numbers; issue 14, docs/protocol.md).
    AUTH_CREATE_USER = 3001
    AUTH_UPDATE_USER = 3002
    AUTH_DELETE_USER = 3003
    AUTH_LIST_USER = 3005
    AUTH_CREATE_ACL = 3006
    AUTH_UPDATE_ACL = 3007
    AUTH_DELETE_ACL = 3008
    AUTH_LIST_ACL = 3010
    # Ours: a broker fetches every user (secrets sealed) and rule, to authenticate its clients.
    AUTH_SYNC_USERS = 5110
    # Static topics (docs/static-topics.md): RocketMQ's number for the create, ours for the read.
    UPDATE_AND_CREATE_STATIC_TOPIC = 513
    GET_STATIC_TOPIC_MAPPING = 5120
    REMAP_STATIC_TOPIC = 5121
    # Ours: traffic the active controller heard with heartbeats, and the re-balance plan.
    GET_BROKER_TRAFFIC = 5123
    GET_REBALANCE_PLAN = 5124


@unique
class ResponseCode(IntEnum):
    SUCCESS = 0
    SYSTEM_ERROR = 1
    SYSTEM_BUSY = 2
    REQUEST_CODE_NOT_SUPPORTED = 3
    FLUSH_DISK_TIMEOUT = 10
    SLAVE_NOT_AVAILABLE = 11
    FLUSH_SLAVE_TIMEOUT = 12
    MESSAGE_ILLEGAL = 13
    SERVICE_NOT_AVAILABLE = 14
    NO_PERMISSION = 16
    TOPIC_NOT_EXIST = 17
    PULL_NOT_FOUND = 19
    PULL_RETRY_IMMEDIATELY = 20
    PULL_OFFSET_MOVED = 21
    QUERY_NOT_FOUND = 22
    SUBSCRIPTION_GROUP_NOT_EXIST = 26
    # Controller errors (RocketMQ 5 numbering).
    CONTROLLER_FENCED_MASTER_EPOCH = 2000
    CONTROLLER_FENCED_SYNC_STATE_SET_EPOCH = 2001
    CONTROLLER_INVALID_MASTER = 2002
    CONTROLLER_INVALID_REPLICAS = 2003
    CONTROLLER_MASTER_NOT_AVAILABLE = 2004
    CONTROLLER_INVALID_REQUEST = 2005
    CONTROLLER_BROKER_NOT_ALIVE = 2006
    CONTROLLER_NOT_LEADER = 2007
    CONTROLLER_BROKER_METADATA_NOT_EXIST = 2008
    CONTROLLER_INVALID_CLEAN_BROKER_METADATA = 2009
    CONTROLLER_BROKER_NEED_TO_BE_REGISTERED = 2010
    CONTROLLER_MASTER_STILL_EXIST = 2011
    CONTROLLER_ELECT_MASTER_FAILED = 2012
    CONTROLLER_ALTER_SYNC_STATE_SET_FAILED = 2013
    CONTROLLER_BROKER_ID_INVALID = 2014
    # Our own.
    DISK_FULL = 5000
    BAD_REQUEST = 5001
    NOT_MASTER = 5002
    MASTER_FENCED = 5003
    TOO_MANY_IN_FLIGHT = 5004
    # The topic has fewer queues here than the client's route says (a stale route, e.g. after a
    # failover to a master that knows fewer queues): refresh the route and retry.
    QUEUE_NOT_EXIST = 5005
    # The SyncStateSet is smaller than min_in_sync_replicas: the master refuses writes.
    IN_SYNC_REPLICAS_NOT_ENOUGH = 5006
    # A pull reached a record the broker cannot read (it fails its CRC, or its bytes were lost):
    # header physicalOffset names its CommitLog offset. Not retriable at this offset.
    MESSAGE_CORRUPT = 5007
    # CONSUMER_SEND_MSG_BACK: the offset names no message of the group's topics on this broker.
    MESSAGE_NOT_FOUND = 5008
    # CONSUMER_SEND_MSG_BACK from a connection no member of the group heart-beats over.
    NOT_GROUP_MEMBER = 5009
    # POP: a receipt handle that is not this broker group's (forged, altered, truncated, another
    # broker's) or belongs to another consumer group. Nothing was acked.
    RECEIPT_HANDLE_INVALID = 5020
    # POP: the delivery a handle names is no longer in flight under it (its invisible time
    # passed, a change of invisible time replaced the handle, or it was delivered again).
    RECEIPT_HANDLE_EXPIRED = 5021
    # END_TRANSACTION names no transaction of this broker group (unknown id or offset, another
    # producer group's, or its half is gone). Nothing was stored.
    TRANSACTION_NOT_FOUND = 5030
    # END_TRANSACTION asks for the opposite of what resolved the transaction already (a
    # rollback of a committed one, a commit of a rolled back or discarded one). Nothing stored.
    TRANSACTION_ALREADY_RESOLVED = 5031
    # Users and access rules on the controllers (issue 14).
    USER_NOT_EXIST = 5040
    USER_ALREADY_EXISTS = 5041
    ACL_NOT_EXIST = 5042
    ACL_ALREADY_EXISTS = 5043
    # INVOKE_BROKER_TO_RESET_OFFSET (issue 28): a reset this broker cannot apply while the
    # group runs (a FIFO group consumed by POP keeps its queues' order state). Nothing changed.
    OFFSET_RESET_REFUSED = 5050
    # CONSUME_MESSAGE_DIRECTLY (rmqctl resendMessage, issue 28): the group has no live member
    # here (or not the client named, or none subscribes to the message's topic); the group
    # does not read its retry topic (a FIFO group, consumeRetry off). Nothing was stored.
    CONSUMER_NOT_ONLINE = 5065
    GROUP_READS_NO_RETRY = 5066
    # deleteTopic/deleteSubGroup (issue 28): a producer connected to a broker sends to the
    # topic (--force deletes it anyway); a system topic or group, which the brokers need.
    TOPIC_IN_USE = 5055
    SYSTEM_RESOURCE = 5056
    # Idempotent producers (issue 29, docs/idempotence.md): a send of an epoch older than one
    # the producer id sent with since (a newer incarnation took the id up); a sequence below
    # the last requests the broker remembers for the producer and queue (it cannot tell
    # whether it was stored). Nothing stored; neither is retriable.
    PRODUCER_FENCED = 5075
    SEQUENCE_TOO_OLD = 5076
    # A send with the three fields to a topic in the broker's idempotence_off_topics (the SDK
    # sends it again without them); with authentication on, a producer id the controllers
    # have not issued (above the highest their heartbeat answers told). Nothing stored;
    # neither is retriable.
    IDEMPOTENCE_OFF = 5095
    PRODUCER_ID_NOT_ISSUED = 5096
    # UPDATE_BROKER_CONFIG (issue 28): nothing changed. The key is not a config key; it is
    # read only at start-up (the remark says why); its value is refused as at start-up; the
    # broker's live config changes file (data_dir/config/liveConfig.json) could not be written.
    CONFIG_KEY_UNKNOWN = 5060
    CONFIG_KEY_NEEDS_RESTART = 5061
    CONFIG_VALUE_INVALID = 5062
    CONFIG_NOT_PERSISTED = 5063
    # REPAIR_RECORD (issue 31): this replica's own copy of the range is not whole intact
    # records (it fails its CRC, or the range is not on this replica).
    RECORD_NOT_INTACT = 5080
    # REPAIR_RECORD: this replica's epoch at the offset is not the asker's, or ends before the
    # range does (its bytes there may differ).
    EPOCH_NOT_COVERING = 5081
    # SKIP_CORRUPT_MESSAGE: this replica reads the message intact (nothing skipped).
    RECORD_READABLE = 5082
    # A SQL92 subscription (issue 32, docs/filters.md) to a broker with enable_property_filter
    # off (one that does not parse is BAD_REQUEST, its position and reason in the remark).
    SQL_FILTER_DISABLED = 5085


def code_name(code: int) -> str:
    """A readable name for a response code, the number itself when unknown."""
    try:
        return ResponseCode(code).name
    except ValueError:
        return str(code)
