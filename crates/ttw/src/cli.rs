//! The command line: the tool's commands and their arguments (`clap`).

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};
use ttw_durable::TaskState;

use crate::queues::QueueCommand;

/// Operate a tokio-timing-wheel durable task store: inspect tasks, nodes and
/// schedules; schedule, cancel, reschedule and redrive tasks; serve a
/// dashboard and Prometheus metrics.
#[derive(Debug, Parser)]
#[command(name = "ttw", version)]
pub(crate) struct Cli {
    /// The store: a SQLite file's path (or `sqlite:PATH`), or a PostgreSQL
    /// URL (`postgres://...`).
    #[arg(
        long,
        short = 'd',
        env = "DATABASE_URL",
        global = true,
        hide_env_values = true
    )]
    pub(crate) database: Option<String>,

    /// On PostgreSQL: the schema the store's tables are in (as
    /// `StoreBuilder::postgres_schema`); `public` if not given.
    #[arg(long, env = "TTW_SCHEMA", global = true)]
    pub(crate) schema: Option<String>,

    /// Print JSON (one document) instead of aligned text.
    #[arg(long, global = true)]
    pub(crate) json: bool,

    #[command(subcommand)]
    pub(crate) command: Command,
}

#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Create the schema, or bring it up to date; prints its version.
    Migrate,
    /// Tasks per queue and state, how late each queue is, and the nodes
    /// with the leases they hold.
    Status,
    /// Tasks, filtered, a page at a time (in id order).
    List(ListArgs),
    /// One task, by id or by idempotency key.
    Show(Target),
    /// Schedule a task.
    Schedule(ScheduleArgs),
    /// Cancel a task that is still scheduled.
    Cancel(Target),
    /// Move a task that is still scheduled to a new time.
    Reschedule(RescheduleArgs),
    /// Run finished tasks again: one, or many with `--all`, their due times
    /// spread over `--spread`.
    Redrive(RedriveArgs),
    /// The recurring schedules, with their next run.
    Schedules,
    /// Write the scheduled tasks and recurring schedules as JSON lines, to
    /// move them to another store with `ttw import` (SQLite to PostgreSQL).
    Export(ExportArgs),
    /// Schedule what `ttw export` wrote in this store: keys kept, none
    /// twice (a task without a key is keyed by its old id).
    Import(ImportArgs),
    /// A queue's settings every node obeys: pause, resume, global
    /// concurrency and rate.
    #[command(subcommand)]
    Queue(QueueCommand),
    /// Run the delayed-task service: the HTTP API, and a scheduler node
    /// delivering each configured queue (see the README's "Run it as a
    /// service").
    Server(ServerArgs),
    /// The service end to end in a minute: `ttw server` on a temporary
    /// SQLite store with a webhook receiver of its own; tasks scheduled over
    /// HTTP, delivered on time and signed; then the console's URL and token.
    Demo(DemoArgs),
}

#[derive(Debug, Args)]
pub(crate) struct DemoArgs {
    /// How many tasks to schedule, due one second apart (1 to 20).
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u32).range(1..=20))]
    pub(crate) tasks: u32,
    /// Keep the service and its console running until Ctrl-C.
    #[arg(long)]
    pub(crate) stay: bool,
}

#[derive(Debug, Args)]
pub(crate) struct ServerArgs {
    /// The configuration file (TOML).
    #[arg(long, value_name = "FILE", required_unless_present = "openapi")]
    pub(crate) config: Option<PathBuf>,
    /// Check the file (and the environment variables it names) and exit.
    #[arg(long)]
    pub(crate) check: bool,
    /// Print the API's OpenAPI 3.1 document (as `GET /v1/openapi.json`
    /// serves it) and exit: for client generators.
    #[arg(long, conflicts_with_all = ["config", "check"])]
    pub(crate) openapi: bool,
}

/// A task, by id or by `--key`.
#[derive(Debug, Args)]
pub(crate) struct Target {
    /// The task's id.
    #[arg(required_unless_present = "key", conflicts_with = "key")]
    pub(crate) id: Option<i64>,
    /// The task's idempotency key instead of its id.
    #[arg(long)]
    pub(crate) key: Option<String>,
}

#[derive(Debug, Args)]
pub(crate) struct ListArgs {
    /// Only tasks in this state (scheduled, running, done, dead,
    /// cancelled).
    #[arg(long)]
    pub(crate) state: Option<TaskState>,
    /// Only tasks of this queue.
    #[arg(long)]
    pub(crate) queue: Option<String>,
    /// Only typed jobs of this kind.
    #[arg(long)]
    pub(crate) kind: Option<String>,
    /// Only tasks due at this time or later (RFC 3339, e.g.
    /// 2026-11-25T10:00:00Z).
    #[arg(long, value_name = "TIME")]
    pub(crate) due_from: Option<String>,
    /// Only tasks due before this time (RFC 3339).
    #[arg(long, value_name = "TIME")]
    pub(crate) due_before: Option<String>,
    /// The page after this task id (the last id of the previous page).
    #[arg(long, value_name = "ID")]
    pub(crate) after: Option<i64>,
    /// Tasks per page (1 to 1000).
    #[arg(long, default_value_t = 50)]
    pub(crate) limit: u32,
}

/// When: `--in` a duration from now, or `--at` a time.
#[derive(Debug, Args)]
pub(crate) struct When {
    /// Due after this long (e.g. 30s, 5m, 1h 30m).
    #[arg(
        long = "in",
        value_name = "DURATION",
        conflicts_with = "at",
        allow_hyphen_values = true
    )]
    pub(crate) after: Option<String>,
    /// Due at this time (RFC 3339, e.g. 2026-11-25T10:00:00Z).
    #[arg(long, value_name = "TIME")]
    pub(crate) at: Option<String>,
}

#[derive(Debug, Args)]
pub(crate) struct ScheduleArgs {
    /// The payload, as text.
    #[arg(required_unless_present = "file", conflicts_with = "file")]
    pub(crate) payload: Option<String>,
    /// Read the payload from this file instead (`-` for standard input).
    #[arg(long, value_name = "PATH")]
    pub(crate) file: Option<PathBuf>,
    #[command(flatten)]
    pub(crate) when: When,
    /// The task's queue.
    #[arg(long, default_value = "default")]
    pub(crate) queue: String,
    /// An idempotency key: scheduling it again returns the existing task.
    #[arg(long)]
    pub(crate) key: Option<String>,
    /// Lower runs first within a queue.
    #[arg(long, default_value_t = 0, allow_negative_numbers = true)]
    pub(crate) priority: i16,
    /// Attempts before the task is dead (default: the scheduler's).
    #[arg(long)]
    pub(crate) max_attempts: Option<u32>,
}

#[derive(Debug, Args)]
pub(crate) struct ExportArgs {
    /// Write to this file instead of standard output.
    #[arg(long, value_name = "FILE")]
    pub(crate) output: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub(crate) struct ImportArgs {
    /// The file `ttw export` wrote (`-` for standard input).
    #[arg(value_name = "FILE")]
    pub(crate) file: PathBuf,
}

#[derive(Debug, Args)]
pub(crate) struct RescheduleArgs {
    #[command(flatten)]
    pub(crate) target: Target,
    #[command(flatten)]
    pub(crate) when: When,
}

#[derive(Debug, Args)]
pub(crate) struct RedriveArgs {
    /// The dead task to run again.
    #[arg(required_unless_present = "all", conflicts_with = "all")]
    pub(crate) id: Option<i64>,
    /// Every task in `--state` (of `--queue`), up to `--limit`.
    #[arg(long)]
    pub(crate) all: bool,
    /// With --all: the state to take tasks from (dead, cancelled or done).
    #[arg(long, default_value = "dead", requires = "all")]
    pub(crate) state: TaskState,
    /// With --all: only tasks of this queue.
    #[arg(long, requires = "all")]
    pub(crate) queue: Option<String>,
    /// With --all: at most this many tasks.
    #[arg(long, default_value_t = 1000, requires = "all")]
    pub(crate) limit: u64,
    /// With --all: spread the due times from now over this span (groups of
    /// at most 500 tasks share a time), e.g. 10m.
    #[arg(
        long,
        value_name = "DURATION",
        default_value = "0s",
        requires = "all",
        allow_hyphen_values = true
    )]
    pub(crate) spread: String,
}
