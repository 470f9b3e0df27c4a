"""``meridian get [KIND [NAME]]``: list applied specs, or print one (YAML by default). A deployment's
rollout (strategy, step, replicas of each revision, since when, why it rolled back), the leader's
last autoscaler decision (replicas wanted, split by client region, why) and its SLA per client
region (covered by which replicas, expected and measured TTFT p99, why a region is unmet) follow its
YAML as comment lines, so the output still applies as is; ``-o json`` prints the whole item,
rollout, autoscaling and SLA included. ``-o yaml`` prints the documents as applied (re-appliable,
a named one with the same comment lines), ``-o text`` a table of the applied specs."""

from __future__ import annotations

import argparse
import datetime

import yaml

from meridian import tables
from meridian.cli import apply as apply_cmd
from meridian.cli import output
from scheduler.admin import client as admin_client


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("kind", nargs="?", help="ModelDeployment, CapacityPolicy, Cluster, LatencyMap (or "
                                               "deployment, policy, cluster, latencymap)")
    parser.add_argument("name", nargs="?")
    apply_cmd.add_connection_arguments(parser, default=None)


def run(args: argparse.Namespace) -> int:
    try:
        client = apply_cmd.connect(args)
        if args.name:
            item = client.get(args.kind, args.name)
            if args.output == "json":
                output.emit(item, "json", lambda: None)
            else:  # the document (re-appliable), its rollout, autoscaling and SLA as comments
                lines = (rollout_lines(item.get("rollout")) + autoscaling_lines(item.get("autoscaling"))
                         + sla_lines(item.get("sla")))
                comments = [f"# {line}" for line in lines]
                print(yaml.safe_dump(item["document"], sort_keys=False) + "\n".join(comments), end="\n" if comments else "")
            return 0
        result = client.list(args.kind)
    except admin_client.AdminError as exc:
        return apply_cmd.report_error(exc, args.output)
    if args.output == "json":
        output.emit(result, "json", lambda: None)
        return 0
    if args.output == "yaml":
        print(yaml.safe_dump_all([i["document"] for i in result["items"]], sort_keys=False), end="")
        return 0
    rows = []
    for i in result["items"]:
        when = datetime.datetime.fromtimestamp(i["updated_at"], datetime.UTC).strftime("%Y-%m-%d %H:%M:%S")
        rows.append((i["kind"], i["name"], str(i["generation"]), when, i.get("source", "")))
    tables.emit(tables.table(("KIND", "NAME", "GENERATION", "UPDATED", "SOURCE"), rows))
    return 0


def _when(unix_s: float | None) -> str:
    if unix_s is None:
        return "-"
    return datetime.datetime.fromtimestamp(unix_s, datetime.UTC).strftime("%Y-%m-%d %H:%M:%SZ")


def rollout_lines(ro: dict | None) -> list[str]:
    """A rollout status (``scheduler.rollout.view``) in a few lines of text."""
    if not ro:
        return []
    if "error" in ro:
        return [f"rollout: {ro['error']}"]
    if ro["phase"] == "complete":
        return [f"rollout: complete, revision {ro['revision']} serves ({ro['strategy']}; since {_when(ro['ended_at'])}"
                f": {ro['reason']})"]
    step = f"step {ro['step']}/{ro['steps']}"
    if ro["strategy"] == "blue_green":
        step += " (new set beside the old, out of traffic)" if ro["step"] == 1 else " (traffic switched)"
    else:
        step += f" ({ro['new_percent']}% new)"
    new, old = ro["new_replicas"], ro["old_replicas"]
    lines = [f"rollout: {ro['strategy']}, {ro['phase']}, {step}, started {_when(ro['started_at'])}, "
             f"this step since {_when(ro['step_started_at'])}",
             f"  new revision {ro['revision']}: {new['ready']} ready of {new['wanted']} wanted; old side: "
             f"{old['present']} present of {old['wanted']} wanted (stable revision {ro['stable_revision']})"]
    rate = "-" if ro["error_rate"] is None else f"{ro['error_rate']:.4f}"
    lines.append(f"  this step: {ro['observed_s']:g} of {ro['step_duration_s']:g} s observed healthy; "
                 f"{ro['requests']} requests, {ro['errors']} errors (error rate {rate}), "
                 f"TTFT p99 {ro['ttft_p99_ms']:g} ms")
    if ro["rolled_back"]:
        lines.append(f"  rolled back ({ro['rollback_reason']}) at {_when(ro['ended_at'])}: {ro['reason']}")
    return lines


def autoscaling_lines(a: dict | None) -> list[str]:
    """The leader's last autoscaler decision (``Decision.view``) in a line or two."""
    if not a:
        return []
    split = ", ".join(f"{region} {n}" for region, n in sorted(a["by_region"].items()) if n)
    head = f"autoscaler: {a['replicas']} replica{'' if a['replicas'] == 1 else 's'} wanted"
    head += f" ({split})" if split else ""
    if a["slo_breach"]:
        head += ", SLO breached"
    return [head] + ([f"  why: {a['reason']}"] if a["reason"] else [])


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:,.0f} ms" if value >= 10 else f"{value:.1f} ms"


def _queue(covered_by: list[dict]) -> str:
    """The nearest replica's queue wait in the expected TTFT, for an embedding model (0 otherwise)."""
    wait = covered_by[0].get("queue_wait_p99_ms") if covered_by else None
    return f" ({_ms(wait)} of it queue wait at capacity)" if wait else ""


def sla_lines(sla: dict | None) -> list[str]:
    """A deployment's SLA status (``scheduler.control.sla``) as text: one line per client region."""
    if not sla:
        return []
    if "error" in sla:
        return [f"sla: {sla['error']}"]
    targets = f"TTFT p99 {sla['ttft_p99_ms']:g} ms"
    if sla.get("tpot_p99_ms"):
        targets += f", TPOT p99 {sla['tpot_p99_ms']:g} ms"
    if sla.get("max_rtt_ms"):
        targets += f", max_rtt_ms {sla['max_rtt_ms']:g}"
    lines = [f"sla: {targets}, per client region (coverage: {sla['basis']}; measured: router reports):"]
    for r in sla["regions"]:
        head = f"  {r['client_region']}: {r['status'].upper() if r['status'] == 'unmet' else r['status']}"
        if r["cause"]:
            head += f" ({r['cause']})"
        by = ", ".join(f"{c['replica']} ({c['cluster']}, {c['region']}, {c['gpu_type']}, {c['rtt_ms']:g} ms"
                       + (", beyond max_rtt_ms" if c["beyond_max_rtt"] else "") + ")" for c in r["covered_by"][:3])
        more = f" +{len(r['covered_by']) - 3} more" if len(r["covered_by"]) > 3 else ""
        detail = [f"covered by {by}{more}" if by else "no replica within reach",
                  f"expected TTFT p99 {_ms(r['expected_ttft_p99_ms'])}" + _queue(r["covered_by"]),
                  f"measured {_ms(r['measured_ttft_p99_ms'])}",
                  f"{r['traffic_rps']:g} req/s" + (", always served" if r["always_served"] else "")]
        lines.append(f"{head}: " + "; ".join(detail))
        if r["reason"]:
            lines.append(f"    {r['reason']}")
    return lines
