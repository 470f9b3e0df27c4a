"""An agent or router of an older release, speaking the contract frozen in ``tests/compat/proto/<version>/``
through stubs generated from it (``--stubs DIR``). Runs in its own process: the old stubs have the
same module and proto file names as today's (``meridian.v1``), so they cannot share a process with
them, and nothing of today's code base is imported here.

Prints one JSON object: what the scheduler answered (or the gRPC status it refused with)."""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading


def _use_old_stubs(stubs: str) -> None:
    # The project is installed in editable mode: drop its import hooks and its root from the path so
    # that ``meridian.v1`` resolves to the old stubs and only to them.
    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    sys.meta_path[:] = [f for f in sys.meta_path if "editable" not in repr(f).lower()]
    sys.path[:] = [stubs] + [p for p in sys.path if os.path.abspath(p or ".") != repo]


def agent(args, cap, cap_grpc, common, grpc) -> dict:
    out: dict = {"directives": []}
    channel = grpc.insecure_channel(args.address)
    seq = iter(range(1, 1_000_000))
    outgoing = [
        cap.AgentMessage(sequence=next(seq), hello=cap.Hello(
            cluster_id=args.cluster, cloud=common.CLOUD_AWS, region="us-east-1", agent_version=args.version,
            credentials_token=args.token)),
        cap.AgentMessage(sequence=next(seq), inventory=cap.Inventory(complete=True, pools=[cap.GpuPool(
            pool_id="l4", gpu_type="L4", gpu_memory_gib=24, gpus_per_node=1, instance_type="g6.xlarge",
            nodes_current=2, nodes_min=0, nodes_max=4, gpus_free=2, tier=common.CAPACITY_TIER_ON_DEMAND,
            price_per_node_hour_usd=0.8, quota_headroom_gpus=8,
            provisioning_state=cap.PROVISIONING_STATE_STEADY)])),
        cap.AgentMessage(sequence=next(seq), replicas=cap.ReplicaReports(complete=True, replicas=[])),
    ]

    done = threading.Event()

    def requests():
        yield from outgoing
        while not done.wait(0.5):  # heartbeats until the exchange is over
            yield cap.AgentMessage(sequence=next(seq), heartbeat=cap.Heartbeat())

    stream = cap_grpc.CapacityServiceStub(channel).Connect(requests(), timeout=args.timeout_s)
    try:
        for msg in stream:
            kind = msg.WhichOneof("payload")
            if kind == "welcome":
                out["welcome"] = {"scheduler_id": msg.welcome.scheduler_id,
                                  "fencing_token": msg.welcome.fencing_token}
            elif kind == "directive":
                d = msg.directive
                out["directives"].append({"id": d.directive_id, "action": d.WhichOneof("action"),
                                          "fencing_token": d.fencing_token})
                if len(out["directives"]) >= args.directives:
                    break
    except grpc.RpcError as exc:
        out["refused"] = {"code": exc.code().name, "details": exc.details()}
    finally:
        done.set()
        stream.cancel()
        channel.close()
    return out


def router(args, rt, rt_grpc, grpc) -> dict:
    out: dict = {}
    channel = grpc.insecure_channel(args.address)
    stub = rt_grpc.RoutingServiceStub(channel)
    try:
        stream = stub.WatchRoutes(rt.WatchRoutesRequest(router_id="old-router", router_region="na-east",
                                                        token=args.token), timeout=args.timeout_s)
        for table in stream:
            out["table"] = {"version": table.version,
                            "models": sorted(m.served_model_name for m in table.models)}
            break
        stream.cancel()
        ack = stub.ReportTraffic(rt.TrafficReport(router_id="old-router", router_region="na-east", token=args.token),
                                 timeout=args.timeout_s)
        out["traffic_ack"] = ack.accepted_samples
    except grpc.RpcError as exc:
        out["refused"] = {"code": exc.code().name, "details": exc.details()}
    finally:
        channel.close()
    return out


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("role", choices=["agent", "router"])
    parser.add_argument("--stubs", required=True)
    parser.add_argument("--address", required=True)
    parser.add_argument("--token", required=True)
    parser.add_argument("--cluster", default="c1")
    parser.add_argument("--version", default="meridian-agent/0.1.0")
    parser.add_argument("--directives", type=int, default=1, help="agent: stop after this many directives")
    parser.add_argument("--timeout-s", type=float, default=30.0)
    args = parser.parse_args()
    _use_old_stubs(args.stubs)
    import grpc
    from meridian.v1 import capacity_pb2, capacity_pb2_grpc, common_pb2, routing_pb2, routing_pb2_grpc

    assert capacity_pb2.__file__.startswith(args.stubs), f"today's stubs were imported: {capacity_pb2.__file__}"
    if args.role == "agent":
        result = agent(args, capacity_pb2, capacity_pb2_grpc, common_pb2, grpc)
    else:
        result = router(args, routing_pb2, routing_pb2_grpc, grpc)
    result["stubs"] = capacity_pb2.__file__
    print(json.dumps(result), flush=True)
    sys.stderr.flush()
    os._exit(0)  # no gRPC thread may keep an old peer alive after it has answered


if __name__ == "__main__":
    sys.exit(main())
