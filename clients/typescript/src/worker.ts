// A worker of a pull queue: it long-polls `ttw server` for due tasks, runs
// a handler on each (at most `concurrency` at a time), extends each lease
// while its handler runs, and acks the task (the handler resolved) or nacks
// it (the handler threw: its message is the attempt's error).

import { type Delay, delayMs } from "./delays.js";
import { ApiError, ConnectionFailed } from "./errors.js";
import type { ClaimedTask, SettledView } from "./generated.js";

/** The calls a worker makes: a `Client`'s. */
export interface PullClient {
  claim(queue: string, worker: string, options: { max?: number; wait?: Delay; lease?: Delay; kinds?: string[] }): Promise<ClaimedTask[]>;
  ack(id: number, claim: string, answer?: string): Promise<SettledView>;
  nack(id: number, claim: string, error: string, options?: { retryIn?: Delay; dead?: boolean }): Promise<SettledView>;
  extend(id: number, claim: string, lease: Delay): Promise<SettledView>;
}

/**
 * A handler: given the task as claimed (`payload`, `id`, `attempt`, `kind`,
 * `message_id`...) and a signal aborted if the task's lease is lost, what it
 * resolves to (text or nothing) is the attempt's answer; a throw nacks the
 * task with its message.
 */
export type Handler = (task: ClaimedTask, signal: AbortSignal) => Promise<string | void> | string | void;

/** Thrown by a handler: the task is due again after `retryIn` rather than the queue's backoff. */
export class Retry extends Error {
  constructor(
    message: string,
    readonly retryIn: Delay,
  ) {
    super(message);
  }
}

/** Thrown by a handler: the task is dead now, whatever attempts are left (retrying cannot help). */
export class GiveUp extends Error {}

export interface WorkerOptions {
  /** Tasks run at once (default 1, at most 100). */
  concurrency?: number;
  /** The worker's name in the attempt history (default `host-pid`). */
  name?: string;
  /** Each task's lease (default `"30s"`), extended every third of it while its handler runs. */
  lease?: Delay;
  /** How long each poll waits for a task to fall due (default `"10s"`). */
  wait?: Delay;
  /** Only tasks of these kinds. */
  kinds?: string[];
  /** The longest wait between claims that failed (ms, default 10,000). */
  maxBackoffMs?: number;
  /** Stop on SIGTERM and SIGINT (default true in Node). */
  stopOnSignals?: boolean;
}

/**
 * Serves pull queue `queue` with `handler`. It claims only what it has room
 * for, so a busy worker takes nothing it cannot run. A 503 or a lost
 * connection is retried with a growing wait; another refusal (a token
 * without `consume`, a queue that is not a pull queue) rejects `run()`.
 * `run()` resolves after {@link Worker.stop} (or SIGTERM, SIGINT) once the
 * poll under way has ended and every task held is finished.
 */
export class Worker {
  /** Tasks acked, nacked, and lost (their claim went stale or the settle failed). */
  acked = 0;
  nacked = 0;
  lost = 0;
  private readonly concurrency: number;
  private readonly name: string;
  private readonly leaseMs: number;
  private readonly wait: Delay;
  private readonly maxBackoffMs: number;
  private readonly held = new Set<Promise<void>>();
  private stopping = false;
  private wake: (() => void) | undefined;

  constructor(
    private readonly client: PullClient,
    private readonly queue: string,
    private readonly handler: Handler,
    private readonly options: WorkerOptions = {},
  ) {
    this.concurrency = options.concurrency ?? 1;
    if (!Number.isInteger(this.concurrency) || this.concurrency < 1 || this.concurrency > 100) {
      throw new RangeError("concurrency: 1 to 100");
    }
    const pid = globalThis.process?.pid ?? 0;
    const host = globalThis.process?.env?.HOSTNAME ?? "worker";
    this.name = options.name ?? `${host}-${pid}`;
    this.leaseMs = delayMs(options.lease ?? "30s");
    this.wait = options.wait ?? "10s";
    this.maxBackoffMs = options.maxBackoffMs ?? 10_000;
  }

  /** Claims no more; `run()` resolves once what it holds is done. */
  stop(): void {
    this.stopping = true;
    this.wake?.();
  }

  /** Claims and runs tasks until stopped. */
  async run(): Promise<void> {
    const onSignal = () => this.stop();
    const signals = this.options.stopOnSignals ?? true;
    const proc = globalThis.process;
    if (signals && proc?.on) {
      proc.on("SIGTERM", onSignal);
      proc.on("SIGINT", onSignal);
    }
    let backoff = 250;
    try {
      while (!this.stopping) {
        const free = this.concurrency - this.held.size;
        if (free === 0) {
          await Promise.race([...this.held, this.stopped()]);
          continue;
        }
        let tasks: ClaimedTask[];
        try {
          tasks = await this.client.claim(this.queue, this.name, {
            max: free,
            wait: this.wait,
            lease: this.leaseMs,
            kinds: this.options.kinds,
          });
          backoff = 250;
        } catch (err) {
          const passing = err instanceof ConnectionFailed || (err instanceof ApiError && (err.status === 503 || err.status === 429));
          if (!passing) throw err;
          await Promise.race([new Promise((r) => setTimeout(r, backoff)), this.stopped()]);
          backoff = Math.min(backoff * 2, this.maxBackoffMs);
          continue;
        }
        for (const task of tasks) {
          const running: Promise<void> = this.runOne(task).finally(() => this.held.delete(running));
          this.held.add(running);
        }
      }
    } finally {
      await Promise.allSettled([...this.held]);
      if (signals && proc?.off) {
        proc.off("SIGTERM", onSignal);
        proc.off("SIGINT", onSignal);
      }
    }
  }

  private stopped(): Promise<void> {
    return new Promise((resolve) => {
      if (this.stopping) return resolve();
      this.wake = resolve;
    });
  }

  private async runOne(task: ClaimedTask): Promise<void> {
    const lost = new AbortController();
    const beat = setInterval(() => {
      this.client.extend(task.id, task.claim, this.leaseMs).catch((err) => {
        if (err instanceof ApiError && err.is("stale_claim")) lost.abort(new Error("the task's lease ran out"));
      });
    }, Math.max(this.leaseMs / 3, 200));
    let settle: () => Promise<unknown>;
    try {
      const answer = await this.handler(task, lost.signal);
      const text = answer === undefined || answer === null ? undefined : String(answer).slice(0, 1024);
      settle = () => this.client.ack(task.id, task.claim, text);
    } catch (err) {
      if (err instanceof Retry) {
        settle = () => this.client.nack(task.id, task.claim, err.message || "retry", { retryIn: err.retryIn });
      } else if (err instanceof GiveUp) {
        settle = () => this.client.nack(task.id, task.claim, err.message || "gave up", { dead: true });
      } else {
        const name = err instanceof Error ? err.name : "Error";
        const message = err instanceof Error ? err.message : String(err);
        settle = () => this.client.nack(task.id, task.claim, `${name}: ${message}`.slice(0, 1024));
      }
    } finally {
      clearInterval(beat);
    }
    try {
      const settled = (await settle()) as { outcome: string };
      if (settled.outcome === "done") this.acked++;
      else this.nacked++;
    } catch {
      // Stale (the lease ran out first) or not settled: the task is due
      // again at its lease's end, as the next attempt.
      this.lost++;
    }
  }
}
