"""Global placement: integer replicas per (deployment, GPU pool) from one CP-SAT model, built the
way Kubernetes' scheduler is (filter plugins prune, score plugins weigh, a registry by name), but
decided globally. ``solve(problem, time_limit_s=..., current=...)`` -> PlacementResult;
``diff(current, target)`` lists what to start and drain per pool."""

from scheduler.solver import (
    candidates,
    evaluate,
    explain,
    filters,
    flows,
    formulation,
    framework,
    greedy,
    inputs,
    ledger,
    linear,
    plan,
    problem,
    scores,
    starts,
    throughput,
    validate,
)
from scheduler.solver.framework import FILTERS, SCORES, Code, Status, register_filter, register_score
from scheduler.solver.plan import PlanDiff, PoolChange, diff
from scheduler.solver.problem import (
    DeploymentDemand,
    Placement,
    PlacementProblem,
    PlacementResult,
    PoolOffer,
    SolverSettings,
    SolveStatus,
    Unplaced,
    pool_key,
)
from scheduler.solver.solve import changed_deployments, solve

__all__ = [
    "FILTERS", "SCORES", "Code", "DeploymentDemand", "Placement", "PlacementProblem", "PlacementResult", "PlanDiff",
    "PoolChange", "PoolOffer", "SolveStatus", "SolverSettings", "Status", "Unplaced", "candidates",
    "changed_deployments", "diff", "evaluate", "explain", "filters", "flows", "formulation", "framework", "greedy", "inputs", "ledger",
    "linear", "plan", "pool_key", "problem", "register_filter", "register_score", "scores", "solve", "starts", "throughput",
    "validate",
]
