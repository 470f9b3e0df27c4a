"""``meridian status``: the scheduler's view (``GET /v1/status``): leadership, the spec generation,
every cluster with its replicas by state, the current plan and the directives still open.
``-o json|yaml`` prints the whole answer. Exit 0, or 1 when the scheduler is unreachable."""

from __future__ import annotations

import argparse

from meridian import tables
from meridian.cli import apply as apply_cmd
from meridian.cli import output
from scheduler.admin import client as admin_client


def add_arguments(parser: argparse.ArgumentParser) -> None:
    apply_cmd.add_connection_arguments(parser)


def render(st: dict) -> str:
    """The text of a ``GET /v1/status`` answer: a headline, a table of clusters, the plan."""
    leader = "leader" if st.get("leader") else "standby"
    lines = [f"scheduler {st.get('scheduler_id')}: {leader} (fencing token {st.get('fencing_token')}), spec "
             f"generation {st.get('spec_generation')}, routing version {st.get('routing_version')}"
             + (", adopting the running fleet" if st.get("adopting") else "")]
    rows = []
    for c in st.get("clusters", []):
        up = "lost" if c.get("lost") else "connected" if c.get("connected") else "disconnected"
        replicas = ", ".join(f"{n} {state}" for state, n in sorted((c.get("replicas") or {}).items())) or "-"
        rows.append([c["cluster_id"], c["cloud"], c["region"], up, f"{c.get('silent_s', 0):g}", c.get("pools", 0),
                     replicas])
    lines += ["", tables.text(["cluster", "cloud", "region", "state", "silent s", "pools", "replicas"], rows)
              if rows else "no cluster has connected"]
    plan = st.get("plan")
    if plan:
        lines += ["", f"plan: {plan['status']} at t={plan['at']:g} ({plan['trigger']}), "
                      f"${plan['cost_per_hour_usd']:,.2f}/h, solved in {plan['solve_time_s']:g} s"]
        lines += [f"  {d}: " + ", ".join(f"{p} x{n}" for p, n in sorted(pools.items()))
                  for d, pools in sorted(plan["placement"].items())]
        lines += [f"  unplaced: {u['deployment']}/{u['client_region']} ({u['constraint']}): {u['reason']}"
                  for u in plan.get("unplaced", [])]
    else:
        lines += ["", "plan: none yet"]
    lines.append(f"open directives: {len(st.get('open_directives', []))}")
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    try:
        st = apply_cmd.connect(args).status()
    except admin_client.AdminError as exc:
        return apply_cmd.report_error(exc, args.output)
    output.emit(st, args.output, lambda: render(st))
    return 0
