"""The scheduler's gRPC edge: ``CapacityService`` (agents) and ``RoutingService`` (routers), with
token authentication and optional (mutual) TLS; protobuf stays here (converted by ``meridian.fleet.wire``)."""

from scheduler.server import agents, auth, capacity, routing, tls
from scheduler.server.agents import AgentHub, AgentSession, AgentSink
from scheduler.server.auth import AdminAuth, CredentialError, TokenBook, TokensFile
from scheduler.server.capacity import LEADER_METADATA, CapacityServicer, Leadership
from scheduler.server.routing import RouteHub, RoutingServicer

__all__ = [
    "LEADER_METADATA", "AdminAuth", "AgentHub", "AgentSession", "AgentSink", "CapacityServicer", "CredentialError",
    "Leadership", "RouteHub", "RoutingServicer", "TokenBook", "TokensFile", "agents", "auth", "capacity", "routing",
    "tls",
]
