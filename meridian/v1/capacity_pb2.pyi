import datetime

from google.protobuf import timestamp_pb2 as _timestamp_pb2
from meridian.v1 import common_pb2 as _common_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ProvisioningState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    PROVISIONING_STATE_UNSPECIFIED: _ClassVar[ProvisioningState]
    PROVISIONING_STATE_STEADY: _ClassVar[ProvisioningState]
    PROVISIONING_STATE_SCALING_UP: _ClassVar[ProvisioningState]
    PROVISIONING_STATE_SCALING_DOWN: _ClassVar[ProvisioningState]
    PROVISIONING_STATE_STOCKED_OUT: _ClassVar[ProvisioningState]
    PROVISIONING_STATE_ERROR: _ClassVar[ProvisioningState]

class DirectiveOutcome(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    DIRECTIVE_OUTCOME_UNSPECIFIED: _ClassVar[DirectiveOutcome]
    DIRECTIVE_OUTCOME_ACCEPTED: _ClassVar[DirectiveOutcome]
    DIRECTIVE_OUTCOME_SUCCEEDED: _ClassVar[DirectiveOutcome]
    DIRECTIVE_OUTCOME_REFUSED: _ClassVar[DirectiveOutcome]
    DIRECTIVE_OUTCOME_FAILED: _ClassVar[DirectiveOutcome]
    DIRECTIVE_OUTCOME_DUPLICATE: _ClassVar[DirectiveOutcome]

class EventKind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    EVENT_KIND_UNSPECIFIED: _ClassVar[EventKind]
    EVENT_KIND_SPOT_INTERRUPTION: _ClassVar[EventKind]
    EVENT_KIND_STOCK_OUT: _ClassVar[EventKind]
    EVENT_KIND_REPLICA_CRASH: _ClassVar[EventKind]
    EVENT_KIND_QUOTA_EXCEEDED: _ClassVar[EventKind]
    EVENT_KIND_AUTH_FAILURE: _ClassVar[EventKind]
    EVENT_KIND_THROTTLED: _ClassVar[EventKind]
PROVISIONING_STATE_UNSPECIFIED: ProvisioningState
PROVISIONING_STATE_STEADY: ProvisioningState
PROVISIONING_STATE_SCALING_UP: ProvisioningState
PROVISIONING_STATE_SCALING_DOWN: ProvisioningState
PROVISIONING_STATE_STOCKED_OUT: ProvisioningState
PROVISIONING_STATE_ERROR: ProvisioningState
DIRECTIVE_OUTCOME_UNSPECIFIED: DirectiveOutcome
DIRECTIVE_OUTCOME_ACCEPTED: DirectiveOutcome
DIRECTIVE_OUTCOME_SUCCEEDED: DirectiveOutcome
DIRECTIVE_OUTCOME_REFUSED: DirectiveOutcome
DIRECTIVE_OUTCOME_FAILED: DirectiveOutcome
DIRECTIVE_OUTCOME_DUPLICATE: DirectiveOutcome
EVENT_KIND_UNSPECIFIED: EventKind
EVENT_KIND_SPOT_INTERRUPTION: EventKind
EVENT_KIND_STOCK_OUT: EventKind
EVENT_KIND_REPLICA_CRASH: EventKind
EVENT_KIND_QUOTA_EXCEEDED: EventKind
EVENT_KIND_AUTH_FAILURE: EventKind
EVENT_KIND_THROTTLED: EventKind

class AgentMessage(_message.Message):
    __slots__ = ("sequence", "sent_at", "hello", "inventory", "replicas", "ack", "event", "heartbeat")
    SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    SENT_AT_FIELD_NUMBER: _ClassVar[int]
    HELLO_FIELD_NUMBER: _ClassVar[int]
    INVENTORY_FIELD_NUMBER: _ClassVar[int]
    REPLICAS_FIELD_NUMBER: _ClassVar[int]
    ACK_FIELD_NUMBER: _ClassVar[int]
    EVENT_FIELD_NUMBER: _ClassVar[int]
    HEARTBEAT_FIELD_NUMBER: _ClassVar[int]
    sequence: int
    sent_at: _timestamp_pb2.Timestamp
    hello: Hello
    inventory: Inventory
    replicas: ReplicaReports
    ack: DirectiveAck
    event: Event
    heartbeat: Heartbeat
    def __init__(self, sequence: _Optional[int] = ..., sent_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., hello: _Optional[_Union[Hello, _Mapping]] = ..., inventory: _Optional[_Union[Inventory, _Mapping]] = ..., replicas: _Optional[_Union[ReplicaReports, _Mapping]] = ..., ack: _Optional[_Union[DirectiveAck, _Mapping]] = ..., event: _Optional[_Union[Event, _Mapping]] = ..., heartbeat: _Optional[_Union[Heartbeat, _Mapping]] = ...) -> None: ...

class Hello(_message.Message):
    __slots__ = ("cluster_id", "cloud", "region", "zone", "agent_version", "credentials_token", "completed_directive_ids")
    CLUSTER_ID_FIELD_NUMBER: _ClassVar[int]
    CLOUD_FIELD_NUMBER: _ClassVar[int]
    REGION_FIELD_NUMBER: _ClassVar[int]
    ZONE_FIELD_NUMBER: _ClassVar[int]
    AGENT_VERSION_FIELD_NUMBER: _ClassVar[int]
    CREDENTIALS_TOKEN_FIELD_NUMBER: _ClassVar[int]
    COMPLETED_DIRECTIVE_IDS_FIELD_NUMBER: _ClassVar[int]
    cluster_id: str
    cloud: _common_pb2.Cloud
    region: str
    zone: str
    agent_version: str
    credentials_token: str
    completed_directive_ids: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, cluster_id: _Optional[str] = ..., cloud: _Optional[_Union[_common_pb2.Cloud, str]] = ..., region: _Optional[str] = ..., zone: _Optional[str] = ..., agent_version: _Optional[str] = ..., credentials_token: _Optional[str] = ..., completed_directive_ids: _Optional[_Iterable[str]] = ...) -> None: ...

class GpuPool(_message.Message):
    __slots__ = ("pool_id", "gpu_type", "gpu_memory_gib", "gpus_per_node", "instance_type", "nodes_current", "nodes_min", "nodes_max", "gpus_free", "tier", "price_per_node_hour_usd", "quota_headroom_gpus", "provisioning_state", "zone", "nodes_pending")
    POOL_ID_FIELD_NUMBER: _ClassVar[int]
    GPU_TYPE_FIELD_NUMBER: _ClassVar[int]
    GPU_MEMORY_GIB_FIELD_NUMBER: _ClassVar[int]
    GPUS_PER_NODE_FIELD_NUMBER: _ClassVar[int]
    INSTANCE_TYPE_FIELD_NUMBER: _ClassVar[int]
    NODES_CURRENT_FIELD_NUMBER: _ClassVar[int]
    NODES_MIN_FIELD_NUMBER: _ClassVar[int]
    NODES_MAX_FIELD_NUMBER: _ClassVar[int]
    GPUS_FREE_FIELD_NUMBER: _ClassVar[int]
    TIER_FIELD_NUMBER: _ClassVar[int]
    PRICE_PER_NODE_HOUR_USD_FIELD_NUMBER: _ClassVar[int]
    QUOTA_HEADROOM_GPUS_FIELD_NUMBER: _ClassVar[int]
    PROVISIONING_STATE_FIELD_NUMBER: _ClassVar[int]
    ZONE_FIELD_NUMBER: _ClassVar[int]
    NODES_PENDING_FIELD_NUMBER: _ClassVar[int]
    pool_id: str
    gpu_type: str
    gpu_memory_gib: int
    gpus_per_node: int
    instance_type: str
    nodes_current: int
    nodes_min: int
    nodes_max: int
    gpus_free: int
    tier: _common_pb2.CapacityTier
    price_per_node_hour_usd: float
    quota_headroom_gpus: int
    provisioning_state: ProvisioningState
    zone: str
    nodes_pending: int
    def __init__(self, pool_id: _Optional[str] = ..., gpu_type: _Optional[str] = ..., gpu_memory_gib: _Optional[int] = ..., gpus_per_node: _Optional[int] = ..., instance_type: _Optional[str] = ..., nodes_current: _Optional[int] = ..., nodes_min: _Optional[int] = ..., nodes_max: _Optional[int] = ..., gpus_free: _Optional[int] = ..., tier: _Optional[_Union[_common_pb2.CapacityTier, str]] = ..., price_per_node_hour_usd: _Optional[float] = ..., quota_headroom_gpus: _Optional[int] = ..., provisioning_state: _Optional[_Union[ProvisioningState, str]] = ..., zone: _Optional[str] = ..., nodes_pending: _Optional[int] = ...) -> None: ...

class Inventory(_message.Message):
    __slots__ = ("pools", "complete")
    POOLS_FIELD_NUMBER: _ClassVar[int]
    COMPLETE_FIELD_NUMBER: _ClassVar[int]
    pools: _containers.RepeatedCompositeFieldContainer[GpuPool]
    complete: bool
    def __init__(self, pools: _Optional[_Iterable[_Union[GpuPool, _Mapping]]] = ..., complete: _Optional[bool] = ...) -> None: ...

class ReplicaReport(_message.Message):
    __slots__ = ("replica_id", "deployment", "revision", "endpoint", "state", "load", "pool_id", "gpu_count", "time_to_ready_s", "restarts", "message", "served_model_name", "started_at", "node_id")
    REPLICA_ID_FIELD_NUMBER: _ClassVar[int]
    DEPLOYMENT_FIELD_NUMBER: _ClassVar[int]
    REVISION_FIELD_NUMBER: _ClassVar[int]
    ENDPOINT_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    LOAD_FIELD_NUMBER: _ClassVar[int]
    POOL_ID_FIELD_NUMBER: _ClassVar[int]
    GPU_COUNT_FIELD_NUMBER: _ClassVar[int]
    TIME_TO_READY_S_FIELD_NUMBER: _ClassVar[int]
    RESTARTS_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    SERVED_MODEL_NAME_FIELD_NUMBER: _ClassVar[int]
    STARTED_AT_FIELD_NUMBER: _ClassVar[int]
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    replica_id: str
    deployment: str
    revision: str
    endpoint: str
    state: _common_pb2.ReplicaState
    load: _common_pb2.ReplicaLoad
    pool_id: str
    gpu_count: int
    time_to_ready_s: float
    restarts: int
    message: str
    served_model_name: str
    started_at: _timestamp_pb2.Timestamp
    node_id: str
    def __init__(self, replica_id: _Optional[str] = ..., deployment: _Optional[str] = ..., revision: _Optional[str] = ..., endpoint: _Optional[str] = ..., state: _Optional[_Union[_common_pb2.ReplicaState, str]] = ..., load: _Optional[_Union[_common_pb2.ReplicaLoad, _Mapping]] = ..., pool_id: _Optional[str] = ..., gpu_count: _Optional[int] = ..., time_to_ready_s: _Optional[float] = ..., restarts: _Optional[int] = ..., message: _Optional[str] = ..., served_model_name: _Optional[str] = ..., started_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., node_id: _Optional[str] = ...) -> None: ...

class ReplicaReports(_message.Message):
    __slots__ = ("replicas", "complete")
    REPLICAS_FIELD_NUMBER: _ClassVar[int]
    COMPLETE_FIELD_NUMBER: _ClassVar[int]
    replicas: _containers.RepeatedCompositeFieldContainer[ReplicaReport]
    complete: bool
    def __init__(self, replicas: _Optional[_Iterable[_Union[ReplicaReport, _Mapping]]] = ..., complete: _Optional[bool] = ...) -> None: ...

class DirectiveAck(_message.Message):
    __slots__ = ("directive_id", "outcome", "reason")
    DIRECTIVE_ID_FIELD_NUMBER: _ClassVar[int]
    OUTCOME_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    directive_id: str
    outcome: DirectiveOutcome
    reason: str
    def __init__(self, directive_id: _Optional[str] = ..., outcome: _Optional[_Union[DirectiveOutcome, str]] = ..., reason: _Optional[str] = ...) -> None: ...

class Event(_message.Message):
    __slots__ = ("kind", "pool_id", "replica_id", "message", "deadline", "directive_id")
    KIND_FIELD_NUMBER: _ClassVar[int]
    POOL_ID_FIELD_NUMBER: _ClassVar[int]
    REPLICA_ID_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    DEADLINE_FIELD_NUMBER: _ClassVar[int]
    DIRECTIVE_ID_FIELD_NUMBER: _ClassVar[int]
    kind: EventKind
    pool_id: str
    replica_id: str
    message: str
    deadline: _timestamp_pb2.Timestamp
    directive_id: str
    def __init__(self, kind: _Optional[_Union[EventKind, str]] = ..., pool_id: _Optional[str] = ..., replica_id: _Optional[str] = ..., message: _Optional[str] = ..., deadline: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., directive_id: _Optional[str] = ...) -> None: ...

class Heartbeat(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class SchedulerMessage(_message.Message):
    __slots__ = ("welcome", "directive")
    WELCOME_FIELD_NUMBER: _ClassVar[int]
    DIRECTIVE_FIELD_NUMBER: _ClassVar[int]
    welcome: Welcome
    directive: Directive
    def __init__(self, welcome: _Optional[_Union[Welcome, _Mapping]] = ..., directive: _Optional[_Union[Directive, _Mapping]] = ...) -> None: ...

class Welcome(_message.Message):
    __slots__ = ("scheduler_id", "fencing_token", "heartbeat_interval_s")
    SCHEDULER_ID_FIELD_NUMBER: _ClassVar[int]
    FENCING_TOKEN_FIELD_NUMBER: _ClassVar[int]
    HEARTBEAT_INTERVAL_S_FIELD_NUMBER: _ClassVar[int]
    scheduler_id: str
    fencing_token: int
    heartbeat_interval_s: int
    def __init__(self, scheduler_id: _Optional[str] = ..., fencing_token: _Optional[int] = ..., heartbeat_interval_s: _Optional[int] = ...) -> None: ...

class Directive(_message.Message):
    __slots__ = ("directive_id", "fencing_token", "start_replica", "drain_replica", "resize_pool")
    DIRECTIVE_ID_FIELD_NUMBER: _ClassVar[int]
    FENCING_TOKEN_FIELD_NUMBER: _ClassVar[int]
    START_REPLICA_FIELD_NUMBER: _ClassVar[int]
    DRAIN_REPLICA_FIELD_NUMBER: _ClassVar[int]
    RESIZE_POOL_FIELD_NUMBER: _ClassVar[int]
    directive_id: str
    fencing_token: int
    start_replica: StartReplica
    drain_replica: DrainReplica
    resize_pool: ResizePool
    def __init__(self, directive_id: _Optional[str] = ..., fencing_token: _Optional[int] = ..., start_replica: _Optional[_Union[StartReplica, _Mapping]] = ..., drain_replica: _Optional[_Union[DrainReplica, _Mapping]] = ..., resize_pool: _Optional[_Union[ResizePool, _Mapping]] = ...) -> None: ...

class RuntimeSpec(_message.Message):
    __slots__ = ("engine", "model_path", "model_revision", "served_model_name", "tp_size", "context_length", "mem_fraction_static", "quantization", "extra_args", "max_running_requests", "max_queued_requests", "is_embedding", "env")
    class EnvEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    ENGINE_FIELD_NUMBER: _ClassVar[int]
    MODEL_PATH_FIELD_NUMBER: _ClassVar[int]
    MODEL_REVISION_FIELD_NUMBER: _ClassVar[int]
    SERVED_MODEL_NAME_FIELD_NUMBER: _ClassVar[int]
    TP_SIZE_FIELD_NUMBER: _ClassVar[int]
    CONTEXT_LENGTH_FIELD_NUMBER: _ClassVar[int]
    MEM_FRACTION_STATIC_FIELD_NUMBER: _ClassVar[int]
    QUANTIZATION_FIELD_NUMBER: _ClassVar[int]
    EXTRA_ARGS_FIELD_NUMBER: _ClassVar[int]
    MAX_RUNNING_REQUESTS_FIELD_NUMBER: _ClassVar[int]
    MAX_QUEUED_REQUESTS_FIELD_NUMBER: _ClassVar[int]
    IS_EMBEDDING_FIELD_NUMBER: _ClassVar[int]
    ENV_FIELD_NUMBER: _ClassVar[int]
    engine: str
    model_path: str
    model_revision: str
    served_model_name: str
    tp_size: int
    context_length: int
    mem_fraction_static: float
    quantization: str
    extra_args: _containers.RepeatedScalarFieldContainer[str]
    max_running_requests: int
    max_queued_requests: int
    is_embedding: bool
    env: _containers.ScalarMap[str, str]
    def __init__(self, engine: _Optional[str] = ..., model_path: _Optional[str] = ..., model_revision: _Optional[str] = ..., served_model_name: _Optional[str] = ..., tp_size: _Optional[int] = ..., context_length: _Optional[int] = ..., mem_fraction_static: _Optional[float] = ..., quantization: _Optional[str] = ..., extra_args: _Optional[_Iterable[str]] = ..., max_running_requests: _Optional[int] = ..., max_queued_requests: _Optional[int] = ..., is_embedding: _Optional[bool] = ..., env: _Optional[_Mapping[str, str]] = ...) -> None: ...

class StartReplica(_message.Message):
    __slots__ = ("replica_id", "deployment", "revision", "runtime", "pool_id", "gpu_count", "deployment_spec_json", "avoid_nodes")
    REPLICA_ID_FIELD_NUMBER: _ClassVar[int]
    DEPLOYMENT_FIELD_NUMBER: _ClassVar[int]
    REVISION_FIELD_NUMBER: _ClassVar[int]
    RUNTIME_FIELD_NUMBER: _ClassVar[int]
    POOL_ID_FIELD_NUMBER: _ClassVar[int]
    GPU_COUNT_FIELD_NUMBER: _ClassVar[int]
    DEPLOYMENT_SPEC_JSON_FIELD_NUMBER: _ClassVar[int]
    AVOID_NODES_FIELD_NUMBER: _ClassVar[int]
    replica_id: str
    deployment: str
    revision: str
    runtime: RuntimeSpec
    pool_id: str
    gpu_count: int
    deployment_spec_json: str
    avoid_nodes: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, replica_id: _Optional[str] = ..., deployment: _Optional[str] = ..., revision: _Optional[str] = ..., runtime: _Optional[_Union[RuntimeSpec, _Mapping]] = ..., pool_id: _Optional[str] = ..., gpu_count: _Optional[int] = ..., deployment_spec_json: _Optional[str] = ..., avoid_nodes: _Optional[_Iterable[str]] = ...) -> None: ...

class DrainReplica(_message.Message):
    __slots__ = ("replica_id", "deadline_s")
    REPLICA_ID_FIELD_NUMBER: _ClassVar[int]
    DEADLINE_S_FIELD_NUMBER: _ClassVar[int]
    replica_id: str
    deadline_s: int
    def __init__(self, replica_id: _Optional[str] = ..., deadline_s: _Optional[int] = ...) -> None: ...

class ResizePool(_message.Message):
    __slots__ = ("pool_id", "target_nodes")
    POOL_ID_FIELD_NUMBER: _ClassVar[int]
    TARGET_NODES_FIELD_NUMBER: _ClassVar[int]
    pool_id: str
    target_nodes: int
    def __init__(self, pool_id: _Optional[str] = ..., target_nodes: _Optional[int] = ...) -> None: ...
