// The dashboard's script. Every value from the store goes into the page
// through textContent: a payload or an error is shown, never parsed.
"use strict";

const REFRESH_MS = 3000;
const tokenInput = document.getElementById("token");
tokenInput.value = sessionStorage.getItem("ttw-token") || "";
tokenInput.addEventListener("input", () => sessionStorage.setItem("ttw-token", tokenInput.value));

function cell(text, cls) {
  const td = document.createElement("td");
  td.textContent = text === null || text === undefined ? "-" : String(text);
  if (cls) td.className = cls;
  return td;
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

function fill(id, rows) {
  const body = document.querySelector("#" + id + " tbody");
  body.replaceChildren(...rows);
}

function row(cells) {
  const tr = document.createElement("tr");
  tr.append(...cells);
  return tr;
}

function button(label, path, id) {
  const td = document.createElement("td");
  const b = document.createElement("button");
  b.textContent = label;
  b.dataset.task = String(id);
  b.className = label;
  b.addEventListener("click", () => act(path, id, label));
  td.append(b);
  return td;
}

function say(text, good) {
  const m = document.getElementById("message");
  m.textContent = text;
  m.className = good ? "good" : "bad";
}

async function act(path, id, label) {
  const headers = {};
  if (tokenInput.value) headers["Authorization"] = "Bearer " + tokenInput.value;
  try {
    const res = await fetch("/api/tasks/" + encodeURIComponent(id) + "/" + path, { method: "POST", headers });
    const body = await res.json().catch(() => ({}));
    if (res.ok) {
      say(label + " task " + id + ": done", true);
    } else {
      say(label + " task " + id + ": " + (body.error || ("HTTP " + res.status)), false);
    }
  } catch (e) {
    say(label + " task " + id + ": " + e, false);
  }
  refresh();
}

function bars(id, values, lateFirst) {
  const el = document.getElementById(id);
  const max = Math.max(1, ...values);
  el.replaceChildren(...values.map((v, i) => {
    const d = document.createElement("div");
    d.style.height = Math.round((v / max) * 76) + "px";
    d.title = String(v);
    if (lateFirst && i === 0) d.className = "late";
    return d;
  }));
  return max;
}

function render(o) {
  document.getElementById("meta").textContent =
    o.backend + " · read at " + o.now + " · refreshes every " + REFRESH_MS / 1000 + " s";
  fill("counts", o.queues.map(q => row([
    cell(q.queue), cell(q.scheduled, "n"), cell(q.running, "n"), cell(q.done, "n"),
    cell(q.dead, "n"), cell(q.cancelled, "n"), cell(span(q.late_ms), "n"), cell(q.flow),
  ])));
  const due = [o.timeline.overdue, ...o.timeline.counts];
  const dueMax = bars("timeline", due, true);
  document.getElementById("timeline-axis").textContent =
    "first bar (red): overdue " + o.timeline.overdue + " · tallest " + dueMax + " · now → +60 min";
  const late = o.lateness.map(s => s.late_ms);
  const lateMax = bars("lateness", late.length ? late : [0], false);
  document.getElementById("lateness-axis").textContent =
    late.length ? "now " + span(late[late.length - 1]) + " · worst " + span(lateMax) : "no samples yet";
  fill("dead", o.dead.map(t => row([
    cell(t.id, "n"), cell(t.queue), cell(t.attempts, "n"), cell(t.last_error, "text"),
    cell(t.payload, "text"), button("redrive", "redrive", t.id),
  ])));
  fill("soon", o.soon.map(t => row([
    cell(t.id, "n"), cell(t.queue), cell(t.run_at), cell(t.priority, "n"),
    cell(t.payload, "text"), button("cancel", "cancel", t.id),
  ])));
  fill("nodes", o.nodes.map(n => row([
    cell(n.node_id), cell(n.queues.join(", ")), cell(span(n.heartbeat_ago_ms) + " ago"),
    cell(n.leases, "n"), cell(span(n.lease_expires_in_ms)), cell(!n.live ? "expired" : n.leaving ? "leaving" : "live"),
  ])));
  document.body.dataset.loaded = String((Number(document.body.dataset.loaded) || 0) + 1);
}

async function refresh() {
  try {
    const res = await fetch("/api/overview");
    const o = await res.json();
    if (!res.ok) throw new Error(o.error || ("HTTP " + res.status));
    render(o);
  } catch (e) {
    document.getElementById("meta").textContent = "cannot read the store: " + e;
  }
}

refresh();
setInterval(refresh, REFRESH_MS);
