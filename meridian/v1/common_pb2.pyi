import datetime

from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Cloud(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    CLOUD_UNSPECIFIED: _ClassVar[Cloud]
    CLOUD_AWS: _ClassVar[Cloud]
    CLOUD_GCP: _ClassVar[Cloud]
    CLOUD_AZURE: _ClassVar[Cloud]
    CLOUD_LOCAL: _ClassVar[Cloud]

class CapacityTier(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    CAPACITY_TIER_UNSPECIFIED: _ClassVar[CapacityTier]
    CAPACITY_TIER_ON_DEMAND: _ClassVar[CapacityTier]
    CAPACITY_TIER_SPOT: _ClassVar[CapacityTier]
    CAPACITY_TIER_RESERVED: _ClassVar[CapacityTier]

class ReplicaState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    REPLICA_STATE_UNSPECIFIED: _ClassVar[ReplicaState]
    REPLICA_STATE_STARTING: _ClassVar[ReplicaState]
    REPLICA_STATE_READY: _ClassVar[ReplicaState]
    REPLICA_STATE_DRAINING: _ClassVar[ReplicaState]
    REPLICA_STATE_FAILED: _ClassVar[ReplicaState]
    REPLICA_STATE_STOPPED: _ClassVar[ReplicaState]
CLOUD_UNSPECIFIED: Cloud
CLOUD_AWS: Cloud
CLOUD_GCP: Cloud
CLOUD_AZURE: Cloud
CLOUD_LOCAL: Cloud
CAPACITY_TIER_UNSPECIFIED: CapacityTier
CAPACITY_TIER_ON_DEMAND: CapacityTier
CAPACITY_TIER_SPOT: CapacityTier
CAPACITY_TIER_RESERVED: CapacityTier
REPLICA_STATE_UNSPECIFIED: ReplicaState
REPLICA_STATE_STARTING: ReplicaState
REPLICA_STATE_READY: ReplicaState
REPLICA_STATE_DRAINING: ReplicaState
REPLICA_STATE_FAILED: ReplicaState
REPLICA_STATE_STOPPED: ReplicaState

class LatencyPercentiles(_message.Message):
    __slots__ = ("p50_ms", "p90_ms", "p99_ms")
    P50_MS_FIELD_NUMBER: _ClassVar[int]
    P90_MS_FIELD_NUMBER: _ClassVar[int]
    P99_MS_FIELD_NUMBER: _ClassVar[int]
    p50_ms: float
    p90_ms: float
    p99_ms: float
    def __init__(self, p50_ms: _Optional[float] = ..., p90_ms: _Optional[float] = ..., p99_ms: _Optional[float] = ...) -> None: ...

class ReplicaLoad(_message.Message):
    __slots__ = ("running_requests", "queued_requests", "kv_cache_usage", "prefix_cache_hit_rate", "ttft", "inter_token_latency", "generation_tokens_per_s", "requests_per_s", "observed_at", "queue_time")
    RUNNING_REQUESTS_FIELD_NUMBER: _ClassVar[int]
    QUEUED_REQUESTS_FIELD_NUMBER: _ClassVar[int]
    KV_CACHE_USAGE_FIELD_NUMBER: _ClassVar[int]
    PREFIX_CACHE_HIT_RATE_FIELD_NUMBER: _ClassVar[int]
    TTFT_FIELD_NUMBER: _ClassVar[int]
    INTER_TOKEN_LATENCY_FIELD_NUMBER: _ClassVar[int]
    GENERATION_TOKENS_PER_S_FIELD_NUMBER: _ClassVar[int]
    REQUESTS_PER_S_FIELD_NUMBER: _ClassVar[int]
    OBSERVED_AT_FIELD_NUMBER: _ClassVar[int]
    QUEUE_TIME_FIELD_NUMBER: _ClassVar[int]
    running_requests: int
    queued_requests: int
    kv_cache_usage: float
    prefix_cache_hit_rate: float
    ttft: LatencyPercentiles
    inter_token_latency: LatencyPercentiles
    generation_tokens_per_s: float
    requests_per_s: float
    observed_at: _timestamp_pb2.Timestamp
    queue_time: LatencyPercentiles
    def __init__(self, running_requests: _Optional[int] = ..., queued_requests: _Optional[int] = ..., kv_cache_usage: _Optional[float] = ..., prefix_cache_hit_rate: _Optional[float] = ..., ttft: _Optional[_Union[LatencyPercentiles, _Mapping]] = ..., inter_token_latency: _Optional[_Union[LatencyPercentiles, _Mapping]] = ..., generation_tokens_per_s: _Optional[float] = ..., requests_per_s: _Optional[float] = ..., observed_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., queue_time: _Optional[_Union[LatencyPercentiles, _Mapping]] = ...) -> None: ...
