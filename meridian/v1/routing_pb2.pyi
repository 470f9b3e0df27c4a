import datetime

from google.protobuf import timestamp_pb2 as _timestamp_pb2
from meridian.v1 import common_pb2 as _common_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class WatchRoutesRequest(_message.Message):
    __slots__ = ("router_id", "router_region", "known_version", "token", "router_version")
    ROUTER_ID_FIELD_NUMBER: _ClassVar[int]
    ROUTER_REGION_FIELD_NUMBER: _ClassVar[int]
    KNOWN_VERSION_FIELD_NUMBER: _ClassVar[int]
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    ROUTER_VERSION_FIELD_NUMBER: _ClassVar[int]
    router_id: str
    router_region: str
    known_version: int
    token: str
    router_version: str
    def __init__(self, router_id: _Optional[str] = ..., router_region: _Optional[str] = ..., known_version: _Optional[int] = ..., token: _Optional[str] = ..., router_version: _Optional[str] = ...) -> None: ...

class RouteReplica(_message.Message):
    __slots__ = ("replica_id", "endpoint", "cloud", "region", "zone", "state", "weight", "load", "gpu_type", "cluster_id", "revision", "tier")
    REPLICA_ID_FIELD_NUMBER: _ClassVar[int]
    ENDPOINT_FIELD_NUMBER: _ClassVar[int]
    CLOUD_FIELD_NUMBER: _ClassVar[int]
    REGION_FIELD_NUMBER: _ClassVar[int]
    ZONE_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    WEIGHT_FIELD_NUMBER: _ClassVar[int]
    LOAD_FIELD_NUMBER: _ClassVar[int]
    GPU_TYPE_FIELD_NUMBER: _ClassVar[int]
    CLUSTER_ID_FIELD_NUMBER: _ClassVar[int]
    REVISION_FIELD_NUMBER: _ClassVar[int]
    TIER_FIELD_NUMBER: _ClassVar[int]
    replica_id: str
    endpoint: str
    cloud: _common_pb2.Cloud
    region: str
    zone: str
    state: _common_pb2.ReplicaState
    weight: float
    load: _common_pb2.ReplicaLoad
    gpu_type: str
    cluster_id: str
    revision: str
    tier: _common_pb2.CapacityTier
    def __init__(self, replica_id: _Optional[str] = ..., endpoint: _Optional[str] = ..., cloud: _Optional[_Union[_common_pb2.Cloud, str]] = ..., region: _Optional[str] = ..., zone: _Optional[str] = ..., state: _Optional[_Union[_common_pb2.ReplicaState, str]] = ..., weight: _Optional[float] = ..., load: _Optional[_Union[_common_pb2.ReplicaLoad, _Mapping]] = ..., gpu_type: _Optional[str] = ..., cluster_id: _Optional[str] = ..., revision: _Optional[str] = ..., tier: _Optional[_Union[_common_pb2.CapacityTier, str]] = ...) -> None: ...

class ModelRoutes(_message.Message):
    __slots__ = ("served_model_name", "deployment", "policy", "replicas", "is_embedding", "context_length", "max_rtt_ms", "ttft_p99_ms", "tpot_p99_ms")
    SERVED_MODEL_NAME_FIELD_NUMBER: _ClassVar[int]
    DEPLOYMENT_FIELD_NUMBER: _ClassVar[int]
    POLICY_FIELD_NUMBER: _ClassVar[int]
    REPLICAS_FIELD_NUMBER: _ClassVar[int]
    IS_EMBEDDING_FIELD_NUMBER: _ClassVar[int]
    CONTEXT_LENGTH_FIELD_NUMBER: _ClassVar[int]
    MAX_RTT_MS_FIELD_NUMBER: _ClassVar[int]
    TTFT_P99_MS_FIELD_NUMBER: _ClassVar[int]
    TPOT_P99_MS_FIELD_NUMBER: _ClassVar[int]
    served_model_name: str
    deployment: str
    policy: str
    replicas: _containers.RepeatedCompositeFieldContainer[RouteReplica]
    is_embedding: bool
    context_length: int
    max_rtt_ms: float
    ttft_p99_ms: float
    tpot_p99_ms: float
    def __init__(self, served_model_name: _Optional[str] = ..., deployment: _Optional[str] = ..., policy: _Optional[str] = ..., replicas: _Optional[_Iterable[_Union[RouteReplica, _Mapping]]] = ..., is_embedding: _Optional[bool] = ..., context_length: _Optional[int] = ..., max_rtt_ms: _Optional[float] = ..., ttft_p99_ms: _Optional[float] = ..., tpot_p99_ms: _Optional[float] = ...) -> None: ...

class RoutingTable(_message.Message):
    __slots__ = ("version", "generated_at", "models", "scheduler_id")
    VERSION_FIELD_NUMBER: _ClassVar[int]
    GENERATED_AT_FIELD_NUMBER: _ClassVar[int]
    MODELS_FIELD_NUMBER: _ClassVar[int]
    SCHEDULER_ID_FIELD_NUMBER: _ClassVar[int]
    version: int
    generated_at: _timestamp_pb2.Timestamp
    models: _containers.RepeatedCompositeFieldContainer[ModelRoutes]
    scheduler_id: str
    def __init__(self, version: _Optional[int] = ..., generated_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., models: _Optional[_Iterable[_Union[ModelRoutes, _Mapping]]] = ..., scheduler_id: _Optional[str] = ...) -> None: ...

class TrafficSample(_message.Message):
    __slots__ = ("model", "client_region", "requests", "prompt_tokens", "completion_tokens", "errors", "in_flight", "ttft_p99_ms", "revision")
    MODEL_FIELD_NUMBER: _ClassVar[int]
    CLIENT_REGION_FIELD_NUMBER: _ClassVar[int]
    REQUESTS_FIELD_NUMBER: _ClassVar[int]
    PROMPT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    COMPLETION_TOKENS_FIELD_NUMBER: _ClassVar[int]
    ERRORS_FIELD_NUMBER: _ClassVar[int]
    IN_FLIGHT_FIELD_NUMBER: _ClassVar[int]
    TTFT_P99_MS_FIELD_NUMBER: _ClassVar[int]
    REVISION_FIELD_NUMBER: _ClassVar[int]
    model: str
    client_region: str
    requests: int
    prompt_tokens: int
    completion_tokens: int
    errors: int
    in_flight: int
    ttft_p99_ms: float
    revision: str
    def __init__(self, model: _Optional[str] = ..., client_region: _Optional[str] = ..., requests: _Optional[int] = ..., prompt_tokens: _Optional[int] = ..., completion_tokens: _Optional[int] = ..., errors: _Optional[int] = ..., in_flight: _Optional[int] = ..., ttft_p99_ms: _Optional[float] = ..., revision: _Optional[str] = ...) -> None: ...

class TrafficReport(_message.Message):
    __slots__ = ("router_id", "router_region", "window_start", "window_end", "samples", "token", "router_version")
    ROUTER_ID_FIELD_NUMBER: _ClassVar[int]
    ROUTER_REGION_FIELD_NUMBER: _ClassVar[int]
    WINDOW_START_FIELD_NUMBER: _ClassVar[int]
    WINDOW_END_FIELD_NUMBER: _ClassVar[int]
    SAMPLES_FIELD_NUMBER: _ClassVar[int]
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    ROUTER_VERSION_FIELD_NUMBER: _ClassVar[int]
    router_id: str
    router_region: str
    window_start: _timestamp_pb2.Timestamp
    window_end: _timestamp_pb2.Timestamp
    samples: _containers.RepeatedCompositeFieldContainer[TrafficSample]
    token: str
    router_version: str
    def __init__(self, router_id: _Optional[str] = ..., router_region: _Optional[str] = ..., window_start: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., window_end: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., samples: _Optional[_Iterable[_Union[TrafficSample, _Mapping]]] = ..., token: _Optional[str] = ..., router_version: _Optional[str] = ...) -> None: ...

class TrafficReportAck(_message.Message):
    __slots__ = ("accepted_samples",)
    ACCEPTED_SAMPLES_FIELD_NUMBER: _ClassVar[int]
    accepted_samples: int
    def __init__(self, accepted_samples: _Optional[int] = ...) -> None: ...
