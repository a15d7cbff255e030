// The worker against a real `ttw server`'s pull queue `work`: it runs,
// acks and nacks; it keeps a long task by extending its lease; a worker
// SIGKILLed mid-task has its task back at the lease's end as the next
// attempt; SIGTERM finishes what it holds; a lost server is retried with a
// growing wait.
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createInterface } from "node:readline";
import { after, before, test } from "node:test";
import { fileURLToPath } from "node:url";

import { Client, ConnectionFailed, GiveUp, Worker } from "../dist/index.js";
import { startServer } from "./server.mjs";

const TOKEN = "worker-test-token-0123456789";
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const index = fileURLToPath(new URL("../dist/index.js", import.meta.url));

let server;
let client;

before(async () => {
  const dir = mkdtempSync(join(tmpdir(), "ttw-ts-worker-"));
  const config = join(dir, "ttw.toml");
  writeFileSync(
    config,
    `listen = "127.0.0.1:0"
database = "${dir}/tasks.db"

[[queues]]
name = "work"
pull = true

[[tokens]]
name = "app"
secret_env = "TTW_TOKEN_APP"
scopes = ["schedule", "read", "admin", "consume"]
`,
  );
  server = await startServer(config, { TTW_TOKEN_APP: TOKEN });
  client = new Client(server.url, TOKEN);
  await client.setRetry("work", { max_attempts: 5, backoff: { base: "100ms", max: "200ms" } });
});

after(() => server?.kill("SIGKILL"));

const outcomes = async (id) => (await client.attempts(id)).attempts.map((a) => a.outcome);

async function waitFor(predicate, ms = 30_000) {
  const deadline = Date.now() + ms;
  while (Date.now() < deadline) {
    if (await predicate()) return;
    await sleep(50);
  }
  assert.fail(`not within ${ms} ms`);
}

test("a worker runs, acks and nacks with the handler's error", async () => {
  const seen = [];
  let failedOnce = false;
  const handler = async (task) => {
    const n = task.payload.n;
    seen.push([n, task.attempt]);
    if (n === 1 && !failedOnce) {
      failedOnce = true;
      throw new TypeError("the image is not ready");
    }
    if (n === 2) throw new GiveUp("no such image");
    return `resized ${n}`;
  };
  const ids = [];
  for (let n = 0; n < 4; n++) ids.push((await client.schedule({ payload: { n }, queue: "work", kind: "resize" })).id);
  const worker = new Worker(client, "work", handler, { concurrency: 2, name: "ts-worker", wait: "1s", stopOnSignals: false });
  const running = worker.run();
  await waitFor(async () => {
    const states = await Promise.all(ids.map(async (id) => (await client.get(id)).state));
    return states.every((s) => s === "done" || s === "dead");
  });
  worker.stop();
  await running;
  const states = await Promise.all(ids.map(async (id) => (await client.get(id)).state));
  assert.deepEqual(states, ["done", "done", "dead", "done"]);
  assert.deepEqual(await outcomes(ids[1]), ["failed", "done"]);
  const attempts = (await client.attempts(ids[1])).attempts;
  assert.equal(attempts[0].detail, "TypeError: the image is not ready");
  assert.equal(attempts[0].node, "ts-worker");
  assert.equal(attempts[1].detail, "resized 1");
  assert.equal((await client.get(ids[2])).last_error, "no such image");
  assert.deepEqual(seen.sort(), [[0, 1], [1, 1], [1, 2], [2, 1], [3, 1]]);
  assert.deepEqual([worker.acked, worker.nacked, worker.lost], [3, 2, 0]);
  const me = (await client.workers("work")).find((w) => w.worker === "ts-worker");
  assert.equal(me.held, 0);
});

test("a long task is kept by extending its lease", async () => {
  const { id } = await client.schedule({ payload: "long", queue: "work" });
  const worker = new Worker(client, "work", () => sleep(3500).then(() => "slow"), { lease: "1s", wait: "1s", stopOnSignals: false });
  const running = worker.run();
  await waitFor(async () => (await client.get(id)).state === "running");
  // Past three of its leases, no other worker is handed it.
  assert.deepEqual(await client.claim("work", "rival", { wait: "3s" }), []);
  await waitFor(async () => (await client.get(id)).state === "done");
  worker.stop();
  await running;
  assert.deepEqual(await outcomes(id), ["done"]);
  assert.equal(worker.lost, 0);
});

const CHILD = `
import { Client, Worker } from ${JSON.stringify(index)};
const [url, token, ms] = process.argv.slice(-3);
const handler = async (task) => {
  console.log("started", task.id);
  await new Promise((r) => setTimeout(r, Number(ms)));
  console.log("finished", task.id);
  return "finished";
};
await new Worker(new Client(url, token), "work", handler, { lease: "2s", wait: "1s", name: "child" }).run();
console.log("stopped");
`;

/** A worker in a process of its own whose handler takes `ms`: the process and its lines. */
function childWorker(ms) {
  const child = spawn(process.execPath, ["--input-type=module", "-e", CHILD, server.url, TOKEN, String(ms)], {
    stdio: ["ignore", "pipe", "inherit"],
  });
  const lines = [];
  const waiting = [];
  createInterface({ input: child.stdout }).on("line", (line) => {
    lines.push(line);
    waiting.splice(0).forEach((wake) => wake());
  });
  child.exited = new Promise((r) => child.on("close", (code, signal) => r({ code, signal })));
  let gone = false;
  child.exited.then(() => {
    gone = true;
    waiting.splice(0).forEach((wake) => wake());
  });
  child.line = async (n) => {
    while (lines.length <= n && !gone) await new Promise((r) => waiting.push(r));
    return lines[n];
  };
  return child;
}

test("a SIGKILLed worker's task is back at its lease end", async () => {
  const { id } = await client.schedule({ payload: "k", queue: "work" });
  const child = childWorker(600_000);
  assert.equal(await child.line(0), `started ${id}`);
  const killed = Date.now();
  child.kill("SIGKILL");
  await child.exited;
  const again = await client.claim("work", "heir", { wait: "30s", lease: "30s" });
  assert.ok(Date.now() - killed >= 1000, "taken back before the lease could end");
  assert.deepEqual(again.map((t) => [t.id, t.attempt]), [[id, 2]]);
  await client.ack(id, again[0].claim);
  assert.deepEqual(await outcomes(id), ["expired", "done"]);
});

test("SIGTERM finishes what the worker holds", async () => {
  const { id } = await client.schedule({ payload: "t", queue: "work" });
  const child = childWorker(1500);
  assert.equal(await child.line(0), `started ${id}`);
  child.kill("SIGTERM");
  assert.deepEqual(await child.exited, { code: 0, signal: null });
  assert.deepEqual([await child.line(1), await child.line(2)], [`finished ${id}`, "stopped"]);
  assert.equal((await client.get(id)).state, "done");
  assert.deepEqual(await outcomes(id), ["done"]);
});

test("a lost server is retried with a growing wait", async () => {
  const lost = new Client("http://127.0.0.1:9", "t", { retries: 0, timeoutMs: 1000 });
  const calls = [];
  const claim = lost.claim.bind(lost);
  lost.claim = (...args) => {
    calls.push(Date.now());
    return claim(...args);
  };
  const worker = new Worker(lost, "work", () => {}, { maxBackoffMs: 500, stopOnSignals: false });
  const running = worker.run();
  await waitFor(() => calls.length >= 4, 10_000);
  worker.stop();
  await running;
  const gaps = calls.slice(1).map((t, i) => t - calls[i]);
  assert.ok(gaps[0] >= 200 && gaps[2] >= 450, String(gaps));
  await assert.rejects(claim("work", "w"), ConnectionFailed);
});
