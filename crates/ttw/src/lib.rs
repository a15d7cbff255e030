//! `ttw`: the operator's tool for `ttw-durable` task stores.
//!
//! The `ttw` binary is [`main`]; install it with `cargo install --path
//! crates/ttw`. See the README's "Operating it", or `ttw --help`.
#![forbid(unsafe_code)]
#![warn(
    missing_docs,
    missing_debug_implementations,
    rust_2018_idioms,
    unreachable_pub
)]

mod commands;
mod output;
mod queues;
mod serve;
mod server;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};
use ttw_durable::{Store, TaskState};

/// Operate a tokio-timing-wheel durable task store: inspect tasks, nodes and
/// schedules; schedule, cancel, reschedule and redrive tasks; serve a
/// dashboard and Prometheus metrics.
#[derive(Debug, Parser)]
#[command(name = "ttw", version)]
struct Cli {
    /// The store: a SQLite file's path (or `sqlite:PATH`), or a PostgreSQL
    /// URL (`postgres://...`).
    #[arg(
        long,
        short = 'd',
        env = "DATABASE_URL",
        global = true,
        hide_env_values = true
    )]
    database: Option<String>,

    /// On PostgreSQL: the schema the store's tables are in (as
    /// `StoreBuilder::postgres_schema`); `public` if not given.
    #[arg(long, env = "TTW_SCHEMA", global = true)]
    schema: Option<String>,

    /// Print JSON (one document) instead of aligned text.
    #[arg(long, global = true)]
    json: bool,

    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
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
    /// A queue's settings every node obeys: pause, resume, global
    /// concurrency and rate.
    #[command(subcommand)]
    Queue(queues::QueueCommand),
    /// Serve the dashboard page and `/metrics` for Prometheus.
    Serve(ServeArgs),
    /// Run the delayed-task service: the HTTP API, and a scheduler node
    /// delivering each configured queue (see the README's "Run it as a
    /// service").
    Server(ServerArgs),
}

#[derive(Debug, Args)]
struct ServerArgs {
    /// The configuration file (TOML).
    #[arg(long, value_name = "FILE")]
    config: PathBuf,
    /// Check the file (and the environment variables it names) and exit.
    #[arg(long)]
    check: bool,
}

/// A task, by id or by `--key`.
#[derive(Debug, Args)]
struct Target {
    /// The task's id.
    #[arg(required_unless_present = "key", conflicts_with = "key")]
    id: Option<i64>,
    /// The task's idempotency key instead of its id.
    #[arg(long)]
    key: Option<String>,
}

/// A task state, as the command line names it.
#[derive(Debug, Clone, Copy, ValueEnum)]
enum State {
    Scheduled,
    Running,
    Done,
    Dead,
    Cancelled,
}

impl From<State> for TaskState {
    fn from(s: State) -> TaskState {
        match s {
            State::Scheduled => TaskState::Scheduled,
            State::Running => TaskState::Running,
            State::Done => TaskState::Done,
            State::Dead => TaskState::Dead,
            State::Cancelled => TaskState::Cancelled,
        }
    }
}

#[derive(Debug, Args)]
struct ListArgs {
    /// Only tasks in this state.
    #[arg(long, value_enum)]
    state: Option<State>,
    /// Only tasks of this queue.
    #[arg(long)]
    queue: Option<String>,
    /// Only tasks due at this time or later (RFC 3339, e.g.
    /// 2026-11-25T10:00:00Z).
    #[arg(long, value_name = "TIME")]
    due_from: Option<String>,
    /// Only tasks due before this time (RFC 3339).
    #[arg(long, value_name = "TIME")]
    due_before: Option<String>,
    /// The page after this task id (the last id of the previous page).
    #[arg(long, value_name = "ID")]
    after: Option<i64>,
    /// Tasks per page (1 to 1000).
    #[arg(long, default_value_t = 50)]
    limit: u32,
}

/// When: `--in` a duration from now, or `--at` a time.
#[derive(Debug, Args)]
struct When {
    /// Due after this long (e.g. 30s, 5m, 1h 30m).
    #[arg(
        long = "in",
        value_name = "DURATION",
        conflicts_with = "at",
        allow_hyphen_values = true
    )]
    after: Option<String>,
    /// Due at this time (RFC 3339, e.g. 2026-11-25T10:00:00Z).
    #[arg(long, value_name = "TIME")]
    at: Option<String>,
}

#[derive(Debug, Args)]
struct ScheduleArgs {
    /// The payload, as text.
    #[arg(required_unless_present = "file", conflicts_with = "file")]
    payload: Option<String>,
    /// Read the payload from this file instead (`-` for standard input).
    #[arg(long, value_name = "PATH")]
    file: Option<PathBuf>,
    #[command(flatten)]
    when: When,
    /// The task's queue.
    #[arg(long, default_value = "default")]
    queue: String,
    /// An idempotency key: scheduling it again returns the existing task.
    #[arg(long)]
    key: Option<String>,
    /// Lower runs first within a queue.
    #[arg(long, default_value_t = 0, allow_negative_numbers = true)]
    priority: i16,
    /// Attempts before the task is dead (default: the scheduler's).
    #[arg(long)]
    max_attempts: Option<u32>,
}

#[derive(Debug, Args)]
struct RescheduleArgs {
    #[command(flatten)]
    target: Target,
    #[command(flatten)]
    when: When,
}

#[derive(Debug, Args)]
struct RedriveArgs {
    /// The dead task to run again.
    #[arg(required_unless_present = "all", conflicts_with = "all")]
    id: Option<i64>,
    /// Every task in `--state` (of `--queue`), up to `--limit`.
    #[arg(long)]
    all: bool,
    /// With --all: the state to take tasks from (dead, cancelled or done).
    #[arg(long, value_enum, default_value = "dead", requires = "all")]
    state: State,
    /// With --all: only tasks of this queue.
    #[arg(long, requires = "all")]
    queue: Option<String>,
    /// With --all: at most this many tasks.
    #[arg(long, default_value_t = 1000, requires = "all")]
    limit: u64,
    /// With --all: spread the due times from now over this span (groups of
    /// at most 500 tasks share a time), e.g. 10m.
    #[arg(
        long,
        value_name = "DURATION",
        default_value = "0s",
        requires = "all",
        allow_hyphen_values = true
    )]
    spread: String,
}

#[derive(Debug, Args)]
struct ServeArgs {
    /// The address to listen on; loopback unless you say otherwise.
    #[arg(long, default_value = "127.0.0.1:7878")]
    listen: SocketAddr,
    /// The token that actions changing data (redrive, cancel) require;
    /// generated and printed if not given. May also come from TTW_TOKEN.
    #[arg(long, env = "TTW_TOKEN", hide_env_values = true)]
    token: Option<String>,
    /// How often the counts are read again for the page and the metrics.
    #[arg(long, value_name = "DURATION", default_value = "5s")]
    refresh: String,
}

/// What failed, as one line for the operator.
#[derive(Debug)]
pub(crate) struct Failure(pub(crate) String);

impl<E: std::fmt::Display> From<E> for Failure {
    fn from(err: E) -> Failure {
        Failure(err.to_string())
    }
}

pub(crate) type Result<T> = std::result::Result<T, Failure>;

/// A failure with this message.
pub(crate) fn fail<T>(message: impl Into<String>) -> Result<T> {
    Err(Failure(message.into()))
}

/// Runs the tool on this process's arguments: parses them (a usage error is
/// clap's message and exit 2), runs the command on a runtime of its own,
/// and answers how the process should exit (an error is one line on
/// standard error, `ttw: error: ...`, and exit 1).
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(err) => {
            eprintln!("ttw: error: cannot start the runtime: {err}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(cli)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(Failure(message)) => {
            eprintln!("ttw: error: {message}");
            ExitCode::FAILURE
        }
    }
}

async fn run(cli: Cli) -> Result<()> {
    if let Command::Server(args) = &cli.command {
        return server::server(&args.config, args.check).await;
    }
    let Some(database) = cli.database.as_deref() else {
        return fail("no database: pass --database PATH_OR_URL or set DATABASE_URL");
    };
    let creating = matches!(cli.command, Command::Migrate);
    let store = open(database, cli.schema.as_deref(), creating).await?;
    let json = cli.json;
    match cli.command {
        Command::Migrate => commands::migrate(&store, json).await,
        Command::Status => commands::status(&store, json).await,
        Command::List(args) => commands::list(&store, args, json).await,
        Command::Show(target) => commands::show(&store, target, json).await,
        Command::Schedule(args) => commands::schedule(&store, args, json).await,
        Command::Cancel(target) => commands::cancel(&store, target, json).await,
        Command::Reschedule(args) => commands::reschedule(&store, args, json).await,
        Command::Redrive(args) => commands::redrive(&store, args, json).await,
        Command::Schedules => commands::schedules(&store, json).await,
        Command::Queue(command) => queues::queue(&store, command, json).await,
        Command::Serve(args) => serve::serve(store, args).await,
        // Handled above, before a database is opened.
        Command::Server(_) => fail("ttw server opens the database its configuration names"),
    }
}

/// Opens the store `database` names. A SQLite file must exist unless
/// `creating` (only `migrate` creates one: a misspelt path is an error,
/// not a new empty store).
async fn open(database: &str, schema: Option<&str>, creating: bool) -> Result<Store> {
    let mut builder = Store::builder().connect_timeout(Duration::from_secs(5));
    if database.starts_with("postgres://") || database.starts_with("postgresql://") {
        if let Some(schema) = schema {
            builder = builder.postgres_schema(schema);
        }
        return builder
            .postgres(database)
            .await
            .map_err(|err| Failure(format!("cannot open the PostgreSQL store: {err}")));
    }
    if database.contains("://") {
        return fail(format!(
            "not a database this tool knows: {database:?} (a SQLite path, or a postgres:// URL)"
        ));
    }
    if schema.is_some() {
        return fail("--schema is for PostgreSQL; this database is a SQLite file");
    }
    let path = database.strip_prefix("sqlite:").unwrap_or(database);
    if !creating && !std::path::Path::new(path).exists() {
        return fail(format!(
            "no database at {path} (create it with `ttw --database {path} migrate`)"
        ));
    }
    builder
        .sqlite(path)
        .await
        .map_err(|err| Failure(format!("cannot open the SQLite store at {path}: {err}")))
}

/// A duration as the command line writes it: `30s`, `5m`, `1h 30m`.
/// A duration written with a minus sign (`-5m`) is refused as negative,
/// not as a flag the tool does not know.
pub(crate) fn parse_duration(what: &str, text: &str) -> Result<Duration> {
    if text.trim_start().starts_with('-') {
        return Err(Failure(format!(
            "{what}: a delay cannot be negative: {text:?} (for a time in the past, use --at)"
        )));
    }
    humantime::parse_duration(text).map_err(|err| {
        Failure(format!(
            "{what}: not a duration: {text:?} ({err}; try 30s, 5m, 1h)"
        ))
    })
}

/// A time as the command line writes it: RFC 3339, with any offset (the
/// library's one parser, [`ttw_durable::parse_time`]).
pub(crate) fn parse_time(what: &str, text: &str) -> Result<std::time::SystemTime> {
    ttw_durable::parse_time(text).map_err(|err| Failure(format!("{what}: {err}")))
}
