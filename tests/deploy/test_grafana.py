"""deploy/grafana/meridian.json: a valid Grafana dashboard whose every panel has a title and the
Prometheus datasource variable, and whose every PromQL expression queries only metrics the code
exports: the scheduler's, router's, agent's (with its Kubernetes backend), runtime adapter's and
the SGLang emulator's registries, built in-process and collected here."""

from __future__ import annotations

import json
import pathlib
import re

import prometheus_client as prom
import pytest

from agents import metrics as agent_metrics
from agents.backends.kubernetes import ops as kube_ops
from agents.backends.kubernetes import watch as kube_watch
from meridian import capacity
from router import metrics as router_metrics
from router import table as router_table
from runtime_adapter import clock as adapter_clock
from runtime_adapter import metrics as adapter_metrics
from runtime_adapter.emulator import engine as emulator_engine
from runtime_adapter.emulator import metrics as emulator_metrics
from scheduler import metrics as scheduler_metrics

REPO = pathlib.Path(__file__).resolve().parents[2]
DASHBOARD = REPO / "deploy" / "grafana" / "meridian.json"
HISTOGRAM_SUFFIXES = ("_bucket", "_sum", "_count")
# Words of PromQL that are not metric names (functions are recognised by the "(" after them).
KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "bool", "and", "or", "unless",
            "offset", "inf", "nan"}


def exported() -> tuple[set[str], set[str]]:
    """(every sample name the components expose, the histogram family names) from real registries."""
    registries = [scheduler_metrics.SchedulerMetrics().registry, agent_metrics.AgentMetrics("c1").registry,
                  adapter_metrics.AdapterMetrics().registry]
    router = router_metrics.RouterMetrics()
    router.state_fn = lambda: router_table.RoutingState()  # the state gauges appear once a table is in use
    registries.append(router.registry)
    kube = prom.CollectorRegistry()
    kube_ops.PodOps(None, "c1", clock=lambda: 0.0, backoff=lambda: None, registry=kube)
    kube_watch.WatchMetrics("c1", kube)
    registries.append(kube)
    perf = capacity.replica_perf(capacity.KNOWN_ARCHITECTURES["meta-llama/Llama-3.1-8B-Instruct"], "L4", 1)
    engine = emulator_engine.Engine(perf, clock=adapter_clock.VirtualClock(), max_running_requests=8)
    registries.append(emulator_metrics.EmulatorMetrics(engine, "m", 4096).registry)
    names, histograms = set(), set()
    for registry in registries:
        for family in registry.collect():
            names.add(family.name)
            if family.type == "counter":
                names.add(family.name + "_total")
            if family.type == "histogram":
                histograms.add(family.name)
            names.update(s.name for s in family.samples)
    return names, histograms


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression selects: label matchers, strings, ranges, label lists
    of by/without/on/ignoring/group_*, functions and keywords taken out."""
    text = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)
    text = re.sub(r"\{[^}]*\}", " ", text)
    text = re.sub(r"\[[^\]]*\]", " ", text)
    text = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", text)
    out = set()
    for m in re.finditer(r"(?<![\w:.])([a-zA-Z_:][a-zA-Z0-9_:]*)(\s*\()?", text):
        word, call = m.group(1), m.group(2)
        if call or word.lower() in KEYWORDS:
            continue
        out.add(word)
    return out


def panels(dashboard: dict) -> list[dict]:
    """Every panel, rows' nested panels included."""
    out = []
    for p in dashboard["panels"]:
        out.append(p)
        out.extend(p.get("panels", []))
    return out


@pytest.fixture(scope="module")
def dashboard() -> dict:
    return json.loads(DASHBOARD.read_text())


def test_metric_name_extraction_handles_promql_forms():
    """The parser finds the metrics under rate(), sum by, histogram_quantile, on() and label matchers,
    and nothing else."""
    expr = ('histogram_quantile(0.99, sum by (le, region) (rate(a_seconds_bucket{code=~"5.."}[5m]))) '
            '/ on(instance) group_left(x) b_total * sglang:num_running_reqs offset 5m > bool 0')
    assert metric_names(expr) == {"a_seconds_bucket", "b_total", "sglang:num_running_reqs"}


def test_dashboard_is_valid_grafana_json_with_a_prometheus_datasource_variable(dashboard):
    """The file parses; it has a schema version, a unique uid, a datasource variable of type
    prometheus, and every panel a title, a unique id and that datasource."""
    assert dashboard["schemaVersion"] >= 36 and dashboard["uid"] and dashboard["title"]
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource" and variables["datasource"]["query"] == "prometheus"
    ids = [p["id"] for p in panels(dashboard)]
    assert len(ids) == len(set(ids)), "panel ids repeat"
    for p in panels(dashboard):
        assert p.get("title"), f"panel {p['id']} has no title"
        assert p.get("datasource") == {"type": "prometheus", "uid": "${datasource}"}, p["title"]
        if p["type"] != "row":
            assert p["targets"], f"panel {p['title']!r} queries nothing"
            for t in p["targets"]:
                assert t.get("datasource", p["datasource"])["uid"] == "${datasource}", p["title"]
                assert t["expr"].strip(), f"panel {p['title']!r} has an empty query"


def test_every_queried_metric_is_exported_by_the_code(dashboard):
    """Each metric name in each panel's PromQL is one a component's registry exposes (histogram
    series by their family); a missing one is named with its panel."""
    names, histograms = exported()
    missing, seen = [], set()
    for p in panels(dashboard):
        for t in p.get("targets", []):
            for name in metric_names(t["expr"]):
                base = next((name[:-len(s)] for s in HISTOGRAM_SUFFIXES
                             if name.endswith(s) and name[:-len(s)] in histograms), name)
                seen.add(base)
                if name not in names and base not in histograms:
                    missing.append(f"{name} (panel {p['title']!r})")
    assert not missing, "metrics the dashboard queries that no component exports: " + "; ".join(missing)
    # Every component is on the dashboard.
    for prefix in ("meridian_scheduler_", "meridian_router_", "meridian_agent_", "meridian_replica_", "sglang:"):
        assert any(n.startswith(prefix) for n in seen), f"no panel queries a {prefix}* metric"
