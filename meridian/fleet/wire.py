"""Converters between the fleet's domain types and the ``meridian.v1`` protobuf messages.

The only module outside the generated stubs that touches pb2 types; components call these at their
gRPC edge and keep protobuf out of their domain code."""

from __future__ import annotations

import enum
import math
from typing import Any

from google.protobuf import timestamp_pb2

import meridian
from meridian.fleet import models as m
from meridian.v1 import capacity_pb2 as cap
from meridian.v1 import common_pb2 as common
from meridian.v1 import routing_pb2 as rt


def _enum_maps(enum_cls: type[enum.Enum], pb_enum: Any, prefix: str) -> tuple[dict[Any, Any], dict[Any, Any]]:
    to_pb = {member: pb_enum.Value(f"{prefix}_{member.name}") for member in enum_cls}
    return to_pb, {v: k for k, v in to_pb.items()}


_CLOUD, _CLOUD_BACK = _enum_maps(m.Cloud, common.Cloud, "CLOUD")
_TIER, _TIER_BACK = _enum_maps(m.Tier, common.CapacityTier, "CAPACITY_TIER")
_STATE, _STATE_BACK = _enum_maps(m.ReplicaState, common.ReplicaState, "REPLICA_STATE")
_PROV, _PROV_BACK = _enum_maps(m.ProvisioningState, cap.ProvisioningState, "PROVISIONING_STATE")
_OUTCOME, _OUTCOME_BACK = _enum_maps(m.DirectiveOutcome, cap.DirectiveOutcome, "DIRECTIVE_OUTCOME")
_EVENT, _EVENT_BACK = _enum_maps(m.EventKind, cap.EventKind, "EVENT_KIND")


class WireError(ValueError):
    """A message from the wire that the domain cannot represent (e.g. an unset enum)."""


def _back(table: dict[Any, Any], value: int, what: str) -> Any:
    try:
        return table[value]
    except KeyError:
        raise WireError(f"unknown or unset {what} ({value})") from None


def _number(value: float, what: str) -> float:
    """A measured quantity from the wire (a load, a rate, a latency, a weight) as a finite number
    >= 0: NaN, an infinity or a negative value (an engine's odd gauge, a hostile peer) would poison
    every sum, plan and policy it reaches, so it reads as 0 (nothing measured). Quantities a
    decision rests on (a pool's price) are checked where they are used, and refused there."""
    return value if math.isfinite(value) and value >= 0 else 0.0


def ts(seconds: float | None) -> timestamp_pb2.Timestamp:
    out = timestamp_pb2.Timestamp()
    if seconds:
        out.FromNanoseconds(int(seconds * 1e9))
    return out


def from_ts(value: timestamp_pb2.Timestamp) -> float:
    return value.seconds + value.nanos / 1e9


# ---------------------------------------------------------------- enums


def cloud_to_pb(cloud: m.Cloud) -> common.Cloud:
    return _CLOUD[m.Cloud(cloud)]


def cloud_from_pb(value: int) -> m.Cloud:
    return _back(_CLOUD_BACK, value, "cloud")


def tier_to_pb(tier: m.Tier) -> common.CapacityTier:
    return _TIER[m.Tier(tier)]


def tier_from_pb(value: int) -> m.Tier:
    return _back(_TIER_BACK, value, "capacity tier")


def state_to_pb(state: m.ReplicaState) -> common.ReplicaState:
    return _STATE[m.ReplicaState(state)]


def state_from_pb(value: int) -> m.ReplicaState:
    return _back(_STATE_BACK, value, "replica state")


# ---------------------------------------------------------------- load


def percentiles_to_pb(p: m.LatencyPercentiles) -> common.LatencyPercentiles:
    return common.LatencyPercentiles(p50_ms=p.p50_ms, p90_ms=p.p90_ms, p99_ms=p.p99_ms)


def percentiles_from_pb(p: common.LatencyPercentiles) -> m.LatencyPercentiles:
    return m.LatencyPercentiles(_number(p.p50_ms, "p50_ms"), _number(p.p90_ms, "p90_ms"), _number(p.p99_ms, "p99_ms"))


def load_to_pb(load: m.ReplicaLoad) -> common.ReplicaLoad:
    return common.ReplicaLoad(
        running_requests=load.running_requests,
        queued_requests=load.queued_requests,
        kv_cache_usage=load.kv_cache_usage,
        prefix_cache_hit_rate=load.prefix_cache_hit_rate,
        ttft=percentiles_to_pb(load.ttft),
        inter_token_latency=percentiles_to_pb(load.inter_token_latency),
        generation_tokens_per_s=load.generation_tokens_per_s,
        requests_per_s=load.requests_per_s,
        observed_at=ts(load.observed_at),
        queue_time=percentiles_to_pb(load.queue_time) if load.queue_time is not None else None,
    )


def load_from_pb(p: common.ReplicaLoad) -> m.ReplicaLoad:
    return m.ReplicaLoad(
        running_requests=p.running_requests,
        queued_requests=p.queued_requests,
        kv_cache_usage=_number(p.kv_cache_usage, "kv_cache_usage"),
        prefix_cache_hit_rate=_number(p.prefix_cache_hit_rate, "prefix_cache_hit_rate"),
        ttft=percentiles_from_pb(p.ttft),
        inter_token_latency=percentiles_from_pb(p.inter_token_latency),
        generation_tokens_per_s=_number(p.generation_tokens_per_s, "generation_tokens_per_s"),
        requests_per_s=_number(p.requests_per_s, "requests_per_s"),
        observed_at=from_ts(p.observed_at),
        queue_time=percentiles_from_pb(p.queue_time) if p.HasField("queue_time") else None,
    )


# ---------------------------------------------------------------- agent -> scheduler


def hello_to_pb(ident: m.ClusterIdentity, token: str, completed: list[str] | tuple[str, ...] = ()) -> cap.Hello:
    return cap.Hello(cluster_id=ident.cluster_id, cloud=cloud_to_pb(ident.cloud), region=ident.region,
                     zone=ident.zone, agent_version=ident.agent_version, credentials_token=token,
                     completed_directive_ids=list(completed))


def hello_from_pb(p: cap.Hello) -> tuple[m.ClusterIdentity, str, tuple[str, ...]]:
    ident = m.ClusterIdentity(p.cluster_id, cloud_from_pb(p.cloud), p.region, p.zone, p.agent_version)
    return ident, p.credentials_token, tuple(p.completed_directive_ids)


def pool_to_pb(pool: m.GpuPool) -> cap.GpuPool:
    return cap.GpuPool(
        pool_id=pool.pool_id, gpu_type=pool.gpu_type, gpu_memory_gib=pool.gpu_memory_gib,
        gpus_per_node=pool.gpus_per_node, instance_type=pool.instance_type, nodes_current=pool.nodes_current,
        nodes_min=pool.nodes_min, nodes_max=pool.nodes_max, gpus_free=pool.gpus_free, tier=tier_to_pb(pool.tier),
        price_per_node_hour_usd=pool.price_per_node_hour_usd, quota_headroom_gpus=pool.quota_headroom_gpus,
        provisioning_state=_PROV[m.ProvisioningState(pool.provisioning_state)], zone=pool.zone,
        nodes_pending=pool.nodes_pending,
    )


def pool_from_pb(p: cap.GpuPool) -> m.GpuPool:
    return m.GpuPool(
        pool_id=p.pool_id, gpu_type=p.gpu_type, gpu_memory_gib=p.gpu_memory_gib, gpus_per_node=p.gpus_per_node,
        instance_type=p.instance_type, nodes_current=p.nodes_current, nodes_min=p.nodes_min, nodes_max=p.nodes_max,
        gpus_free=p.gpus_free, tier=tier_from_pb(p.tier),
        price_per_node_hour_usd=p.price_per_node_hour_usd,
        quota_headroom_gpus=p.quota_headroom_gpus,
        provisioning_state=_PROV_BACK.get(p.provisioning_state, m.ProvisioningState.STEADY),
        zone=p.zone, nodes_pending=p.nodes_pending,
    )


def report_to_pb(r: m.ReplicaReport) -> cap.ReplicaReport:
    return cap.ReplicaReport(
        replica_id=r.replica_id, deployment=r.deployment, revision=r.revision, endpoint=r.endpoint,
        state=state_to_pb(r.state), load=load_to_pb(r.load), pool_id=r.pool_id, gpu_count=r.gpu_count,
        time_to_ready_s=r.time_to_ready_s, restarts=r.restarts, message=r.message,
        served_model_name=r.served_model_name, started_at=ts(r.started_at), node_id=r.node_id,
    )


def report_from_pb(p: cap.ReplicaReport) -> m.ReplicaReport:
    return m.ReplicaReport(
        replica_id=p.replica_id, deployment=p.deployment, revision=p.revision, endpoint=p.endpoint,
        state=state_from_pb(p.state), load=load_from_pb(p.load), pool_id=p.pool_id, gpu_count=p.gpu_count,
        time_to_ready_s=_number(p.time_to_ready_s, "time_to_ready_s"), restarts=p.restarts, message=p.message,
        served_model_name=p.served_model_name, started_at=from_ts(p.started_at), node_id=p.node_id,
    )


def ack_to_pb(a: m.DirectiveAck) -> cap.DirectiveAck:
    return cap.DirectiveAck(directive_id=a.directive_id, outcome=_OUTCOME[m.DirectiveOutcome(a.outcome)], reason=a.reason)


def ack_from_pb(p: cap.DirectiveAck) -> m.DirectiveAck:
    return m.DirectiveAck(p.directive_id, _back(_OUTCOME_BACK, p.outcome, "directive outcome"), p.reason)


def event_to_pb(e: m.Event) -> cap.Event:
    out = cap.Event(kind=_EVENT[m.EventKind(e.kind)], pool_id=e.pool_id, replica_id=e.replica_id,
                    message=e.message, directive_id=e.directive_id)
    if e.deadline is not None:
        out.deadline.CopyFrom(ts(e.deadline))
    return out


def event_from_pb(p: cap.Event) -> m.Event:
    deadline = from_ts(p.deadline) if p.HasField("deadline") else None
    return m.Event(_back(_EVENT_BACK, p.kind, "event kind"), p.pool_id, p.replica_id, p.message, deadline, p.directive_id)


# ---------------------------------------------------------------- scheduler -> agent


def runtime_to_pb(r: m.RuntimeSpec) -> cap.RuntimeSpec:
    return cap.RuntimeSpec(
        engine=r.engine, model_path=r.model_path, model_revision=r.model_revision,
        served_model_name=r.served_model_name, tp_size=r.tp_size, context_length=r.context_length,
        mem_fraction_static=r.mem_fraction_static, quantization=r.quantization, extra_args=list(r.extra_args),
        max_running_requests=r.max_running_requests, max_queued_requests=r.max_queued_requests,
        is_embedding=r.is_embedding, env=dict(r.env),
    )


def runtime_from_pb(p: cap.RuntimeSpec) -> m.RuntimeSpec:
    return m.RuntimeSpec(
        engine=p.engine or "sglang", model_path=p.model_path, model_revision=p.model_revision,
        served_model_name=p.served_model_name, tp_size=p.tp_size or 1, context_length=p.context_length,
        mem_fraction_static=p.mem_fraction_static or 0.88, quantization=p.quantization,
        extra_args=tuple(p.extra_args), max_running_requests=p.max_running_requests,
        max_queued_requests=p.max_queued_requests, is_embedding=p.is_embedding, env=dict(p.env),
    )


def directive_to_pb(d: m.Directive) -> cap.Directive:
    out = cap.Directive(directive_id=d.directive_id, fencing_token=d.fencing_token)
    a = d.action
    if isinstance(a, m.StartReplica):
        out.start_replica.CopyFrom(cap.StartReplica(
            replica_id=a.replica_id, deployment=a.deployment, revision=a.revision, runtime=runtime_to_pb(a.runtime),
            pool_id=a.pool_id, gpu_count=a.gpu_count, deployment_spec_json=a.deployment_spec_json,
            avoid_nodes=list(a.avoid_nodes)))
    elif isinstance(a, m.DrainReplica):
        out.drain_replica.CopyFrom(cap.DrainReplica(replica_id=a.replica_id, deadline_s=a.deadline_s))
    elif isinstance(a, m.ResizePool):
        out.resize_pool.CopyFrom(cap.ResizePool(pool_id=a.pool_id, target_nodes=a.target_nodes))
    else:
        raise WireError(f"unknown directive action {type(a).__name__}")
    return out


def directive_from_pb(p: cap.Directive) -> m.Directive:
    which = p.WhichOneof("action")
    if which == "start_replica":
        s = p.start_replica
        action: m.Action = m.StartReplica(s.replica_id, s.deployment, s.revision, runtime_from_pb(s.runtime),
                                          s.pool_id, s.gpu_count, s.deployment_spec_json, tuple(s.avoid_nodes))
    elif which == "drain_replica":
        action = m.DrainReplica(p.drain_replica.replica_id, p.drain_replica.deadline_s)
    elif which == "resize_pool":
        action = m.ResizePool(p.resize_pool.pool_id, p.resize_pool.target_nodes)
    else:
        raise WireError(f"directive {p.directive_id!r} has no action")
    return m.Directive(p.directive_id, action, p.fencing_token)


# ---------------------------------------------------------------- routing


def route_replica_to_pb(r: m.RouteReplica) -> rt.RouteReplica:
    return rt.RouteReplica(
        replica_id=r.replica_id, endpoint=r.endpoint, cloud=cloud_to_pb(r.cloud), region=r.region, zone=r.zone,
        state=state_to_pb(r.state), weight=r.weight, load=load_to_pb(r.load), gpu_type=r.gpu_type,
        cluster_id=r.cluster_id, revision=r.revision, tier=tier_to_pb(r.tier),
    )


def route_replica_from_pb(p: rt.RouteReplica) -> m.RouteReplica:
    return m.RouteReplica(
        replica_id=p.replica_id, endpoint=p.endpoint, cloud=cloud_from_pb(p.cloud), region=p.region, zone=p.zone,
        state=state_from_pb(p.state), weight=_number(p.weight, "weight"), load=load_from_pb(p.load),
        gpu_type=p.gpu_type,
        cluster_id=p.cluster_id, revision=p.revision, tier=_TIER_BACK.get(p.tier, m.Tier.ON_DEMAND),
    )


def table_to_pb(t: m.RoutingTable) -> rt.RoutingTable:
    return rt.RoutingTable(
        version=t.version, generated_at=ts(t.generated_at), scheduler_id=t.scheduler_id,
        models=[rt.ModelRoutes(served_model_name=mr.served_model_name, deployment=mr.deployment, policy=mr.policy,
                               replicas=[route_replica_to_pb(r) for r in mr.replicas], is_embedding=mr.is_embedding,
                               context_length=mr.context_length, max_rtt_ms=mr.max_rtt_ms,
                               ttft_p99_ms=mr.ttft_p99_ms, tpot_p99_ms=mr.tpot_p99_ms) for mr in t.models],
    )


def table_from_pb(p: rt.RoutingTable) -> m.RoutingTable:
    return m.RoutingTable(
        version=p.version, generated_at=from_ts(p.generated_at), scheduler_id=p.scheduler_id,
        models=tuple(m.ModelRoutes(served_model_name=mr.served_model_name, deployment=mr.deployment,
                                   replicas=tuple(route_replica_from_pb(r) for r in mr.replicas), policy=mr.policy,
                                   is_embedding=mr.is_embedding, context_length=mr.context_length,
                                   max_rtt_ms=mr.max_rtt_ms, ttft_p99_ms=mr.ttft_p99_ms,
                                   tpot_p99_ms=mr.tpot_p99_ms) for mr in p.models),
    )


def watch_request_to_pb(router_id: str, router_region: str, known_version: int, token: str = "",
                        router_version: str = meridian.__version__) -> rt.WatchRoutesRequest:
    """A router's WatchRoutes request, carrying its version for the scheduler's skew check."""
    return rt.WatchRoutesRequest(router_id=router_id, router_region=router_region, known_version=known_version,
                                 token=token, router_version=router_version)


def traffic_to_pb(t: m.TrafficReport, token: str = "", router_version: str = meridian.__version__) -> rt.TrafficReport:
    return rt.TrafficReport(
        router_id=t.router_id, router_region=t.router_region, window_start=ts(t.window_start),
        window_end=ts(t.window_end), token=token, router_version=router_version,
        samples=[rt.TrafficSample(model=s.model, client_region=s.client_region, requests=s.requests,
                                  prompt_tokens=s.prompt_tokens, completion_tokens=s.completion_tokens,
                                  errors=s.errors, in_flight=s.in_flight, ttft_p99_ms=s.ttft_p99_ms,
                                  revision=s.revision)
                 for s in t.samples],
    )


def traffic_from_pb(p: rt.TrafficReport) -> m.TrafficReport:
    return m.TrafficReport(
        router_id=p.router_id, router_region=p.router_region, window_start=from_ts(p.window_start),
        window_end=from_ts(p.window_end),
        samples=tuple(m.TrafficSample(s.model, s.client_region, s.requests, s.prompt_tokens, s.completion_tokens,
                                      s.errors, s.in_flight, _number(s.ttft_p99_ms, "ttft_p99_ms"), s.revision)
                      for s in p.samples),
    )
