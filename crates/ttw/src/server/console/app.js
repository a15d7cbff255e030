// The console's script: every page is read from this server's /v1 API
// with the operator's token, and every value goes into the page as text
// (textContent), never parsed as HTML. No framework, nothing fetched from
// elsewhere.
"use strict";

const session = { token: sessionStorage.getItem("ttw-token") || "", who: null, cursors: [] };
const $ = (id) => document.getElementById(id);
const view = $("view");

// --- small builders -------------------------------------------------------

function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k === "text") e.textContent = String(v);
    else if (k === "class") e.className = v;
    else if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
    else e.setAttribute(k, v === true ? "" : String(v));
  }
  for (const c of children) if (c !== null && c !== undefined) e.append(c);
  return e;
}

// Puts `nodes` (nulls left out) in the page's main part.
function show(...nodes) {
  view.replaceChildren(...nodes.filter((n) => n !== null && n !== undefined));
}

function cell(value, cls) {
  return el("td", { class: cls, text: value === null || value === undefined || value === "" ? "-" : value });
}

function table(id, headings, rows) {
  return el("table", { id },
    el("thead", {}, el("tr", {}, ...headings.map((h) => el("th", { text: h })))),
    el("tbody", {}, ...rows));
}

function span(ms) {
  if (ms === null || ms === undefined) return "-";
  if (ms < 1000) return ms + " ms";
  const s = Math.floor(ms / 1000);
  if (s < 120) return s + " s";
  const m = Math.floor(s / 60);
  if (m < 120) return m + " min " + (s % 60) + " s";
  return Math.floor(m / 60) + " h " + (m % 60) + " min";
}

function say(text, good) {
  const m = $("message");
  m.textContent = text;
  m.className = good ? "good" : "bad";
}

function can(scope) {
  const scopes = (session.who && session.who.scopes) || [];
  return scopes.includes("admin") || scopes.includes(scope);
}

// Asks before an action: the text says what will change; Confirm runs it.
function confirmThen(text, action) {
  const box = $("confirm");
  $("confirm-text").textContent = text;
  box.hidden = false;
  $("confirm-yes").onclick = async () => { box.hidden = true; await action(); };
  $("confirm-no").onclick = () => { box.hidden = true; say("nothing changed", true); };
}

// --- the API ---------------------------------------------------------------

async function api(method, path, body) {
  const headers = { Authorization: "Bearer " + session.token };
  if (body !== undefined) headers["Content-Type"] = "application/json";
  let res;
  try {
    res = await fetch(path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
  } catch (e) {
    throw new Error("the server did not answer: " + e.message);
  }
  const data = await res.json().catch(() => ({}));
  if (!res.ok) {
    const err = data.error || {};
    throw new Error((err.code || "HTTP " + res.status) + ": " + (err.message || res.statusText));
  }
  return data;
}

// Runs an action, says how it went, and draws the page again.
async function act(label, method, path, body) {
  try {
    const answer = await api(method, path, body);
    say(label + ": done " + JSON.stringify(answer), true);
  } catch (e) {
    say(label + ": " + e.message, false);
  }
  await route();
}

// --- pages -----------------------------------------------------------------

const FILTERS = ["state", "queue", "partition_key", "kind", "idempotency_key", "due_from", "due_before", "created_from", "created_before", "order"];

function params() {
  const hash = location.hash || "#/tasks";
  const at = hash.indexOf("?");
  return new URLSearchParams(at < 0 ? "" : hash.slice(at + 1));
}

async function tasksPage() {
  const p = params();
  const form = el("form", { id: "filters", class: "filters" });
  const state = el("select", { name: "state" }, ...["", "scheduled", "running", "done", "dead", "cancelled"]
    .map((s) => el("option", { value: s, text: s || "any state" })));
  state.value = p.get("state") || "";
  form.append(el("label", {}, "state", state));
  for (const name of FILTERS.slice(1, 9)) {
    const placeholder = name.includes("_from") || name.includes("_before") ? "2026-01-01T00:00:00Z" : "";
    form.append(el("label", {}, name.replace("_", " "), el("input", { name, value: p.get(name) || "", placeholder, size: name.includes("key") ? 16 : 20 })));
  }
  const order = el("select", { name: "order" }, el("option", { value: "desc", text: "newest first" }), el("option", { value: "asc", text: "oldest first" }),
    el("option", { value: "due", text: "due soonest first" }), el("option", { value: "due_desc", text: "due latest first" }));
  order.value = p.get("order") || "desc";
  // A due range reads best in due order (a keyset of the due index; in id
  // order the store sorts all it selects): typing one picks that order
  // unless the operator chose one.
  order.addEventListener("change", () => { order.dataset.chosen = "1"; });
  for (const name of ["due_from", "due_before"]) {
    form.elements[name].addEventListener("input", () => {
      if (!order.dataset.chosen && !order.value.startsWith("due")) order.value = "due";
    });
  }
  form.append(el("label", {}, "order", order), el("button", { id: "apply", type: "submit", text: "Apply" }));
  form.addEventListener("submit", (ev) => {
    ev.preventDefault();
    const q = new URLSearchParams();
    for (const name of FILTERS) {
      const v = form.elements[name].value.trim();
      if (v) q.set(name, v);
    }
    session.cursors = [];
    location.hash = "#/tasks?" + q.toString();
  });

  const search = el("form", { class: "filters", id: "find" },
    el("label", {}, "find a task by id or idempotency key", el("input", { id: "search", size: 30 })),
    el("button", { id: "go", type: "submit", text: "Open" }));
  search.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const text = $("search").value.trim();
    if (/^[0-9]+$/.test(text)) { location.hash = "#/task/" + text; return; }
    try {
      const task = await api("GET", "/v1/keys/" + encodeURIComponent(text));
      location.hash = "#/task/" + task.id;
    } catch (e) {
      say("find " + JSON.stringify(text) + ": " + e.message, false);
    }
  });

  const q = new URLSearchParams();
  for (const name of FILTERS) if (p.get(name)) q.set(name, p.get(name));
  if (!q.get("order")) q.set("order", "desc");
  const cursor = session.cursors[session.cursors.length - 1];
  if (cursor) q.set("cursor", cursor);
  q.set("limit", "50");
  const page = await api("GET", "/v1/tasks?" + q.toString());

  const rows = page.tasks.map((t) => el("tr", { "data-id": t.id },
    el("td", { class: "n" }, el("a", { href: "#/task/" + t.id, class: "task-link", text: t.id })),
    cell(t.queue), cell(t.kind, "kind"), cell(t.state, "state-" + t.state), cell(t.run_at, "due"), cell(t.attempts, "n"),
    cell(t.partition_key), cell(t.idempotency_key, "text"), cell(t.last_error, "text")));
  const paging = el("div", { class: "actions" },
    session.cursors.length ? el("button", { id: "first", type: "button", text: "First page", onclick: () => { session.cursors = []; route(); } }) : null,
    page.next_cursor ? el("button", { id: "next", type: "button", text: "Next page", onclick: () => { session.cursors.push(page.next_cursor); route(); } }) : null);

  const bulk = el("div", { class: "actions", id: "bulk" });
  if (can("admin")) {
    const selection = {};
    for (const name of FILTERS.slice(0, 9)) if (p.get(name)) selection[name] = p.get(name);
    const s = selection.state;
    if (!s || s === "scheduled") {
      bulk.append(el("button", { id: "bulk-cancel", type: "button", text: "Cancel every scheduled task that matches…", onclick: () => bulkAction("cancel", selection) }));
    }
    if (s === "dead" || s === "done" || s === "cancelled") {
      bulk.append(el("button", { id: "bulk-redrive", type: "button", text: "Redrive every task that matches…", onclick: () => bulkAction("redrive", selection) }));
    }
  }
  show(el("h2", { text: "Tasks" }), search, form, bulk,
    table("tasks", ["id", "queue", "kind", "state", "due", "attempts", "partition key", "idempotency key", "last error"], rows),
    page.tasks.length ? paging : el("p", { id: "empty", text: "No task matches." }));
}

// A bulk action: a dry run counts what it would change, the confirmation
// says how many, and only Confirm changes anything.
async function bulkAction(kind, selection) {
  const body = Object.assign({}, selection, { limit: 1000000 });
  if (kind === "cancel") delete body.order;
  let counted;
  try {
    const dry = await api("POST", "/v1/tasks/" + kind, Object.assign({}, body, { dry_run: true }));
    counted = kind === "cancel" ? dry.cancelled : dry.redriven;
  } catch (e) {
    say(kind + ": " + e.message, false);
    return;
  }
  const what = kind === "cancel" ? "Cancel" : "Redrive";
  confirmThen(what + " " + counted + " task" + (counted === 1 ? "" : "s") + "?", () => act(what + " " + counted, "POST", "/v1/tasks/" + kind, body));
}

function payloadView(task) {
  if (task.payload !== undefined && task.payload !== null) {
    return el("div", { id: "payload" }, el("p", { text: "JSON" }), tree(task.payload));
  }
  const bytes = Uint8Array.from(atob(task.payload_base64 || ""), (c) => c.charCodeAt(0));
  const hex = Array.from(bytes.slice(0, 4096), (b) => b.toString(16).padStart(2, "0")).join(" ");
  return el("div", { id: "payload" },
    el("p", { text: bytes.length + " bytes (not JSON)" }),
    el("p", {}, "base64: ", el("span", { class: "mono", id: "payload-base64", text: task.payload_base64 })),
    el("pre", { id: "payload-hex", text: hex + (bytes.length > 4096 ? " …" : "") }));
}

// JSON as a tree of lists: objects and arrays open and close.
function tree(value) {
  const list = el("ul", { class: "tree" });
  const entries = Array.isArray(value) ? value.map((v, i) => [i, v]) : Object.entries(value);
  if (value === null || typeof value !== "object") return el("ul", { class: "tree" }, leaf(null, value));
  for (const [k, v] of entries) {
    if (v !== null && typeof v === "object") {
      list.append(el("li", {}, el("details", { open: true },
        el("summary", {}, el("span", { class: "k", text: k }), Array.isArray(v) ? " [" + v.length + "]" : " {" + Object.keys(v).length + "}"),
        tree(v))));
    } else {
      list.append(leaf(k, v));
    }
  }
  return list;
}

function leaf(k, v) {
  const li = el("li", {});
  if (k !== null) li.append(el("span", { class: "k", text: k }), ": ");
  li.append(el("span", { class: typeof v === "string" ? "s" : "v", text: JSON.stringify(v) }));
  return li;
}

async function taskPage(id) {
  const task = await api("GET", "/v1/tasks/" + encodeURIComponent(id));
  let attempts = [];
  try {
    attempts = (await api("GET", "/v1/tasks/" + encodeURIComponent(id) + "/attempts")).attempts;
  } catch (e) {
    say("attempts: " + e.message, false);
  }
  const fields = el("dl", { class: "fields", id: "task" });
  const shown = ["id", "state", "queue", "kind", "run_at", "created_at", "updated_at", "finished_at", "attempts", "max_attempts",
    "priority", "partition_key", "idempotency_key", "last_error", "traceparent", "callback", "failure_callback", "outcome_of",
    "worker", "lease_until"];
  for (const name of shown) {
    fields.append(el("dt", { text: name.replace(/_/g, " ") }), el("dd", { id: "f-" + name, class: name === "state" ? "state-" + task.state : null, text: task[name] ?? "-" }));
  }
  if (task.target) fields.append(el("dt", { text: "target" }), el("dd", { id: "f-target", text: (task.target.method || "POST") + " " + task.target.url }));

  const actions = el("div", { class: "actions", id: "actions" });
  const path = "/v1/tasks/" + task.id;
  if (task.state === "scheduled" && can("schedule")) {
    actions.append(
      el("button", { id: "act-run-now", type: "button", text: "Run now", onclick: () => confirmThen("Run task " + task.id + " now?", () => act("run now", "POST", path + "/reschedule", { delay: "0s" })) }),
      el("button", { id: "act-cancel", type: "button", text: "Cancel", onclick: () => confirmThen("Cancel task " + task.id + "?", () => act("cancel", "DELETE", path)) }),
      el("input", { id: "reschedule-at", placeholder: "2026-01-01T10:00:00+01:00", size: 28 }),
      el("button", { id: "act-reschedule", type: "button", text: "Reschedule", onclick: () => {
        const at = $("reschedule-at").value.trim();
        confirmThen("Move task " + task.id + " to " + at + "?", () => act("reschedule", "POST", path + "/reschedule", { run_at: at }));
      } }));
  }
  if (task.state === "dead" && can("admin")) {
    actions.append(el("button", { id: "act-redrive", type: "button", text: "Redrive", onclick: () => confirmThen("Redrive task " + task.id + " (due now, attempts reset)?", () => act("redrive", "POST", path + "/redrive")) }));
  }
  const rows = attempts.map((a) => el("tr", {},
    cell(a.attempt, "n"), cell(a.outcome), cell(a.node), cell(a.started_at), cell(a.ended_at),
    cell(a.duration_ms === null || a.duration_ms === undefined ? null : a.duration_ms + " ms", "n"), cell(a.status, "n"), cell(a.detail, "text")));
  show(el("h2", { text: "Task " + task.id }), fields, actions,
    el("h2", { text: "Payload" }), payloadView(task),
    el("h2", { text: "Attempts" }),
    table("attempts", ["attempt", "outcome", "node", "started", "ended", "took", "status", "detail"], rows));
}

async function queuesPage() {
  const [list, counts] = await Promise.all([api("GET", "/v1/queues"), api("GET", "/v1/counts")]);
  const rows = list.queues.map((q) => {
    const c = counts.queues[q.queue] || {};
    // A large store's figure that is not exact: "≈" from the last full
    // count, "+" a floor before the first one.
    const figure = (state) => {
      const n = c[state] ?? 0;
      if (!(c.estimated || []).includes(state)) return n;
      return counts.counted_at ? "≈" + n : n + "+";
    };
    const rate = q.rate ? q.rate.count + " per " + span(q.rate.period_ms) + " (burst " + q.rate.burst + ")" : "-";
    const tr = el("tr", { "data-queue": q.queue },
      cell(q.queue), cell(q.paused ? "paused" : "running", q.paused ? "state-dead" : "state-done"),
      cell(figure("scheduled"), "n"), cell(figure("running"), "n"), cell(figure("done"), "n"), cell(figure("dead"), "n"), cell(figure("cancelled"), "n"),
      cell(c.late_ms === undefined ? "-" : span(c.late_ms), "n"),
      cell(c.done_per_s === undefined ? "-" : String(Number(c.done_per_s.toPrecision(2))), "n done-per-s"),
      cell(q.concurrency, "n"), cell(q.per_key_concurrency, "n"), cell(rate, "rate"));
    const td = el("td", {});
    if (can("admin")) {
      const name = encodeURIComponent(q.queue);
      td.append(q.paused
        ? el("button", { class: "resume", type: "button", text: "Resume", onclick: () => confirmThen("Resume queue " + q.queue + "?", () => act("resume " + q.queue, "POST", "/v1/queues/" + name + "/resume")) })
        : el("button", { class: "pause", type: "button", text: "Pause", onclick: () => confirmThen("Pause queue " + q.queue + "? No node starts its tasks until it is resumed.", () => act("pause " + q.queue, "POST", "/v1/queues/" + name + "/pause")) }),
        el("button", { class: "edit-limits", type: "button", text: "Limits…", onclick: () => tr.after(limitsForm(q)) }));
    }
    tr.append(td);
    return tr;
  });
  show(el("h2", { text: "Queues" }),
    table("queues", ["queue", "", "scheduled", "running", "done", "dead", "cancelled", "oldest due, late by", "done/s (last minute)", "concurrency", "per key", "rate", ""], rows),
    counts.counted_at
      ? el("p", { id: "counted-at", text: "A large store: figures marked ≈ are from the full count of " + counts.counted_at + " (counted again in the background); the others are exact now." })
      : Object.values(counts.queues).some((c) => (c.estimated || []).length)
        ? el("p", { id: "counted-at", text: "A large store: figures marked + are at least that many; the full count is running." })
        : null,
    el("p", { text: "Throughput and lateness over time: see Charts." }),
    ...(await Promise.all(list.queues.filter((q) => q.pull).map(workersOf))));
}

// The workers that claimed from a pull queue in the last day, and what
// each holds now.
async function workersOf(q) {
  let workers = [];
  try {
    workers = (await api("GET", "/v1/queues/" + encodeURIComponent(q.queue) + "/workers")).workers;
  } catch (e) {
    say("workers of " + q.queue + ": " + e.message, false);
  }
  const rows = workers.map((w) => el("tr", { "data-worker": w.worker }, cell(w.worker), cell(w.last_seen, "due"), cell(String(w.held), "n")));
  const section = el("section", { class: "workers", "data-queue": q.queue },
    el("h3", { text: "Workers of " + q.queue + " (a pull queue)" }),
    rows.length ? table("workers-" + q.queue, ["worker", "last seen", "holds"], rows) : el("p", { text: "No worker has claimed from it in the last day." }));
  return section;
}

// The limits of a queue, edited in place: an empty field clears its limit.
function limitsForm(q) {
  const input = (name, value, size) => el("input", { name, value: value ?? "", size: size || 6 });
  const form = el("form", { class: "filters limits", "data-queue": q.queue },
    el("label", {}, "concurrency", input("concurrency", q.concurrency)),
    el("label", {}, "per key", input("per_key_concurrency", q.per_key_concurrency)),
    el("label", {}, "rate: starts", input("rate_count", q.rate && q.rate.count)),
    el("label", {}, "per", input("rate_per", q.rate && span(q.rate.period_ms).replace(" ", ""), 8)),
    el("button", { class: "save-limits", type: "submit", text: "Save limits" }));
  form.addEventListener("submit", (ev) => {
    ev.preventDefault();
    const number = (name) => { const v = form.elements[name].value.trim(); return v ? Number(v) : undefined; };
    const body = { concurrency: number("concurrency"), per_key_concurrency: number("per_key_concurrency") };
    if (number("rate_count")) body.rate = { count: number("rate_count"), per: form.elements.rate_per.value.trim() || "1s" };
    confirmThen("Set the limits of " + q.queue + " to " + JSON.stringify(body) + "?", () => act("limits of " + q.queue, "PUT", "/v1/queues/" + encodeURIComponent(q.queue) + "/limits", body));
  });
  return el("tr", {}, el("td", { colspan: 12 }, form));
}

async function recurringPage() {
  const list = await api("GET", "/v1/recurring");
  const rows = list.recurring.map((r) => {
    const path = "/v1/recurring/" + encodeURIComponent(r.name);
    const td = el("td", {});
    if (can("schedule")) {
      td.append(r.paused
        ? el("button", { class: "resume", type: "button", text: "Resume", onclick: () => confirmThen("Resume " + r.name + "?", () => act("resume " + r.name, "POST", path + "/resume")) })
        : el("button", { class: "pause", type: "button", text: "Pause", onclick: () => confirmThen("Pause " + r.name + "?", () => act("pause " + r.name, "POST", path + "/pause")) }),
        el("button", { class: "delete", type: "button", text: "Delete", onclick: () => confirmThen("Delete the schedule " + r.name + "? Tasks it made stay.", () => act("delete " + r.name, "DELETE", path)) }));
    }
    return el("tr", { "data-name": r.name }, cell(r.name),
      cell(r.cron ? r.cron + (r.time_zone ? " (" + r.time_zone + ")" : " (UTC)") : "every " + r.every, "mono"),
      cell(r.paused ? "paused" : "active"), cell(r.queue), cell(r.catch_up),
      el("td", { class: "mono" }, ...(r.next || []).map((t) => el("div", { text: t }))), td);
  });
  show(el("h2", { text: "Recurring schedules" }),
    table("recurring", ["name", "rule", "", "queue", "catch up", "next occurrences", ""], rows));
}

async function nodesPage() {
  const [nodes, stats] = await Promise.all([api("GET", "/v1/nodes"), api("GET", "/v1/stats")]);
  const rows = nodes.nodes.map((n) => el("tr", { "data-node": n.node_id },
    cell(n.node_id), cell(n.queues.join(", ")), cell(span(n.heartbeat_ago_ms) + " ago"), cell(n.leases, "n"),
    cell(n.takeovers, "n takeovers"), cell(n.lease_expires_at), cell(!n.live ? "expired" : n.leaving ? "leaving" : "live")));
  const t = stats.totals;
  show(el("h2", { text: "Nodes and the shards they hold" }),
    table("nodes", ["node", "queues", "heartbeat", "leases", "took over", "leases expire", "state"], rows),
    el("h2", { text: "This node" + (stats.node_id ? " (" + stats.node_id + ")" : " (no scheduler in this instance)") }),
    table("node-totals", ["delivered", "succeeded", "failed", "retried", "dead", "reclaimed", "takeovers", "shards owned", "in flight"],
      [el("tr", {}, ...[t.delivered, t.succeeded, t.failed, t.retried, t.dead, t.reclaimed, t.lease_takeovers, t.shards_owned, t.in_flight].map((v) => cell(v, "n")))]));
}

// A line chart in SVG: one polyline per series, a value axis and a time
// axis, drawn with attributes only (the page allows no inline style).
function chart(id, points, series, scale) {
  const W = 720, H = 200, L = 56, B = 24;
  const NS = "http://www.w3.org/2000/svg";
  const svg = document.createElementNS(NS, "svg");
  svg.setAttribute("id", id);
  svg.setAttribute("class", "chart");
  svg.setAttribute("width", W);
  svg.setAttribute("height", H);
  const text = (x, y, s, anchor) => {
    const t = document.createElementNS(NS, "text");
    t.setAttribute("x", x); t.setAttribute("y", y); t.setAttribute("text-anchor", anchor || "start");
    t.textContent = s;
    svg.append(t);
  };
  const values = points.flatMap((p) => series.map((s) => p[s.key])).filter((v) => v !== null && v !== undefined);
  const max = Math.max(1, ...values);
  const y = (v) => H - B - (scale(v) / scale(max)) * (H - B - 10);
  const x = (i) => L + (points.length < 2 ? 0 : (i / (points.length - 1)) * (W - L - 10));
  const axis = document.createElementNS(NS, "polyline");
  axis.setAttribute("points", L + ",10 " + L + "," + (H - B) + " " + (W - 10) + "," + (H - B));
  axis.setAttribute("stroke", "#99a");
  svg.append(axis);
  text(L - 4, 16, series.unit(max), "end");
  text(L - 4, H - B, series.unit(0), "end");
  if (points.length) {
    text(L, H - 6, points[0].at.slice(11, 19));
    text(W - 10, H - 6, points[points.length - 1].at.slice(11, 19), "end");
  }
  for (const s of series) {
    const line = document.createElementNS(NS, "polyline");
    line.setAttribute("class", "series-" + s.key + " " + s.cls);
    line.setAttribute("points", points.map((p, i) => p[s.key] === null || p[s.key] === undefined ? null : x(i) + "," + y(p[s.key]))
      .filter((v) => v).join(" "));
    svg.append(line);
  }
  return svg;
}

function legend(series) {
  return el("p", { class: "legend" }, ...series.map((s) => el("span", { class: s.cls, text: "■ " + s.label })));
}

async function chartsPage() {
  const stats = await api("GET", "/v1/stats");
  const points = stats.points;
  const rates = [
    { key: "done_per_s", cls: "done", label: "done per second" },
    { key: "failed_per_s", cls: "failed", label: "failed per second" },
    { key: "retried_per_s", cls: "retried", label: "retried per second" },
  ];
  rates.unit = (v) => String(Math.round(v * 100) / 100) + "/s";
  const late = [
    { key: "lateness_p50_ms", cls: "p50", label: "p50" },
    { key: "lateness_p90_ms", cls: "p90", label: "p90" },
    { key: "lateness_p99_ms", cls: "p99", label: "p99" },
  ];
  late.unit = (v) => span(v);
  const last = points[points.length - 1];
  show(
    el("h2", { text: "Throughput, the last hour" + (stats.node_id ? " (node " + stats.node_id + ")" : "") }),
    points.length ? null : el("p", { id: "no-points", text: "No samples yet: one every " + span(stats.every_ms) + "." }),
    chart("throughput", points, rates, (v) => v), legend(rates),
    el("h2", { text: "Lateness of deliveries (start after due time), log scale" }),
    chart("lateness", points, late, (v) => Math.log10(1 + v)), legend(late),
    el("p", { id: "latest", text: last ? "last " + span(stats.every_ms) + ": " + last.done_per_s + " done/s, " + last.failed_per_s + " failed/s, " +
      last.retried_per_s + " retried/s, p99 " + span(last.lateness_p99_ms) : "" }));
}

// --- routing ---------------------------------------------------------------

const PAGES = { tasks: tasksPage, task: taskPage, queues: queuesPage, recurring: recurringPage, nodes: nodesPage, charts: chartsPage };

async function route() {
  const hash = (location.hash || "#/tasks").slice(2);
  const [path] = hash.split("?");
  const [page, arg] = path.split("/");
  const render = PAGES[page] || tasksPage;
  for (const a of document.querySelectorAll("nav a")) a.classList.toggle("here", a.getAttribute("href") === "#/" + (page === "task" ? "tasks" : page));
  if (!session.who) return;
  document.body.dataset.page = page in PAGES ? page : "tasks";
  try {
    await render(arg && decodeURIComponent(arg));
  } catch (e) {
    view.replaceChildren(el("p", { id: "error", class: "state-dead", text: e.message }));
  }
  document.body.dataset.loaded = String(Number(document.body.dataset.loaded) + 1);
}

async function login() {
  session.who = null;
  if (!session.token) return;
  try {
    session.who = await api("GET", "/v1/whoami");
    $("who").textContent = session.who.name + " · " + session.who.scopes.join(", ");
  } catch (e) {
    $("who").textContent = "";
    view.replaceChildren(el("p", { text: "Type a token with the read scope (admin for actions), then Use." }));
    say("the token was refused: " + e.message, false);
    document.body.dataset.page = "refused";
    return;
  }
  await route();
}

$("token").value = session.token;
$("login").addEventListener("submit", (ev) => {
  ev.preventDefault();
  session.token = $("token").value.trim();
  sessionStorage.setItem("ttw-token", session.token);
  say("", true);
  login();
});
window.addEventListener("hashchange", () => { $("confirm").hidden = true; route(); });
login();
