"""A bill as a JSON document: what ``GET /v1/cost`` answers, ``meridian cost -o json`` prints, the demo
reads and the simulator's JSON carries. docs/scheduler.md lists every field.

Two kinds, one shape: ``now`` (a bill of the moment; amounts in $/h, tokens per second) and
``window`` (a bill over a window; amounts in $ and, beside them, the window's mean per hour as
``*_usd_per_hour``; tokens counted). In both, ``usd_per_hour`` = ``shares_usd_per_hour`` +
``idle_usd_per_hour``; the rows of ``by.<pool dimension>`` sum to the bill; the rows of
``by.<owner dimension>`` (model, deployment, team) sum to the shares, the idle part being nobody's."""

from __future__ import annotations

from collections.abc import Mapping

from meridian.cost import bill as bill_mod
from meridian.cost import window as window_mod

DIGITS = 6
RULE = ("node-hours x price as the clouds bill: every node running or provisioning at its pool's price (a reserved "
        "commitment's price up to its nodes, on demand beyond), idle GPUs included; a replica's share is the GPUs it "
        "holds x its pool's price per GPU; shares + idle = bill")


def _r(x: float) -> float:
    return round(float(x), DIGITS)


def per_million_tokens(usd: float, tokens: float) -> float | None:
    """$ per million tokens (None: no token served)."""
    return usd / tokens * 1e6 if tokens > 0 else None


def of_bill(b: bill_mod.Bill, *, at_s: float, tokens_per_s: Mapping[str, window_mod.Tokens] | None = None) -> dict:
    """The document of a bill of the moment, observed at ``at_s`` (Unix seconds)."""
    tokens = dict(tokens_per_s or {})
    pools = [{**_where(line.pool.where), "instance_type": line.pool.instance_type,
              "gpus_per_node": line.pool.gpus_per_node, "nodes": line.pool.nodes,
              "nodes_pending": line.pool.nodes_pending,
              "price_per_node_hour_usd": _r(line.pool.price.per_node_hour_usd),
              "committed_nodes": line.pool.price.committed_nodes,
              "beyond_commitment_price_per_node_hour_usd": (
                  _r(line.pool.price.beyond_commitment_per_node_hour_usd)
                  if line.pool.price.committed_nodes is not None else None),
              "usd_per_hour": _r(line.usd), "usd_per_gpu_hour": _r(line.usd_per_gpu), "gpus": line.gpus,
              "gpus_held": line.gpus_held, "idle_gpus": line.idle_gpus, "idle_usd_per_hour": _r(line.idle_usd)}
             for line in b.pools]
    shares = [{**_owner(p.owner), **_where(p.where), "replicas": int(p.replicas), "gpus": int(p.gpus),
               "usd_per_hour": _r(p.usd)} for p in b.parts if p.owner is not None]
    usd_by_model = {r.key: r.shares_usd for r in bill_mod.group(b.parts, "model")}
    all_tokens = sum(t.total for t in tokens.values())
    return {
        "kind": "now", "at": at_s, "rule": RULE,
        "usd_per_hour": _r(b.usd), "shares_usd_per_hour": _r(b.shares_usd), "idle_usd_per_hour": _r(b.idle_usd),
        "nodes": b.nodes, "nodes_pending": sum(line.pool.nodes_pending for line in b.pools), "gpus": b.gpus,
        "gpus_held": b.gpus_held, "idle_gpus": sum(line.idle_gpus for line in b.pools),
        "pools": pools, "shares": shares,
        "by": {dim: [_row(r, None) for r in bill_mod.group(b.parts, dim)] for dim in bill_mod.DIMS},
        "tokens": {"per": "second", "models": {m: _tokens(t) for m, t in sorted(tokens.items())}},
        "per_million_tokens": {
            "models": [{"model": m, "usd_per_hour": _r(usd), "tokens_per_s": _r(tokens[m].total if m in tokens else 0),
                        "usd_per_million_tokens": _opt(per_million_tokens(usd, 3600 * (tokens[m].total
                                                                                       if m in tokens else 0)))}
                       for m, usd in sorted(usd_by_model.items())],
            "fleet": {"usd_per_hour": _r(b.usd), "tokens_per_s": _r(all_tokens),
                      "usd_per_million_tokens": _opt(per_million_tokens(b.usd, 3600 * all_tokens))}},
        "unpriced_replicas": sorted(r.replica_id for r in b.unpriced),
    }


def of_window(w: window_mod.Window) -> dict:
    """The document of a bill over a window."""
    hours = w.hours

    def mean(usd: float) -> float:
        return _r(usd / hours) if hours > 0 else 0.0

    pools = [{**_where(p.where), "node_hours": _r(p.node_hours), "gpu_hours": _r(p.gpu_hours),
              "held_gpu_hours": _r(p.held_gpu_hours), "usd": _r(p.usd), "idle_usd": _r(p.idle_usd),
              "usd_per_hour": mean(p.usd), "idle_usd_per_hour": mean(p.idle_usd)} for p in w.pools]
    shares = [{**_owner(p.owner), **_where(p.where), "replica_hours": _r(p.replicas), "gpu_hours": _r(p.gpus),
               "usd": _r(p.usd), "usd_per_hour": mean(p.usd)} for p in w.parts if p.owner is not None]
    usd_by_model = {r.key: r.shares_usd for r in bill_mod.group(w.parts, "model")}
    all_tokens = sum(t.total for t in w.tokens.values())
    return {
        "kind": "window", "start": w.start_s, "end": w.end_s, "hours": _r(hours), "rule": RULE,
        "usd": _r(w.usd), "shares_usd": _r(w.shares_usd), "idle_usd": _r(w.idle_usd),
        "usd_per_hour": mean(w.usd), "shares_usd_per_hour": mean(w.shares_usd), "idle_usd_per_hour": mean(w.idle_usd),
        "node_hours": _r(sum(p.node_hours for p in w.pools)), "gpu_hours": _r(sum(p.gpu_hours for p in w.pools)),
        "held_gpu_hours": _r(sum(p.held_gpu_hours for p in w.pools)),
        "pools": pools, "shares": shares,
        "by": {dim: [_row(r, hours) for r in bill_mod.group(w.parts, dim)] for dim in bill_mod.DIMS},
        "tokens": {"per": "window", "models": {m: _tokens(t) for m, t in sorted(w.tokens.items())}},
        "per_million_tokens": {
            "models": [{"model": m, "usd": _r(usd), "usd_per_hour": mean(usd),
                        "tokens": _r(w.tokens[m].total if m in w.tokens else 0),
                        "usd_per_million_tokens": _opt(per_million_tokens(usd, w.tokens[m].total
                                                                          if m in w.tokens else 0))}
                       for m, usd in sorted(usd_by_model.items())],
            "fleet": {"usd": _r(w.usd), "usd_per_hour": mean(w.usd), "tokens": _r(all_tokens),
                      "usd_per_million_tokens": _opt(per_million_tokens(w.usd, all_tokens))}},
    }


def _where(w: bill_mod.Where) -> dict:
    return {"cluster": w.cluster, "pool": w.pool, "cloud": w.cloud, "region": w.region, "tier": w.tier,
            "gpu_type": w.gpu_type}


def _owner(o: bill_mod.Owner) -> dict:
    return {"model": o.model, "deployment": o.deployment, "team": o.team}


def _tokens(t: window_mod.Tokens) -> dict:
    return {"prompt": _r(t.prompt), "completion": _r(t.completion), "total": _r(t.total)}


def _opt(x: float | None) -> float | None:
    return None if x is None else _r(x)


def _row(r: bill_mod.Row, hours: float | None) -> dict:
    """A grouped row: in $/h for a bill of the moment; for a window, $ and the window's mean $/h."""
    if hours is None:
        return {"key": r.key, "usd_per_hour": _r(r.usd), "shares_usd_per_hour": _r(r.shares_usd),
                "idle_usd_per_hour": _r(r.idle_usd), "replicas": _r(r.replicas), "gpus": _r(r.gpus),
                "idle_gpus": _r(r.idle_gpus)}
    per = (lambda x: _r(x / hours)) if hours > 0 else (lambda x: 0.0)
    return {"key": r.key, "usd": _r(r.usd), "shares_usd": _r(r.shares_usd), "idle_usd": _r(r.idle_usd),
            "usd_per_hour": per(r.usd), "shares_usd_per_hour": per(r.shares_usd), "idle_usd_per_hour": per(r.idle_usd),
            "replica_hours": _r(r.replicas), "gpu_hours": _r(r.gpus), "idle_gpu_hours": _r(r.idle_gpus)}
