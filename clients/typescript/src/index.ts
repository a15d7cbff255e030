// A typed client of the ttw delayed-task service (`ttw server`), on the
// platform's `fetch`: Node 18 and newer, and browsers.

import {
  CODES,
  type AttemptsView,
  type BatchView,
  type CancelledView,
  type Code,
  type NewLimits,
  type NewRecurring,
  type NewRetry,
  type NewTask,
  type PageView,
  type QueueCountsView,
  type QueueView,
  type RecurringChanged,
  type RecurringPut,
  type RecurringView,
  type RedrivenView,
  type RescheduledView,
  type ScheduledView,
  type StateName,
  type TargetSpec,
  type TaskView,
  type CancelledManyView,
  type NodesView,
  type RedrivenOneView,
  type StatsView,
  type ClaimedTask,
  type SettledView,
  type WorkerView,
} from "./generated.js";

import { ApiError, ConnectionFailed, TtwError } from "./errors.js";
import { type Delay, delayMs, delayText } from "./delays.js";

export * from "./generated.js";
export { ApiError, ConnectionFailed, TtwError } from "./errors.js";
export { type Delay, delayMs } from "./delays.js";
export { GiveUp, Retry, Worker, type Handler, type PullClient, type WorkerOptions } from "./worker.js";

/** A time: a `Date`, or RFC 3339 text with an offset. */
export type When = Date | string;

/** One task to schedule: a JSON `payload` or raw `payloadBytes`, due after `delay` or at `runAt`. */
export interface TaskInput {
  payload?: unknown;
  payloadBytes?: Uint8Array;
  delay?: Delay;
  runAt?: When;
  queue?: string;
  priority?: number;
  maxAttempts?: number;
  idempotencyKey?: string;
  partitionKey?: string;
  /** A typed job's kind: its arguments are the JSON `payload`, run by the workers registered for the kind. */
  kind?: string;
  replacePending?: boolean;
  maxWait?: Delay;
  /** Deliver this task here rather than to its queue's webhook (under one of the token's `destinations`). */
  target?: TargetSpec;
  /** The W3C trace context of the scheduling request, sent with every delivery. */
  traceparent?: string;
  tracestate?: string;
  /** Told of the outcome (a `CallbackOutcome`, signed) once the task is done; the same allowlist as `target`. */
  callback?: string;
  /** Told of the outcome once the task is dead. */
  failureCallback?: string;
}

export interface ClientOptions {
  /** Each request's limit, in ms (default 10,000). */
  timeoutMs?: number;
  /** Retries of a request that is safe to repeat (default 4). */
  retries?: number;
  /** The first wait before a retry, in ms, doubling after each (default 250). */
  backoffMs?: number;
  /** The `fetch` to use (default the platform's). */
  fetch?: typeof fetch;
}

/** What a claim asks for (see {@link Client.claim}). */
export interface ClaimOptions {
  max?: number;
  wait?: Delay;
  lease?: Delay;
  kinds?: string[];
}
const timeText = (t: When): string => (t instanceof Date ? t.toISOString() : t);

function base64(bytes: Uint8Array): string {
  let text = "";
  for (const b of bytes) text += String.fromCharCode(b);
  return btoa(text);
}

function randomKey(): string {
  const bytes = new Uint8Array(16);
  globalThis.crypto.getRandomValues(bytes);
  return "ts-" + Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("");
}

/** The body of one task, as `POST /v1/tasks` takes it. */
export function newTask(input: TaskInput): NewTask {
  if (input.payload !== undefined && input.payloadBytes !== undefined) {
    throw new TypeError("payload or payloadBytes, not both");
  }
  if (input.delay !== undefined && input.runAt !== undefined) {
    throw new TypeError("delay or runAt, not both");
  }
  const task: NewTask = {};
  if (input.payload !== undefined) task.payload = input.payload;
  if (input.payloadBytes !== undefined) task.payload_base64 = base64(input.payloadBytes);
  if (input.delay !== undefined) task.delay = delayText(input.delay);
  if (input.runAt !== undefined) task.run_at = timeText(input.runAt);
  if (input.queue !== undefined) task.queue = input.queue;
  if (input.priority !== undefined) task.priority = input.priority;
  if (input.maxAttempts !== undefined) task.max_attempts = input.maxAttempts;
  if (input.idempotencyKey !== undefined) task.idempotency_key = input.idempotencyKey;
  if (input.partitionKey !== undefined) task.partition_key = input.partitionKey;
  if (input.kind !== undefined) task.kind = input.kind;
  if (input.replacePending) task.replace_pending = true;
  if (input.maxWait !== undefined) task.max_wait = delayText(input.maxWait);
  if (input.target !== undefined) task.target = input.target;
  if (input.traceparent !== undefined) task.traceparent = input.traceparent;
  if (input.tracestate !== undefined) task.tracestate = input.tracestate;
  if (input.callback !== undefined) task.callback = input.callback;
  if (input.failureCallback !== undefined) task.failure_callback = input.failureCallback;
  return task;
}

/** Filters of a page of tasks. */
export interface TaskFilter {
  state?: StateName;
  queue?: string;
  partitionKey?: string;
  /** Only typed jobs of this kind. */
  kind?: string;
  idempotencyKey?: string;
  dueFrom?: When;
  dueBefore?: When;
  createdFrom?: When;
  createdBefore?: When;
  /** `"desc"`: the newest first; `"due"`, `"due_desc"`: by due time, the soonest or the latest first. */
  order?: "asc" | "desc" | "due" | "due_desc";
  limit?: number;
}

/** The filters of a page as the API names them (no order, page or limit). */
function selection(filter: TaskFilter): Record<string, unknown> {
  const fields: Record<string, unknown> = {
    state: filter.state,
    queue: filter.queue,
    partition_key: filter.partitionKey,
    kind: filter.kind,
    idempotency_key: filter.idempotencyKey,
    due_from: filter.dueFrom === undefined ? undefined : timeText(filter.dueFrom),
    due_before: filter.dueBefore === undefined ? undefined : timeText(filter.dueBefore),
    created_from: filter.createdFrom === undefined ? undefined : timeText(filter.createdFrom),
    created_before: filter.createdBefore === undefined ? undefined : timeText(filter.createdBefore),
  };
  for (const k of Object.keys(fields)) if (fields[k] === undefined) delete fields[k];
  return fields;
}

/**
 * A client of a `ttw server` (or of several instances of one service: give
 * a list of URLs, and a lost or refused connection moves to the next).
 *
 * Requests that are safe to repeat are retried on a 503 `unavailable` and
 * on a lost, refused or timed-out connection: reads, cancels,
 * reschedules, settings, and schedules, which always carry an idempotency
 * key (a random one when none is given, so a schedule whose answer was lost
 * is stored once). A redrive is never retried. Other refusals throw an
 * {@link ApiError} with the service's stable code.
 */
export class Client {
  private readonly bases: string[];
  private base: string;
  private readonly timeoutMs: number;
  private readonly retries: number;
  private readonly backoffMs: number;
  private readonly fetch: typeof fetch;

  constructor(
    baseUrl: string | string[],
    private readonly token: string,
    options: ClientOptions = {},
  ) {
    const urls = typeof baseUrl === "string" ? [baseUrl] : baseUrl;
    if (urls.length === 0) throw new TypeError("baseUrl: one URL or more");
    this.bases = urls.map((u) => u.replace(/\/+$/, ""));
    this.base = this.bases[0];
    this.timeoutMs = options.timeoutMs ?? 10_000;
    this.retries = options.retries ?? 4;
    this.backoffMs = options.backoffMs ?? 250;
    this.fetch = options.fetch ?? globalThis.fetch.bind(globalThis);
  }

  private async request<T>(
    method: string,
    path: string,
    body?: unknown,
    query?: Record<string, string | number | undefined>,
    retry = true,
    timeoutMs = this.timeoutMs,
  ): Promise<T> {
    let suffix = path;
    if (query) {
      const params = new URLSearchParams();
      for (const [k, v] of Object.entries(query)) if (v !== undefined) params.set(k, String(v));
      const text = params.toString();
      if (text) suffix += "?" + text;
    }
    const headers: Record<string, string> = { authorization: `Bearer ${this.token}`, accept: "application/json" };
    if (body !== undefined) headers["content-type"] = "application/json";
    const attempts = 1 + (retry ? this.retries : 0);
    let wait = this.backoffMs;
    for (let attempt = 0; ; attempt++) {
      const last = attempt === attempts - 1;
      const url = this.base + suffix;
      let answer: Response;
      try {
        answer = await this.fetch(url, {
          method,
          headers,
          body: body === undefined ? undefined : JSON.stringify(body),
          signal: AbortSignal.timeout(timeoutMs),
        });
      } catch (lost) {
        if (last) throw new ConnectionFailed(`${method} ${url}: ${String(lost)}`);
        // The next instance, if there are more.
        this.base = this.bases[(this.bases.indexOf(this.base) + 1) % this.bases.length];
        await sleep(wait);
        wait *= 2;
        continue;
      }
      const text = await answer.text();
      if (answer.ok) return (text ? JSON.parse(text) : undefined) as T;
      if (answer.status === 503 && !last) {
        await sleep(wait);
        wait *= 2;
        continue;
      }
      let code = "";
      let message = text;
      try {
        const detail = JSON.parse(text).error;
        code = detail.code;
        message = detail.message;
      } catch {
        // Not the service's JSON: the status and the text say what it was.
      }
      throw new ApiError(answer.status, code, message);
    }
  }

  /** Schedules one task: its `id` and `outcome` (`created`, `existing` for a pending task of its key, `replaced`). */
  schedule(input: TaskInput): Promise<ScheduledView> {
    const task = newTask(input);
    task.idempotency_key ??= randomKey();
    return this.request("POST", "/v1/tasks", task);
  }

  /** Schedules a batch in one transaction: an answer per task, in order. */
  scheduleMany(inputs: TaskInput[]): Promise<BatchView> {
    const tasks = inputs.map((input) => {
      const task = newTask(input);
      task.idempotency_key ??= randomKey();
      return task;
    });
    return this.request("POST", "/v1/tasks/batch", { tasks });
  }

  /** A task by id; an {@link ApiError} `not_found` if there is none. */
  get(id: number): Promise<TaskView> {
    return this.request("GET", `/v1/tasks/${id}`);
  }

  /**
   * A task's attempts, oldest first: each that failed or was cut short by a
   * crash (`interrupted`), the one running now and the one that succeeded,
   * with its node, times, HTTP status and the answer's first bytes or error.
   */
  attempts(id: number): Promise<AttemptsView> {
    return this.request("GET", `/v1/tasks/${id}/attempts`);
  }

  /** The task of an idempotency key. */
  getByKey(key: string): Promise<TaskView> {
    return this.request("GET", `/v1/keys/${encodeURIComponent(key)}`);
  }

  /** Cancels a scheduled task; `not_scheduled` once it ran. */
  cancel(id: number): Promise<CancelledView> {
    return this.request("DELETE", `/v1/tasks/${id}`);
  }

  /** Cancels the scheduled task of a key. */
  cancelByKey(key: string): Promise<CancelledView> {
    return this.request("DELETE", `/v1/keys/${encodeURIComponent(key)}`);
  }

  /** Moves a scheduled task to `delay` from now, or to `runAt`. */
  reschedule(id: number, when: { delay?: Delay; runAt?: When }): Promise<RescheduledView> {
    return this.request("POST", `/v1/tasks/${id}/reschedule`, newTime(when));
  }

  /** Moves the scheduled task of a key. */
  rescheduleByKey(key: string, when: { delay?: Delay; runAt?: When }): Promise<RescheduledView> {
    return this.request("POST", `/v1/keys/${encodeURIComponent(key)}/reschedule`, newTime(when));
  }

  /** One page of tasks in id order, and the cursor of the next. */
  page(filter: TaskFilter = {}, cursor?: string): Promise<PageView> {
    return this.request("GET", "/v1/tasks", undefined, {
      ...selection(filter),
      order: filter.order,
      limit: filter.limit,
      cursor,
    });
  }

  /** Every task that matches, page after page by cursor. */
  async *tasks(filter: TaskFilter = {}): AsyncGenerator<TaskView> {
    let cursor: string | undefined;
    do {
      const page = await this.page(filter, cursor);
      yield* page.tasks;
      cursor = page.next_cursor ?? undefined;
    } while (cursor);
  }

  /**
   * Runs finished tasks again (dead ones by default), chosen by the
   * filters of a page; `dryRun` only counts them. Not retried.
   */
  redrive(options: TaskFilter & { spread?: Delay; dryRun?: boolean } = {}): Promise<RedrivenView> {
    const body: Record<string, unknown> = selection(options);
    if (options.limit !== undefined) body.limit = options.limit;
    if (options.spread !== undefined) body.spread = delayText(options.spread);
    if (options.dryRun) body.dry_run = true;
    return this.request("POST", "/v1/tasks/redrive", body, undefined, false);
  }

  /** Cancels the scheduled tasks the filters choose (at most `limit`, 1,000 by default); `dryRun` only counts them. */
  cancelMatching(options: TaskFilter & { dryRun?: boolean } = {}): Promise<CancelledManyView> {
    const body: Record<string, unknown> = selection(options);
    if (options.limit !== undefined) body.limit = options.limit;
    if (options.dryRun) body.dry_run = true;
    return this.request("POST", "/v1/tasks/cancel", body, undefined, false);
  }

  /** Runs a dead task again, due at once with its attempts reset. */
  redriveTask(id: number): Promise<RedrivenOneView> {
    return this.request("POST", `/v1/tasks/${id}/redrive`, undefined, undefined, false);
  }

  /** The nodes and the leases each holds. */
  nodes(): Promise<NodesView> {
    return this.request("GET", "/v1/nodes");
  }

  /** The answering instance's node over the last hour: throughput and lateness. */
  stats(): Promise<StatsView> {
    return this.request("GET", "/v1/stats");
  }

  /** Tasks per queue and state. */
  counts(): Promise<QueueCountsView> {
    return this.request("GET", "/v1/counts");
  }

  /**
   * Claims up to `max` (1–100) due tasks of pull queue `queue`, each leased
   * to `worker` for `lease` (1 s to 12 h, 30 s by default): at once if some
   * are due, else the moment one falls due within `wait` (at most 60 s;
   * none: answer at once), else none. `kinds` takes only tasks of those
   * kinds. A claim whose answer is lost holds its tasks until their lease
   * ends. Needs a token with the `consume` scope.
   */
  async claim(queue: string, worker: string, options: ClaimOptions = {}): Promise<ClaimedTask[]> {
    const body: Record<string, unknown> = { worker, max: options.max ?? 1 };
    if (options.wait !== undefined) body.wait = delayText(options.wait);
    if (options.lease !== undefined) body.lease = delayText(options.lease);
    if (options.kinds !== undefined) body.kinds = options.kinds;
    const waits = options.wait === undefined ? 0 : delayMs(options.wait);
    const path = `/v1/queues/${encodeURIComponent(queue)}/claim`;
    const answer = await this.request<{ tasks: ClaimedTask[] }>("POST", path, body, undefined, true, this.timeoutMs + waits);
    return answer.tasks;
  }

  /** The attempt of `claim` succeeded: the task is done (`answer` kept as its attempt's answer). An `ApiError` `stale_claim` (409) if the claim no longer holds the task; nothing changes then. */
  ack(id: number, claim: string, answer?: string): Promise<SettledView> {
    return this.request("POST", `/v1/tasks/${id}/ack`, answer === undefined ? { claim } : { claim, answer });
  }

  /** The attempt of `claim` failed with `error`: due again after the queue's backoff (or `retryIn`), dead once out of attempts or when `dead`. */
  nack(id: number, claim: string, error: string, options: { retryIn?: Delay; dead?: boolean } = {}): Promise<SettledView> {
    const body: Record<string, unknown> = { claim, error };
    if (options.retryIn !== undefined) body.retry_in = delayText(options.retryIn);
    if (options.dead) body.dead = true;
    return this.request("POST", `/v1/tasks/${id}/nack`, body);
  }

  /** Holds the task of `claim` for `lease` from now (a heartbeat while its work runs): its new `lease_until`. */
  extend(id: number, claim: string, lease: Delay): Promise<SettledView> {
    return this.request("POST", `/v1/tasks/${id}/extend`, { claim, lease: delayText(lease) });
  }

  /** The workers that claimed from pull queue `queue` in the last day: each one's `worker`, `last_seen` and the tasks it `held`. */
  async workers(queue: string): Promise<WorkerView[]> {
    return (await this.request<{ workers: WorkerView[] }>("GET", `/v1/queues/${encodeURIComponent(queue)}/workers`)).workers;
  }

  /** Creates or updates a recurring schedule (`cron` with `time_zone`, or `every`). */
  putRecurring(name: string, schedule: NewRecurring): Promise<RecurringPut> {
    return this.request("PUT", `/v1/recurring/${encodeURIComponent(name)}`, schedule);
  }

  /** Every recurring schedule. */
  async recurring(): Promise<RecurringView[]> {
    return (await this.request<{ recurring: RecurringView[] }>("GET", "/v1/recurring")).recurring;
  }

  /** Stops making its occurrences tasks until resumed. */
  pauseRecurring(name: string): Promise<RecurringChanged> {
    return this.request("POST", `/v1/recurring/${encodeURIComponent(name)}/pause`);
  }

  /** Makes its occurrences tasks again, from the next one. */
  resumeRecurring(name: string): Promise<RecurringChanged> {
    return this.request("POST", `/v1/recurring/${encodeURIComponent(name)}/resume`);
  }

  /** Deletes it (occurrences already made tasks stay). */
  deleteRecurring(name: string): Promise<RecurringChanged> {
    return this.request("DELETE", `/v1/recurring/${encodeURIComponent(name)}`);
  }

  /** The settings of every queue. */
  async queues(): Promise<QueueView[]> {
    return (await this.request<{ queues: QueueView[] }>("GET", "/v1/queues")).queues;
  }

  /** One queue's settings. */
  queue(name: string): Promise<QueueView> {
    return this.request("GET", `/v1/queues/${encodeURIComponent(name)}`);
  }

  /** Every node stops starting the queue's tasks. */
  pauseQueue(name: string): Promise<QueueView> {
    return this.request("POST", `/v1/queues/${encodeURIComponent(name)}/pause`);
  }

  /** Every node starts the queue's tasks again. */
  resumeQueue(name: string): Promise<QueueView> {
    return this.request("POST", `/v1/queues/${encodeURIComponent(name)}/resume`);
  }

  /** Concurrency, per-key concurrency and rate, across every node. */
  setLimits(name: string, limits: NewLimits): Promise<QueueView> {
    return this.request("PUT", `/v1/queues/${encodeURIComponent(name)}/limits`, limits);
  }

  /** The attempt limit and backoff, over each node's own. */
  setRetry(name: string, retry: NewRetry): Promise<QueueView> {
    return this.request("PUT", `/v1/queues/${encodeURIComponent(name)}/retry`, retry);
  }
}

function newTime(when: { delay?: Delay; runAt?: When }): { delay?: string; run_at?: string } {
  if ((when.delay === undefined) === (when.runAt === undefined)) {
    throw new TypeError("delay or runAt, one of them");
  }
  return when.delay !== undefined ? { delay: delayText(when.delay) } : { run_at: timeText(when.runAt!) };
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** A delivery whose signature or timestamp does not check out. */
export class InvalidSignature extends TtwError {}

/**
 * Checks a delivery (Standard Webhooks: `webhook-id`, `webhook-timestamp`,
 * `webhook-signature`): its signature over `id.timestamp.body` with the
 * queue's secret (`whsec_` and base64), and a timestamp within
 * `toleranceS` seconds of now. Returns its `webhook-id` (deduplicate on
 * it); throws {@link InvalidSignature} otherwise. Header names are matched
 * without regard to case.
 */
export async function verifyWebhook(
  secret: string,
  headers: Record<string, string | string[] | undefined> | Headers,
  body: Uint8Array | string,
  toleranceS = 300,
  nowS = Date.now() / 1000,
): Promise<string> {
  const get = (name: string): string => {
    if (headers instanceof Headers) return headers.get(name) ?? "";
    for (const [k, v] of Object.entries(headers)) {
      if (k.toLowerCase() === name) return Array.isArray(v) ? v[0] ?? "" : v ?? "";
    }
    return "";
  };
  const id = get("webhook-id");
  const stamp = get("webhook-timestamp");
  const signatures = get("webhook-signature");
  if (!id || !stamp || !signatures) {
    throw new InvalidSignature("missing webhook-id, webhook-timestamp or webhook-signature");
  }
  const sent = Number(stamp);
  if (!Number.isInteger(sent)) throw new InvalidSignature("webhook-timestamp is not a number");
  if (Math.abs(nowS - sent) > toleranceS) throw new InvalidSignature("webhook-timestamp is too far from now");
  const keyText = secret.startsWith("whsec_") ? secret.slice("whsec_".length) : secret;
  const key = Uint8Array.from(atob(keyText), (c) => c.charCodeAt(0));
  const bytes = typeof body === "string" ? new TextEncoder().encode(body) : body;
  const signed = new Uint8Array([...new TextEncoder().encode(`${id}.${stamp}.`), ...bytes]);
  const subtle = globalThis.crypto?.subtle ?? (await import("node:crypto")).webcrypto.subtle;
  const hmac = await subtle.importKey("raw", key, { name: "HMAC", hash: "SHA-256" }, false, ["sign"]);
  const expected = base64(new Uint8Array(await subtle.sign("HMAC", hmac, signed)));
  for (const part of signatures.split(" ")) {
    const [version, sig] = part.split(",", 2);
    if (version === "v1" && sig !== undefined && constantTimeEqual(sig, expected)) return id;
  }
  throw new InvalidSignature("no signature matches");
}

function constantTimeEqual(a: string, b: string): boolean {
  if (a.length !== b.length) return false;
  let diff = 0;
  for (let i = 0; i < a.length; i++) diff |= a.charCodeAt(i) ^ b.charCodeAt(i);
  return diff === 0;
}

/** Whether `code` is one of the service's stable codes. */
export function isCode(code: string): code is Code {
  return (CODES as readonly string[]).includes(code);
}
