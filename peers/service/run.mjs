// The service's scenarios, run against the self-hosted delayed-job systems a
// team would otherwise pick: BullMQ (Node, on redis-server) and beanstalkd.
// The same sizes as `cargo bench -p ttw --bench http_rate` and
// `--bench http_lateness`, on the same machine:
//
//   singles   40,000 delayed jobs, 64 in flight, each due in an hour
//   batches   200 batches of 1,000 (BullMQ's addBulk; beanstalkd has no
//             batch, so its 200,000 puts go over 64 connections)
//   lateness  1,000 jobs a second for 20 s, each due 2 s after it is sent;
//             a worker in another process takes each one, lateness measured
//             from the due time to the handler's start
//   idle      the server and a waiting worker, nothing due: CPU over 30 s
//
//   node run.mjs [--only bullmq,beanstalkd,ttw] [--scenarios singles,batches,lateness,idle]
//                [--persistence recommended|always|none] [--rounds N] [--idle-secs S]
//
// Each run starts its own server (redis-server, beanstalkd) on a free port
// in a fresh directory and stops it after. `--persistence`: `recommended`
// is what each one's docs say for production (Redis: AOF with an fsync
// every second and `maxmemory-policy noeviction`, from BullMQ's "Going to
// production"; beanstalkd: its binlog, `-b`, with its default fsync every
// 50 ms, as Debian's /etc/default/beanstalkd suggests); `always` fsyncs
// every write (AOF `appendfsync always`, `-f 0`); `none` keeps jobs in
// memory only.

import { spawn } from "node:child_process";
import http from "node:http";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import net from "node:net";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";

const HERE = fileURLToPath(import.meta.url);
const SINGLES = 40_000;
const IN_FLIGHT = 64;
const BATCHES = 200;
const BATCH = 1_000;
const BATCHES_IN_FLIGHT = 4;
const LATE_RATE = 1_000;
const LATE_SECS = 20;
const LATE_DUE_MS = 2_000;
const WORKER_CONCURRENCY = 64;
const CLOCK_TICK_MS = 10; // getconf CLK_TCK is 100 on Linux
const PAYLOAD = JSON.stringify({ user: 42, coupon: "SPRING-10" });

// ---------------------------------------------------------------- servers

async function freePort() {
  return new Promise((resolve, reject) => {
    const s = net.createServer();
    s.once("error", reject);
    s.listen(0, "127.0.0.1", () => {
      const { port } = s.address();
      s.close(() => resolve(port));
    });
  });
}

async function waitForPort(port, child) {
  for (let i = 0; i < 200; i++) {
    if (child.exitCode !== null) throw new Error(`server exited with ${child.exitCode}`);
    const ok = await new Promise((resolve) => {
      const c = net.connect(port, "127.0.0.1");
      c.once("connect", () => { c.destroy(); resolve(true); });
      c.once("error", () => resolve(false));
    });
    if (ok) return;
    await sleep(25);
  }
  throw new Error(`nothing listens on ${port}`);
}

function redisArgs(port, dir, persistence) {
  const args = ["--port", String(port), "--bind", "127.0.0.1", "--dir", dir, "--save", "",
    "--maxmemory-policy", "noeviction", "--daemonize", "no", "--loglevel", "warning"];
  if (persistence === "none") return [...args, "--appendonly", "no"];
  const sync = persistence === "always" ? "always" : "everysec";
  return [...args, "--appendonly", "yes", "--appendfsync", sync];
}

function beanstalkdArgs(port, dir, persistence) {
  const args = ["-l", "127.0.0.1", "-p", String(port)];
  if (persistence === "none") return args;
  if (persistence === "always") return [...args, "-b", dir, "-f", "0"];
  return [...args, "-b", dir];
}

async function startServer(bin, argsFor, persistence) {
  const dir = mkdtempSync(path.join(os.tmpdir(), "ttw-peer-"));
  const port = await freePort();
  const child = spawn(bin, argsFor(port, dir, persistence), { stdio: ["ignore", "ignore", "inherit"] });
  await waitForPort(port, child);
  return {
    port,
    pid: child.pid,
    async stop() {
      const gone = new Promise((resolve) => child.once("exit", resolve));
      child.kill("SIGTERM");
      await gone;
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

// ---------------------------------------------------------------- contenders
// A contender says how its server starts, how a producer schedules one job
// or a batch, and how a worker takes jobs.

const bullmq = {
  name: "bullmq",
  server: (persistence) => startServer("redis-server", redisArgs, persistence),
  async producer(port) {
    const { Queue } = await import("bullmq");
    const queue = new Queue("peer", { connection: { host: "127.0.0.1", port } });
    await queue.waitUntilReady();
    const opts = (delay) => ({ delay, removeOnComplete: true, removeOnFail: 1000 });
    return {
      one: (delayMs, data) => queue.add("task", data, opts(delayMs)),
      batch: (delayMs, list) => queue.addBulk(list.map((data) => ({ name: "task", data, opts: opts(delayMs) }))),
      close: () => queue.close(),
    };
  },
  async worker(port, onJob) {
    const { Worker } = await import("bullmq");
    const worker = new Worker("peer", async (job) => onJob(job.data), {
      connection: { host: "127.0.0.1", port, maxRetriesPerRequest: null },
      concurrency: WORKER_CONCURRENCY,
    });
    await worker.waitUntilReady();
  },
};

// The package is CommonJS with its class on `exports.default`.
async function beanstalkClient() {
  const mod = await import("beanstalkd");
  return mod.default.default ?? mod.default;
}

const beanstalkd = {
  name: "beanstalkd",
  server: (persistence) => startServer("beanstalkd", beanstalkdArgs, persistence),
  async producer(port) {
    // The client sends a command only after the last one's answer, so work
    // in flight needs connections: one per job in flight.
    const Client = await beanstalkClient();
    const pool = [];
    for (let i = 0; i < IN_FLIGHT; i++) pool.push(await new Client("127.0.0.1", port).connect());
    const idle = [...pool];
    const waiting = [];
    const take = () => (idle.length ? Promise.resolve(idle.pop()) : new Promise((r) => waiting.push(r)));
    const give = (c) => (waiting.length ? waiting.shift()(c) : idle.push(c));
    // beanstalkd's delay is whole seconds.
    const put = (c, delayMs, data) => c.put(0, Math.ceil(delayMs / 1000), 60, JSON.stringify(data));
    return {
      async one(delayMs, data) {
        const c = await take();
        try { return await put(c, delayMs, data); } finally { give(c); }
      },
      async batch(delayMs, list) {
        await Promise.all(list.map((data) => this.one(delayMs, data)));
      },
      close: () => Promise.all(pool.map((c) => c.quit())),
    };
  },
  async worker(port, onJob) {
    // A worker as beanstalkd's protocol has it: a connection per job in
    // hand, each blocked in `reserve` until a job is ready.
    const Client = await beanstalkClient();
    const clients = [];
    for (let i = 0; i < WORKER_CONCURRENCY; i++) clients.push(await new Client("127.0.0.1", port).connect());
    for (const c of clients) {
      (async () => {
        for (;;) {
          const [id, body] = await c.reserve();
          onJob(JSON.parse(body.toString()));
          await c.delete(id);
        }
      })().catch(() => {}); // the connection closed: the worker is ending
    }
  },
};

// `ttw server` itself, in the same runner and from the same Node client
// machinery as its peers: the release binary (`TTW_BIN`, default the
// workspace's target/release/ttw; `cargo build --release -p ttw` first),
// scheduler off as in `cargo bench -p ttw --bench http_rate`, on SQLite
// or, with DATABASE_URL, on PostgreSQL. Its durability is its own
// (`--persistence` does not change it): SQLite's WAL with `synchronous =
// NORMAL`, or whatever the PostgreSQL server has. It takes part in the
// scheduling scenarios only: its deliveries are webhooks, which the
// worker process here does not serve.
const TTW_TOKEN = "peer-token-0123456789";

async function startTtw() {
  const dir = mkdtempSync(path.join(os.tmpdir(), "peer-ttw-"));
  const url = process.env.DATABASE_URL;
  const schema = `peer_ttw_${process.pid}_${Date.now()}`;
  const database = url ? `database = "${url}"\nschema = "${schema}"` : `database = "${dir}/tasks.db"`;
  const config = path.join(dir, "ttw.toml");
  writeFileSync(config, `listen = "127.0.0.1:0"\n${database}\n\n[scheduler]\nenabled = false\n\n` +
    `[[tokens]]\nname = "bench"\nsecret_env = "TTW_PEER_TOKEN"\nscopes = ["schedule"]\n`);
  const bin = process.env.TTW_BIN ?? path.join(path.dirname(HERE), "../../target/release/ttw");
  const child = spawn(bin, ["server", "--config", config],
    { env: { ...process.env, TTW_PEER_TOKEN: TTW_TOKEN }, stdio: ["ignore", "pipe", "inherit"] });
  const first = await new Promise((resolve, reject) => {
    let buffered = "";
    child.stdout.on("data", (d) => {
      buffered += d;
      if (buffered.includes("\n")) resolve(buffered.slice(0, buffered.indexOf("\n")));
    });
    child.once("exit", () => reject(new Error(`${bin} exited before listening`)));
  });
  const port = Number(first.slice(first.lastIndexOf(":") + 1));
  return {
    port,
    pid: child.pid,
    async stop() {
      const gone = new Promise((resolve) => child.once("exit", resolve));
      child.kill("SIGTERM");
      await gone;
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

const ttw = {
  name: "ttw",
  server: () => startTtw(),
  async producer(port) {
    // Node's own HTTP client on keep-alive connections, one per request in
    // flight (its `fetch` took most of a core at 3,400 requests a second).
    const agent = new http.Agent({ keepAlive: true, maxSockets: IN_FLIGHT });
    const post = (route, body, status) => new Promise((resolve, reject) => {
      const request = http.request({
        host: "127.0.0.1", port, path: route, method: "POST", agent,
        headers: { authorization: `Bearer ${TTW_TOKEN}`, "content-type": "application/json",
          "content-length": Buffer.byteLength(body) },
      }, (answer) => {
        answer.resume();
        answer.on("end", () => (answer.statusCode === status
          ? resolve() : reject(new Error(`${route} answered ${answer.statusCode}`))));
      });
      request.on("error", reject);
      request.end(body);
    });
    const task = (delayMs, data) => ({ payload: data, delay: `${delayMs}ms` });
    return {
      one: (delayMs, data) => post("/v1/tasks", JSON.stringify(task(delayMs, data)), 201),
      batch: (delayMs, list) =>
        post("/v1/tasks/batch", JSON.stringify({ tasks: list.map((data) => task(delayMs, data)) }), 200),
      close: async () => agent.destroy(),
    };
  },
};

const CONTENDERS = { bullmq, beanstalkd, ttw };

// ---------------------------------------------------------------- scenarios

async function singles(c, server) {
  const p = await c.producer(server.port);
  let next = 0;
  const cpu = cpuMeter(server);
  const started = performance.now();
  await Promise.all(Array.from({ length: IN_FLIGHT }, async () => {
    while (next < SINGLES) { next++; await p.one(3_600_000, { payload: PAYLOAD }); }
  }));
  const secs = (performance.now() - started) / 1000;
  const used = cpu(secs);
  await p.close();
  return { "tasks/s": Math.round(SINGLES / secs), tasks: SINGLES, secs: secs.toFixed(2), ...used };
}

async function batches(c, server) {
  const p = await c.producer(server.port);
  const list = Array.from({ length: BATCH }, () => ({ payload: PAYLOAD }));
  let next = 0;
  const cpu = cpuMeter(server);
  const started = performance.now();
  await Promise.all(Array.from({ length: BATCHES_IN_FLIGHT }, async () => {
    while (next < BATCHES) { next++; await p.batch(3_600_000, list); }
  }));
  const secs = (performance.now() - started) / 1000;
  const used = cpu(secs);
  await p.close();
  return { "tasks/s": Math.round((BATCHES * BATCH) / secs), tasks: BATCHES * BATCH, secs: secs.toFixed(2), ...used };
}

// A worker in its own process, as a receiver would be: it prints "ready",
// then one JSON line when `expected` jobs came or `--for` seconds passed,
// and exits.
function startWorker(c, server, args) {
  const child = spawn(process.execPath, [HERE, "worker", c.name, String(server.port), ...args],
    { stdio: ["ignore", "pipe", "inherit"] });
  const lines = [];
  let wake = null;
  let buffered = "";
  child.stdout.on("data", (d) => {
    buffered += d;
    let i;
    while ((i = buffered.indexOf("\n")) >= 0) {
      lines.push(buffered.slice(0, i));
      buffered = buffered.slice(i + 1);
      if (wake) wake();
    }
  });
  const line = async () => {
    while (!lines.length) {
      if (child.exitCode !== null) throw new Error("the worker exited");
      await new Promise((r) => { wake = r; setTimeout(r, 200); });
    }
    return lines.shift();
  };
  return { child, line };
}

async function lateness(c, server) {
  const total = LATE_RATE * LATE_SECS;
  const w = startWorker(c, server, ["--expect", String(total), "--for", String(LATE_SECS + 30)]);
  if ((await w.line()) !== "ready") throw new Error("the worker did not start");
  const p = await c.producer(server.port);
  const started = performance.now();
  const pending = [];
  // 10 jobs every 10 ms, each due 2 s after it is sent.
  for (let tick = 0; tick < total / 10; tick++) {
    const at = started + tick * 10;
    const wait = at - performance.now();
    if (wait > 0) await sleep(wait);
    for (let i = 0; i < 10; i++) {
      const due = Date.now() + LATE_DUE_MS;
      pending.push(p.one(LATE_DUE_MS, { due }));
    }
    if (pending.length >= 1000) await Promise.all(pending.splice(0));
  }
  await Promise.all(pending);
  const result = JSON.parse(await w.line());
  await p.close();
  return result;
}

function cpuTicks(pid) {
  const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
  const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
  return Number(fields[11]) + Number(fields[12]); // utime, stime
}

// How busy the server and this process (the client) were, in cores.
function cpuMeter(server) {
  const before = [cpuTicks(server.pid), cpuTicks(process.pid)];
  return (secs) => {
    const cores = (i, pid) => (((cpuTicks(pid) - before[i]) * CLOCK_TICK_MS) / 1000 / secs).toFixed(2);
    return { "server cores": cores(0, server.pid), "client cores": cores(1, process.pid) };
  };
}

async function idle(c, server, { idleSecs }) {
  const w = startWorker(c, server, ["--for", String(idleSecs + 10)]);
  if ((await w.line()) !== "ready") throw new Error("the worker did not start");
  await sleep(3000);
  const before = [cpuTicks(server.pid), cpuTicks(w.child.pid)];
  await sleep(idleSecs * 1000);
  const after = [cpuTicks(server.pid), cpuTicks(w.child.pid)];
  w.child.kill("SIGTERM");
  const perSec = (i) => ((after[i] - before[i]) * CLOCK_TICK_MS) / idleSecs;
  return {
    "server ms CPU/s": perSec(0).toFixed(2),
    "worker ms CPU/s": perSec(1).toFixed(2),
    "ms CPU/s": (perSec(0) + perSec(1)).toFixed(2),
  };
}

const SCENARIOS = { singles, batches, lateness, idle };

// ---------------------------------------------------------------- worker process

async function workerMain(name, port, opts) {
  const c = CONTENDERS[name];
  const late = [];
  let done;
  const finished = new Promise((r) => { done = r; });
  await c.worker(Number(port), (data) => {
    if (data.due !== undefined) late.push(Date.now() - data.due);
    if (opts.expect && late.length >= opts.expect) done();
  });
  console.log("ready");
  const timer = setTimeout(done, opts.for * 1000);
  await finished;
  clearTimeout(timer);
  late.sort((a, b) => a - b);
  const q = (f) => (late.length ? late[Math.min(late.length - 1, Math.floor(f * late.length))] : null);
  console.log(JSON.stringify({ delivered: late.length, "p50 ms": q(0.5), "p99 ms": q(0.99), "max ms": late.at(-1) ?? null, "min ms": late[0] ?? null }));
  process.exit(0); // the worker's process ends with its connections
}

// ---------------------------------------------------------------- main

function sleep(ms) { return new Promise((r) => setTimeout(r, ms)); }

function flags(argv) {
  const out = { only: Object.keys(CONTENDERS), scenarios: Object.keys(SCENARIOS), persistence: "recommended", rounds: 1, idleSecs: 30 };
  for (let i = 0; i < argv.length; i++) {
    const [flag, value] = [argv[i], argv[i + 1]];
    if (flag === "--only") out.only = value.split(",");
    else if (flag === "--scenarios") out.scenarios = value.split(",");
    else if (flag === "--persistence") out.persistence = value;
    else if (flag === "--rounds") out.rounds = Number(value);
    else if (flag === "--idle-secs") out.idleSecs = Number(value);
    else if (flag === "--expect") out.expect = Number(value);
    else if (flag === "--for") out.for = Number(value);
    else throw new Error(`unknown flag ${flag}`);
    i++;
  }
  for (const n of out.only) if (!CONTENDERS[n]) throw new Error(`unknown contender ${n}`);
  for (const s of out.scenarios) if (!SCENARIOS[s]) throw new Error(`unknown scenario ${s}`);
  if (!["recommended", "always", "none"].includes(out.persistence)) throw new Error(`unknown persistence ${out.persistence}`);
  return out;
}

async function main() {
  const argv = process.argv.slice(2);
  if (argv[0] === "worker") return workerMain(argv[1], argv[2], flags(argv.slice(3)));
  const opts = flags(argv);
  const rows = [];
  for (let round = 1; round <= opts.rounds; round++) {
    for (const name of opts.only) {
      for (const scenario of opts.scenarios) {
        const c = CONTENDERS[name];
        // A contender without a worker here takes part in scheduling only.
        if (!c.worker && (scenario === "lateness" || scenario === "idle")) continue;
        const server = await c.server(opts.persistence);
        try {
          const result = await SCENARIOS[scenario](c, server, opts);
          const row = { contender: name, persistence: opts.persistence, scenario, round, ...result };
          console.log(JSON.stringify(row));
          rows.push(row);
        } finally {
          await server.stop();
        }
      }
    }
  }
  console.log("\n| contender | persistence | scenario | round | result |\n|---|---|---|---|---|");
  for (const { contender, persistence, scenario, round, ...rest } of rows) {
    const result = Object.entries(rest).map(([k, v]) => `${k} ${v}`).join(", ");
    console.log(`| ${contender} | ${persistence} | ${scenario} | ${round} | ${result} |`);
  }
}

main().catch((e) => { console.error(`run.mjs: ${e.message}`); process.exit(1); });
