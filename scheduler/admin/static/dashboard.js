// Meridian's web dashboard (served by the scheduler's admin API: scheduler/admin/dashboard.py).
// It polls the admin API with a bearer token and shows what the API answers; it computes no
// figure itself (the bill is GET /v1/cost's, the SLA the deployments' "sla", the events
// GET /v1/events'). Every value is written with textContent: nothing the API says is parsed as HTML.
"use strict";

const POLL_MS = 3000;
const TOKEN_KEY = "meridian.admin.token";
const MAX_EVENTS_SHOWN = 50;
let token = null;
let timer = null;
let events = [];      // newest last, at most MAX_EVENTS_SHOWN
let lastSeq = 0;

// ------------------------------------------------------------------ token

function takeToken() {
  // #token=... in the address: kept in this tab's sessionStorage, then removed from the address
  // bar and the history entry (a fragment never reaches the server; this keeps it off screens too).
  const m = /(?:^#|&)token=([^&]*)/.exec(location.hash);
  if (m) {
    const given = decodeURIComponent(m[1]);
    if (given) sessionStorage.setItem(TOKEN_KEY, given);
    history.replaceState(null, "", location.pathname + location.search);
  }
  return sessionStorage.getItem(TOKEN_KEY);
}

function askToken(why) {
  token = null;
  sessionStorage.removeItem(TOKEN_KEY);
  if (timer !== null) { clearTimeout(timer); timer = null; }
  document.getElementById("token-why").textContent = why;
  document.getElementById("token-form").hidden = false;
  document.getElementById("main").hidden = true;
  document.getElementById("forget").hidden = true;
}

class Unauthorized extends Error {}

async function api(path) {
  let resp;
  try {
    resp = await fetch(path, { headers: { Authorization: "Bearer " + token }, cache: "no-store",
                               credentials: "omit", referrerPolicy: "no-referrer" });
  } catch (err) {
    throw new Error(`GET ${path}: the scheduler cannot be reached (${err.message})`);
  }
  if (resp.status === 401) throw new Unauthorized(`GET ${path}: 401`);
  let body = null;
  try { body = await resp.json(); } catch (err) { body = null; }
  if (!resp.ok) {
    const detail = body && body.error ? body.error : resp.statusText;
    throw new Error(`GET ${path}: ${resp.status} ${detail}`);
  }
  return body;
}

// ------------------------------------------------------------------ DOM helpers

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null) continue;
    if (k === "class") node.className = v; else node.setAttribute(k, v);
  }
  for (const c of children) {
    if (c === null || c === undefined) continue;
    node.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return node;
}

function table(headers, rows, attrs) {
  const head = el("tr", {}, ...headers.map(h => el("th", { class: h.endsWith("#") ? "num" : "" },
                                                     h.replace(/#$/, ""))));
  return el("table", attrs || {}, el("thead", {}, head), el("tbody", {}, ...rows));
}

function td(value, cls) { return el("td", { class: cls || "" }, value === null || value === undefined ? "-" : value); }
function num(value) { return td(value, "num"); }
function usd(x) { return x === null || x === undefined ? "-" : "$" + Number(x).toFixed(2); }
function ms(x) { return x === null || x === undefined ? "-" : Number(x).toFixed(0) + " ms"; }
function when(unixS) { return new Date(unixS * 1000).toLocaleTimeString(); }
function replace(id, ...nodes) { document.getElementById(id).replaceChildren(...nodes); }

// ------------------------------------------------------------------ sections

function renderClusters(status) {
  const byCloud = new Map();
  for (const c of status.clusters || []) {
    if (!byCloud.has(c.cloud)) byCloud.set(c.cloud, []);
    byCloud.get(c.cloud).push(c);
  }
  const clouds = [...byCloud.keys()].sort();
  if (!clouds.length) return replace("clusters", el("p", { class: "muted" }, "no agent has connected"));
  replace("clusters", ...clouds.map(cloud => el("div", { class: "cloud", "data-cloud": cloud },
    el("h3", {}, cloud),
    ...byCloud.get(cloud).map(c => {
      const health = c.lost ? "lost" : c.connected ? "connected" : "disconnected";
      const ready = (c.replicas || {}).ready || 0;
      const pools = (c.pool_details || []).map(p => {
        const total = p.nodes_current * p.gpus_per_node;
        return el("tr", {}, td(p.gpu_type), td(p.tier), num(`${total - p.gpus_free}/${total}`), num(p.gpus_free),
                  td(p.provisioning_state));
      });
      return el("div", { class: `cluster ${c.lost ? "lost" : ""}`, "data-testid": "cluster",
                         "data-cluster": c.cluster_id },
        el("div", {}, el("strong", {}, c.cluster_id), ` ${c.region} · `,
           el("span", { class: `state-${health}` }, health), ` · ${ready} ready replica(s)`),
        pools.length ? table(["GPU", "tier", "used/total#", "free#", "pool"], pools)
                     : el("p", { class: "muted" }, "no GPU pool reported"));
    }))));
}

function renderReplicas(status) {
  const byModel = new Map();
  for (const c of status.clusters || []) {
    if (c.lost) continue;
    for (const r of c.replica_details || []) {
      if (!byModel.has(r.deployment)) byModel.set(r.deployment, []);
      byModel.get(r.deployment).push([c, r]);
    }
  }
  const models = [...byModel.keys()].sort();
  if (!models.length) return replace("replicas", el("p", { class: "muted" }, "no replica is reported"));
  replace("replicas", ...models.map(model => {
    const rows = byModel.get(model);
    const ready = rows.filter(([, r]) => r.state === "ready").length;
    return el("div", { "data-testid": "model", "data-model": model },
      el("h3", {}, model, " ", el("span", { class: "muted", "data-testid": "model-count" },
                                  `${ready} ready of ${rows.length}`)),
      table(["replica", "cluster", "region", "state", "GPUs#", "running#", "queued#", "TTFT p99#", "revision"],
            rows.map(([c, r]) => el("tr", { "data-testid": "replica", "data-replica": r.replica_id,
                                            "data-state": r.state },
              td(r.replica_id), td(c.cluster_id), td(c.region), td(r.state, `state-${r.state}`), num(r.gpu_count),
              num(r.running), num(r.queued), num(ms(r.ttft_p99_ms)), td(r.revision)))));
  }));
}

function renderSla(items) {
  const withSla = items.filter(i => i.sla && i.sla.regions);
  if (!withSla.length) return replace("sla", el("p", { class: "muted" }, "no deployment reports an SLA"));
  replace("sla", ...withSla.map(item => {
    const s = item.sla;
    return el("div", { "data-testid": "sla-deployment", "data-deployment": s.deployment },
      el("h3", {}, s.deployment, " ",
         el("span", { class: "muted" }, `TTFT p99 ${ms(s.ttft_p99_ms)}, max RTT ${ms(s.max_rtt_ms)} (basis: ${s.basis})`)),
      table(["client region", "status", "req/s#", "expected TTFT#", "measured TTFT#", "nearest replica", "why"],
            s.regions.map(r => {
              const near = (r.covered_by || [])[0];
              return el("tr", { "data-testid": "sla-region", "data-region": r.client_region },
                td(r.client_region), td(r.status + (r.cause ? ` (${r.cause})` : ""), `sla-${r.status}`),
                num(r.traffic_rps), num(ms(r.expected_ttft_p99_ms)), num(ms(r.measured_ttft_p99_ms)),
                td(near ? `${near.replica} (${near.cluster}, ${near.region}, ${ms(near.rtt_ms)})` : null),
                td(r.reason || ""));
            })));
  }));
}

function renderPlan(status) {
  const plan = status.plan;
  if (!plan) return replace("plan", el("p", { class: "muted" }, status.leader ? "no plan yet"
                                                                                 : "this node stands by: the leader plans"));
  const rows = [];
  for (const [deployment, pools] of Object.entries(plan.placement || {}).sort()) {
    for (const [pool, n] of Object.entries(pools).sort()) rows.push(el("tr", {}, td(deployment), td(pool), num(n)));
  }
  const gaps = [...(plan.uncovered || []).map(u => el("li", {}, `${u.deployment} / ${u.client_region} uncovered ` +
                                                               `(${u.constraint}): ${u.reason}`)),
                ...(plan.unplaced || []).map(u => el("li", {}, `${u.deployment} / ${u.client_region}: ${u.replicas} ` +
                                                             `replica(s) unplaced (${u.constraint}): ${u.reason}`))];
  replace("plan",
    el("p", {}, `plan ${plan.status} at ${when(plan.at)} (trigger: ${plan.trigger}); solved in ${plan.solve_time_s} s; ` +
                `routing table version ${status.routing_version}; ${(status.open_directives || []).length} open directive(s)`),
    table(["deployment", "pool", "replicas#"], rows, { "data-testid": "placement" }),
    gaps.length ? el("ul", {}, ...gaps) : el("p", { class: "muted" }, "every client region is covered"));
}

function renderBill(cost) {
  const now = cost.now || {};
  const floor = cost.floor || {};
  const floorText = floor.status === "ready" ? usd(floor.usd_per_hour) : `${floor.status}${floor.reason ? ": " + floor.reason : ""}`;
  const byModel = ((now.by || {}).model || []).map(r => el("tr", {}, td(r.key), num(usd(r.shares_usd_per_hour)),
                                                          num(r.replicas), num(r.gpus)));
  const byCloud = ((now.by || {}).cloud || []).map(r => el("tr", {}, td(r.key), num(usd(r.usd_per_hour)),
                                                          num(usd(r.idle_usd_per_hour)), num(r.idle_gpus)));
  const fleet = (now.per_million_tokens || {}).fleet || {};
  const lost = cost.unreachable || {};
  replace("bill",
    el("p", {},
       el("span", { class: "figure", "data-testid": "bill-total" }, `${usd(now.usd_per_hour)}/h`),
       `shares ${usd(now.shares_usd_per_hour)}/h + idle ${usd(now.idle_usd_per_hour)}/h; `,
       `cost floor `, el("span", { "data-testid": "bill-floor" }, floorText),
       `; ${fleet.usd_per_million_tokens === null || fleet.usd_per_million_tokens === undefined ? "-" :
            usd(fleet.usd_per_million_tokens)} per million tokens`),
    cost.note ? el("p", { class: "muted" }, cost.note) : null,
    (lost.clusters || []).length ? el("p", {}, `not in the bill (lost clusters ${lost.clusters.join(", ")}): ` +
                                                `${usd(lost.usd_per_hour)}/h as last reported`) : null,
    table(["model", "share $/h#", "replicas#", "GPUs#"], byModel),
    table(["cloud", "$/h#", "idle $/h#", "idle GPUs#"], byCloud),
    el("p", { class: "muted" }, `idle nodes are given back after ${cost.pool_scale_down_delay_s} s`));
}

function renderEvents(answer) {
  // A restarted scheduler numbers its events afresh: start over (the next poll asks from 0).
  const restarted = answer.last_seq < lastSeq;
  if (answer.dropped || restarted) events = [];
  events = events.concat(restarted ? [] : answer.events || []).slice(-MAX_EVENTS_SHOWN);
  lastSeq = restarted ? 0 : answer.last_seq;
  if (!events.length) return replace("events", el("p", { class: "muted" }, "no event since this scheduler leads"));
  replace("events", table(["time", "kind", "cluster", "subject", "message"],
    events.slice().reverse().map(e => el("tr", { "data-testid": "event", "data-kind": e.kind },
      td(when(e.at)), td(e.kind), td(e.cluster_id || "-"), td(e.subject || "-"), td(e.message)))));
}

// ------------------------------------------------------------------ polling

function banner(message) {
  const b = document.getElementById("banner");
  b.textContent = message;
  b.hidden = !message;
}

async function refresh() {
  try {
    const [status, cost, evs, list] = await Promise.all([
      api("/v1/status"), api("/v1/cost"), api(`/v1/events?after=${lastSeq}`), api("/v1/specs?kind=ModelDeployment")]);
    const items = await Promise.all((list.items || []).map(
      i => api(`/v1/specs/ModelDeployment/${encodeURIComponent(i.name)}`)));
    document.getElementById("leader").textContent =
      status.leader ? `leader ${status.scheduler_id}` : `standby ${status.scheduler_id}`;
    renderClusters(status);
    renderReplicas(status);
    renderSla(items);
    renderPlan(status);
    renderBill(cost);
    renderEvents(evs);
    document.getElementById("main").hidden = false;
    const t = document.getElementById("updated");
    t.textContent = new Date().toLocaleTimeString();
    t.setAttribute("datetime", new Date().toISOString());
    banner("");
  } catch (err) {
    if (err instanceof Unauthorized) {
      askToken("The scheduler refused this token (401). Enter a valid admin API token (any role).");
      return;
    }
    const last = document.getElementById("updated").textContent;
    const shown = last === "never" ? "No data yet" : `Showing data from ${last}`;
    banner(`The admin API failed: ${err.message}. ${shown}; retrying every ${POLL_MS / 1000} s.`);
  }
  timer = setTimeout(refresh, POLL_MS);
}

async function start() {
  document.getElementById("token-form").hidden = true;
  document.getElementById("forget").hidden = false;
  try {
    const who = await api("/v1/whoami");
    document.getElementById("who").textContent = `${who.name} (${who.role})`;
  } catch (err) {
    if (err instanceof Unauthorized) {
      askToken("The scheduler refused this token (401). Enter a valid admin API token (any role).");
      return;
    }
    banner(`The admin API failed: ${err.message}`);
  }
  refresh();
}

document.addEventListener("DOMContentLoaded", () => {
  document.getElementById("token-form").addEventListener("submit", ev => {
    ev.preventDefault();
    const input = document.getElementById("token-input");
    token = input.value.trim();
    input.value = "";
    if (!token) return;
    sessionStorage.setItem(TOKEN_KEY, token);
    start();
  });
  document.getElementById("forget").addEventListener("click", () => askToken("Token forgotten. Enter one to go on."));
  token = takeToken();
  if (token) start(); else askToken("An admin API bearer token is needed (any role; a viewer's suffices). " +
                                    "It is kept in this tab only and sent only to this scheduler.");
});
