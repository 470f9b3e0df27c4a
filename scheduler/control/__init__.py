"""The leader's control side: the fleet view learned from agents, agent message intake, events
(spot notices, stock-out backoff), the planner (autoscaler + placement problem), routing tables,
and the control loop that ties autoscaler -> solver -> reconciler together."""

from scheduler.control import events, fleet, intake, loop, planner, routes
from scheduler.control.events import EventTracker
from scheduler.control.fleet import FleetSnapshot, FleetView
from scheduler.control.intake import Intake
from scheduler.control.loop import ControlLoop, PlanRecord, TickReport
from scheduler.control.planner import Autoscaler, SpecView
from scheduler.control.routes import RoutePublisher, build_models

__all__ = [
    "Autoscaler", "ControlLoop", "EventTracker", "FleetSnapshot", "FleetView", "Intake", "PlanRecord", "RoutePublisher",
    "SpecView", "TickReport", "build_models", "events", "fleet", "intake", "loop", "planner", "routes",
]
