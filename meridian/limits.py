"""Bounds on what one message between Meridian's components may carry, shared by both ends of
each link so that a sender learns the limit the receiver enforces. Every bound is far above what a
real fleet sends; they exist so that no peer (a buggy agent, a stolen token) can make another
component hold unbounded memory or work. Over-limit input is refused with an error naming the
limit (docs/security.md lists them all)."""

from __future__ import annotations

MIB = 1024 * 1024

# gRPC messages (bytes, serialized). Agent -> scheduler (Hello, Inventory, ReplicaReports, acks,
# events) and router -> scheduler (traffic reports) messages, and scheduler -> agent directives.
GRPC_MAX_MESSAGE_BYTES = 4 * MIB
# A routing table (scheduler -> router) lists every replica of the fleet; its bound is larger.
GRPC_MAX_ROUTING_TABLE_BYTES = 32 * MIB

# Items per message.
MAX_POOLS_PER_INVENTORY = 1000
MAX_REPLICAS_PER_REPORT = 10_000
MAX_COMPLETED_IDS_PER_HELLO = 1024
MAX_TRAFFIC_SAMPLES_PER_REPORT = 10_000
MAX_ID_CHARS = 253  # a cluster, pool, replica or directive id (a DNS name's length)


def grpc_options(max_receive_bytes: int, max_send_bytes: int) -> list[tuple[str, int]]:
    """gRPC channel or server options bounding message sizes in each direction."""
    return [("grpc.max_receive_message_length", max_receive_bytes), ("grpc.max_send_message_length", max_send_bytes)]
