// The client against a real `ttw server` (the workspace's binary, or
// TTW_BIN): every call, its typed errors, its retries through a stopped
// server, the signature of a real delivery, and its generated types held
// equal to the server's document.
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { mkdtempSync, readdirSync, readFileSync, writeFileSync } from "node:fs";
import { createServer } from "node:http";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, test } from "node:test";
import { fileURLToPath } from "node:url";

import { ApiError, CODES, Client, ConnectionFailed, InvalidSignature, verifyWebhook } from "../dist/index.js";
import { startServer, ttwBinary } from "./server.mjs";

const here = fileURLToPath(new URL(".", import.meta.url));
const TOKEN = "client-test-token-0123456789";
const SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

/** Waits until every thread of `pid` is stopped: a stop signal reaches
 * each thread of a process in its own time. */
async function everyThreadStopped(pid) {
  for (let i = 0; i < 500; i++) {
    const states = readdirSync(`/proc/${pid}/task`).map(
      (t) => readFileSync(`/proc/${pid}/task/${t}/stat`, "utf8").split(") ")[1][0],
    );
    if (states.every((s) => s === "T" || s === "t")) return;
    await sleep(2);
  }
  assert.fail("the server did not stop");
}

const unique = (prefix) => `${prefix}-${Math.random().toString(16).slice(2, 14)}`;
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

let server;
let receiver;
const received = [];
const flaky = new Set();
let client;

before(async () => {
  receiver = createServer((req, res) => {
    const chunks = [];
    req.on("data", (c) => chunks.push(c));
    req.on("end", () => {
      received.push({ method: req.method, path: req.url, headers: req.headers, body: Buffer.concat(chunks) });
      // A flaky endpoint: busy the first time a path is called, then fine.
      if (req.url.startsWith("/dest/flaky/") && !flaky.has(req.url)) {
        flaky.add(req.url);
        res.writeHead(503, { "content-type": "text/plain" });
        res.end("busy, try later");
        return;
      }
      if (req.url.startsWith("/dest/flaky/")) {
        res.writeHead(200, { "content-type": "text/plain" });
        res.end("accepted");
        return;
      }
      // A refusing endpoint: gone for good (the task is dead).
      if (req.url.startsWith("/dest/refuse/")) {
        res.writeHead(410, { "content-type": "text/plain" });
        res.end("no such order");
        return;
      }
      res.writeHead(200, { "content-length": "0" });
      res.end();
    });
  });
  await new Promise((r) => receiver.listen(0, "127.0.0.1", r));
  const dir = mkdtempSync(join(tmpdir(), "ttw-ts-client-"));
  const config = join(dir, "ttw.toml");
  writeFileSync(
    config,
    `listen = "127.0.0.1:0"
database = "${dir}/tasks.db"

[[queues]]
name = "hooks"
webhook = { url = "http://127.0.0.1:${receiver.address().port}/hook", secret_env = "TTW_HOOK_SECRET" }

[[queues]]
name = "later"

[[queues]]
name = "work"
pull = true

[[tokens]]
name = "app"
secret_env = "TTW_TOKEN_APP"
scopes = ["schedule", "read", "admin", "consume"]
destinations = ["http://127.0.0.1:${receiver.address().port}/dest/"]
`,
  );
  server = await startServer(config, { TTW_TOKEN_APP: TOKEN, TTW_HOOK_SECRET: SECRET });
  client = new Client(server.url, TOKEN);
});

after(() => {
  server?.kill("SIGKILL");
  receiver?.close();
});

const scheduled = async (queue = "later") => (await client.counts()).queues[queue]?.scheduled ?? 0;

test("the generated types are the server's document", () => {
  const doc = execFileSync(ttwBinary(), ["server", "--openapi"]);
  execFileSync(process.execPath, [join(here, "..", "generate.mjs"), "--check"], { input: doc });
  assert.deepEqual([...CODES], JSON.parse(doc).components.schemas.Code.enum);
});

test("one task scheduled, read, moved and cancelled by id and by key", async () => {
  const key = unique("order");
  const at = new Date(Date.now() + 3_600_000);
  const made = await client.schedule({ payload: { order: 42 }, runAt: at, queue: "later", idempotencyKey: key, priority: 2 });
  assert.equal(made.outcome, "created");
  const again = await client.schedule({ payload: { order: 42 }, runAt: at, queue: "later", idempotencyKey: key });
  assert.deepEqual(again, { id: made.id, outcome: "existing" });
  const task = await client.get(made.id);
  assert.deepEqual([task.state, task.queue, task.priority, task.idempotency_key], ["scheduled", "later", 2, key]);
  assert.deepEqual(task.payload, { order: 42 });
  assert.equal(new Date(task.run_at).getTime(), at.getTime());
  assert.equal((await client.getByKey(key)).id, made.id);
  assert.equal((await client.reschedule(made.id, { delay: "2h" })).rescheduled, true);
  assert.ok(new Date((await client.get(made.id)).run_at).getTime() - Date.now() > 119 * 60_000);
  await client.rescheduleByKey(key, { runAt: at });
  assert.equal((await client.cancelByKey(key)).cancelled, true);
  assert.equal((await client.get(made.id)).state, "cancelled");
  await assert.rejects(client.cancel(made.id), (e) => e instanceof ApiError && e.is("not_scheduled"));
  const raw = await client.schedule({ payloadBytes: new Uint8Array([0, 255]), delay: 3_600_000, queue: "later" });
  assert.equal((await client.get(raw.id)).payload_base64, "AP8=");
  assert.equal((await client.cancel(raw.id)).cancelled, true);
});

test("a batch is listed back page by page", async () => {
  const before = await scheduled();
  const inputs = Array.from({ length: 250 }, (_, n) => ({ payload: { n }, delay: "1h", queue: "later", partitionKey: "tenant-a" }));
  const answers = (await client.scheduleMany(inputs)).tasks;
  assert.equal(answers.length, 250);
  assert.ok(answers.every((a) => a.outcome === "created"));
  assert.equal(await scheduled(), before + 250);
  const first = await client.page({ state: "scheduled", queue: "later", limit: 100 });
  assert.equal(first.tasks.length, 100);
  assert.ok(first.next_cursor);
  const ids = [];
  for await (const t of client.tasks({ state: "scheduled", queue: "later", limit: 100 })) ids.push(t.id);
  assert.ok(answers.every((a) => ids.includes(a.id)));
  assert.deepEqual(ids, [...ids].sort((a, b) => a - b));
});

test("tasks page in due order by their cursor", async () => {
  const key = `due-${Date.now()}`;
  const inputs = ["3h", "1h", "2h"].map((delay, n) => ({ payload: { n }, delay, queue: "later", partitionKey: key }));
  const ids = (await client.scheduleMany(inputs)).tasks.map((t) => t.id);
  const filter = { queue: "later", partitionKey: key, state: "scheduled", order: "due", limit: 2 };
  const first = await client.page(filter);
  assert.deepEqual(first.tasks.map((t) => t.id), [ids[1], ids[2]]);
  const rest = await client.page(filter, first.next_cursor);
  assert.deepEqual(rest.tasks.map((t) => t.id), [ids[0]]);
  const latest = [];
  for await (const t of client.tasks({ ...filter, order: "due_desc", limit: 1 })) latest.push(t.id);
  assert.deepEqual(latest, [ids[0], ids[2], ids[1]]);
  await assert.rejects(client.page({ queue: "later", order: "due" }, String(ids[0])), (e) => e.code === "invalid_cursor");
});

test("a filter chooses a page, a count and a bulk cancel alike", async () => {
  const key = `tenant-${Date.now()}`;
  const inputs = Array.from({ length: 4 }, (_, n) => ({ payload: { n }, delay: "2h", queue: "later", partitionKey: key }));
  const ids = (await client.scheduleMany(inputs)).tasks.map((t) => t.id);
  const newest = await client.page({ queue: "later", partitionKey: key, order: "desc" });
  assert.deepEqual(newest.tasks.map((t) => t.id), [...ids].reverse());
  assert.equal((await client.cancelMatching({ queue: "later", partitionKey: key, dryRun: true })).cancelled, 4);
  assert.equal((await client.page({ queue: "later", partitionKey: key, state: "scheduled" })).tasks.length, 4, "a dry run changes nothing");
  assert.deepEqual(await client.cancelMatching({ queue: "later", partitionKey: key, limit: 3 }), { cancelled: 3, dry_run: false });
  assert.equal((await client.redrive({ state: "cancelled", queue: "later", partitionKey: key, dryRun: true })).redriven, 3);
  assert.equal((await client.redrive({ state: "cancelled", queue: "later", partitionKey: key })).redriven, 3);
  assert.equal((await client.page({ queue: "later", partitionKey: key, state: "scheduled" })).tasks.length, 4);
  await assert.rejects(client.redriveTask(ids[0]), (e) => e instanceof ApiError && e.code === "not_dead");
  assert.ok(Array.isArray((await client.nodes()).nodes));
  assert.ok(Array.isArray((await client.stats()).points));
});

test("refusals carry their status and stable code", async () => {
  const code = async (promise) => {
    try {
      await promise;
    } catch (e) {
      assert.ok(e instanceof ApiError, String(e));
      return [e.status, e.code];
    }
    assert.fail("not refused");
  };
  assert.deepEqual(await code(client.get(999_999_999)), [404, "not_found"]);
  assert.deepEqual(await code(client.schedule({ payload: "x", queue: "no-such-queue" })), [400, "unknown_queue"]);
  assert.deepEqual(await code(client.schedule({ payload: "x", delay: "soonish", queue: "later" })), [400, "invalid_delay"]);
  assert.deepEqual(await code(client.schedule({ payload: "x", runAt: "tomorrow", queue: "later" })), [400, "invalid_time"]);
  assert.deepEqual(await code(new Client(server.url, "wrong-token-0123456789").counts()), [401, "unauthorized"]);
  assert.throws(() => client.schedule({ payload: "x", delay: 1, runAt: new Date() }), TypeError);
  await assert.rejects(new Client("http://127.0.0.1:1", TOKEN, { retries: 1, backoffMs: 10 }).counts(), ConnectionFailed);
});

test("recurring schedules and queues", async () => {
  const name = unique("nightly");
  const schedule = { cron: "0 3 * * *", time_zone: "Europe/Paris", payload: { job: "report" }, queue: "later" };
  assert.equal((await client.putRecurring(name, schedule)).outcome, "created");
  assert.equal((await client.putRecurring(name, schedule)).outcome, "unchanged");
  const listed = (await client.recurring()).find((r) => r.name === name);
  assert.equal(listed.cron, "0 3 * * *");
  assert.equal((await client.pauseRecurring(name)).paused, true);
  assert.equal((await client.resumeRecurring(name)).resumed, true);
  assert.equal((await client.deleteRecurring(name)).deleted, true);
  assert.ok(!(await client.recurring()).some((r) => r.name === name));
  assert.equal((await client.pauseQueue("later")).paused, true);
  assert.equal((await client.queue("later")).paused, true);
  assert.equal((await client.resumeQueue("later")).paused, false);
  const limited = await client.setLimits("later", { concurrency: 3, per_key_concurrency: 1, rate: { count: 10, per: "1s" } });
  assert.deepEqual([limited.concurrency, limited.per_key_concurrency], [3, 1]);
  assert.equal((await client.setRetry("later", { max_attempts: 4, backoff: { base: "1s", max: "1m" } })).max_attempts, 4);
  assert.ok((await client.queues()).some((q) => q.queue === "later"));
});

test("a delivery verifies with the queue's secret", async () => {
  const made = await client.schedule({ payload: { hello: "webhook" }, queue: "hooks" });
  let delivery;
  for (let i = 0; i < 600 && !delivery; i++) {
    delivery = received.find((r) => r.headers["ttw-task-id"] === String(made.id));
    if (!delivery) await sleep(50);
  }
  assert.ok(delivery, "delivered within 30 s");
  assert.equal(await verifyWebhook(SECRET, delivery.headers, delivery.body), delivery.headers["webhook-id"]);
  await assert.rejects(verifyWebhook(SECRET, delivery.headers, Buffer.concat([delivery.body, Buffer.from(" ")])), InvalidSignature);
  await assert.rejects(verifyWebhook(SECRET, delivery.headers, delivery.body, 300, Date.now() / 1000 + 3600), InvalidSignature);
  await assert.rejects(verifyWebhook("whsec_" + btoa("another secret, 24 bytes"), delivery.headers, delivery.body), InvalidSignature);
});

test("a task's own target and trace context go with its delivery", async () => {
  const base = `http://127.0.0.1:${receiver.address().port}`;
  const traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
  const made = await client.schedule({
    payload: { order: 7 },
    queue: "hooks",
    target: { url: `${base}/dest/orders/7`, method: "PUT", headers: { "x-tenant": "acme" } },
    traceparent,
    tracestate: "vendor=1",
  });
  const stored = await client.get(made.id);
  assert.equal(stored.target?.url, `${base}/dest/orders/7`);
  assert.equal(stored.traceparent, traceparent);
  let delivery;
  for (let i = 0; i < 600 && !delivery; i++) {
    delivery = received.find((r) => r.headers["ttw-task-id"] === String(made.id));
    if (!delivery) await sleep(50);
  }
  assert.ok(delivery, "delivered within 30 s");
  assert.deepEqual([delivery.method, delivery.path], ["PUT", "/dest/orders/7"]);
  assert.equal(delivery.headers["x-tenant"], "acme");
  assert.equal(delivery.headers.traceparent, traceparent);
  assert.equal(delivery.headers.tracestate, "vendor=1");
  assert.equal(await verifyWebhook(SECRET, delivery.headers, delivery.body), delivery.headers["webhook-id"]);
});

test("each attempt is kept with its status and the answer's first bytes", async () => {
  const base = `http://127.0.0.1:${receiver.address().port}`;
  const made = await client.schedule({ payload: { n: 1 }, queue: "hooks", target: { url: `${base}/dest/flaky/ts` } });
  let attempts = [];
  for (let i = 0; i < 600; i++) {
    attempts = (await client.attempts(made.id)).attempts;
    if (attempts.at(-1)?.outcome === "done") break;
    await sleep(50);
  }
  assert.equal(attempts.length, 2, JSON.stringify(attempts));
  const [first, second] = attempts;
  assert.deepEqual([first.attempt, first.outcome, first.status], [1, "failed", 503]);
  assert.match(first.detail ?? "", /busy, try later/);
  assert.deepEqual([second.attempt, second.outcome, second.status, second.detail], [2, "done", 200, "accepted"]);
  assert.ok(second.node && second.started_at && second.ended_at && second.duration_ms !== undefined);
  await assert.rejects(client.attempts(999999999), (err) => err instanceof ApiError && err.code === "not_found");
});

test("callbacks are told of the outcome, signed", async () => {
  const base = `http://127.0.0.1:${receiver.address().port}`;
  const traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-03";
  const tell = { callback: `${base}/dest/callbacks/done`, failureCallback: `${base}/dest/callbacks/dead` };
  const done = await client.schedule({ payload: { order: 10 }, queue: "hooks", target: { url: `${base}/dest/orders/10` }, traceparent, ...tell });
  const dead = await client.schedule({ payload: { order: 11 }, queue: "hooks", target: { url: `${base}/dest/refuse/11` }, ...tell });
  const stored = await client.get(done.id);
  assert.deepEqual([stored.callback, stored.failure_callback], [tell.callback, tell.failureCallback]);
  const told = (id) => received.find((r) => r.headers["ttw-outcome-of"] === String(id));
  for (let i = 0; i < 600 && !(told(done.id) && told(dead.id)); i++) await sleep(50);
  const ok = told(done.id);
  assert.ok(ok, "the callback was told within 30 s");
  assert.deepEqual([ok.method, ok.path], ["POST", "/dest/callbacks/done"]);
  assert.equal(await verifyWebhook(SECRET, ok.headers, ok.body), ok.headers["webhook-id"]);
  assert.equal(ok.headers.traceparent, traceparent);
  const outcome = JSON.parse(ok.body.toString());
  assert.deepEqual(
    [outcome.id, outcome.queue, outcome.state, outcome.attempts, outcome.status, outcome.error],
    [done.id, "hooks", "done", 1, 200, null],
  );
  const gone = told(dead.id);
  assert.ok(gone, "the failure callback was told within 30 s");
  assert.equal(gone.path, "/dest/callbacks/dead");
  assert.equal(await verifyWebhook(SECRET, gone.headers, gone.body), gone.headers["webhook-id"]);
  const death = JSON.parse(gone.body.toString());
  assert.deepEqual([death.state, death.attempts, death.status], ["dead", 1, 410]);
  assert.match(death.error, /no such order/);
  assert.equal((await client.get(Number(gone.headers["ttw-task-id"]))).outcome_of, dead.id);
});

test("a target outside the token's destinations is refused", async () => {
  const base = `http://127.0.0.1:${receiver.address().port}`;
  const refused = async (input, code) => {
    await assert.rejects(client.schedule({ payload: {}, ...input }), (err) => err instanceof ApiError && err.code === code);
  };
  for (const url of [`${base}/hook`, "http://169.254.169.254/dest/", `${base.replace("127.0.0.1", "localhost")}/dest/x`]) {
    await refused({ queue: "hooks", target: { url } }, "destination_not_allowed");
  }
  await refused({ queue: "hooks", target: { url: "http://10.0.0.1/dest/" } }, "destination_not_allowed");
  await refused({ queue: "later", target: { url: `${base}/dest/x` } }, "destination_not_allowed");
  await refused({ queue: "hooks", target: { url: `${base}/dest/x`, headers: { "ttw-task-id": "1" } } }, "invalid_destination");
  await refused({ queue: "hooks", traceparent: "00-abc-01" }, "invalid_trace_context");
  // Callbacks have the same allowlist.
  await refused({ queue: "hooks", callback: "http://169.254.169.254/dest/" }, "destination_not_allowed");
  await refused({ queue: "hooks", failureCallback: `${base}/hook` }, "destination_not_allowed");
  await refused({ queue: "later", callback: `${base}/dest/x` }, "destination_not_allowed");
  await refused({ queue: "hooks", callback: "ftp://127.0.0.1/dest/x" }, "invalid_destination");
});

test("a schedule retried through a stopped server is stored once", async () => {
  // The server is stopped (SIGSTOP) when the schedule is sent: the request
  // times out and is sent again with the same key until the server goes
  // on (SIGCONT); it then reads both requests, and stores the task once.
  const patient = new Client(server.url, TOKEN, { timeoutMs: 500, retries: 8, backoffMs: 200 });
  const key = unique("retried");
  const count = await scheduled();
  process.kill(server.pid, "SIGSTOP");
  await everyThreadStopped(server.pid);
  const resumed = setTimeout(() => process.kill(server.pid, "SIGCONT"), 1500);
  const started = Date.now();
  let made;
  try {
    made = await patient.schedule({ payload: "once", delay: "1h", queue: "later", idempotencyKey: key });
  } finally {
    clearTimeout(resumed);
    process.kill(server.pid, "SIGCONT");
  }
  assert.ok(Date.now() - started >= 1000, "the answer came while the server was stopped");
  assert.ok(["created", "existing"].includes(made.outcome));
  await sleep(500);
  assert.equal(await scheduled(), count + 1);
  assert.equal((await client.getByKey(key)).id, made.id);
});

test("a client of several instances moves past one that is down", async () => {
  const several = new Client(["http://127.0.0.1:9", server.url], TOKEN, { retries: 2, backoffMs: 10 });
  assert.ok((await several.counts()).queues);
});
