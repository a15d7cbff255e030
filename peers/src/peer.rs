//! The peers as contenders: River's Rust client (`river`, PostgreSQL and
//! SQLite), graphile_worker (`graphile`, PostgreSQL), apalis (`apalis`,
//! PostgreSQL and SQLite) and awa (`awa`, PostgreSQL). Each is set up the way its README's first example
//! does it; the only knob changed is the handlers in flight
//! ([`harness::concurrency`], the same for every contender). Run by the
//! runner; see README.md.

mod harness;

use std::str::FromStr;
use std::time::Duration;

use apalis::prelude::{BoxDynError, TaskBuilder, TaskSink, WorkerBuilder, WorkerBuilderExt};
use harness::{Backend, Contender, Payload, Scenario};
use serde::{Deserialize, Serialize};
use tokio::sync::Mutex;

/// Every peer's job arguments: the task's number and due instant.
#[derive(Clone, Copy, Debug, Deserialize, Serialize, riverqueue::JobArgs)]
#[river(kind = "peer_task")]
struct Job {
    n: u64,
    due_ms: i64,
}

impl From<Payload> for Job {
    fn from(p: Payload) -> Job {
        Job {
            n: p.n,
            due_ms: p.due_ms,
        }
    }
}

impl Job {
    fn seen(self) {
        harness::seen(Payload {
            n: self.n,
            due_ms: self.due_ms,
        })
    }
}

// ---- River ----------------------------------------------------------------

enum RiverDb {
    Postgres(sqlx::PgPool),
    Sqlite(sqlx::SqlitePool),
}

struct River {
    client: riverqueue::Client,
    run: Option<riverqueue::RunHandle>,
}

fn river_at(due_ms: i64) -> riverqueue::InsertOpts {
    let at = riverqueue::jiff::Timestamp::from_millisecond(due_ms).expect("a valid instant");
    riverqueue::InsertOpts::default().with_scheduled_at(at)
}

impl Contender for River {
    const HAS_BATCH: bool = true;

    async fn open(backend: &Backend) -> Self {
        use riverqueue::migrate::{PostgresMigrator, SqliteMigrator};
        // As River's examples: a pool with its defaults; on SQLite, WAL and a
        // busy timeout.
        let db = match backend {
            Backend::Postgres(url) => {
                let pool = sqlx::PgPool::connect(url).await.expect("connect");
                PostgresMigrator::new(pool.clone())
                    .migrate_up()
                    .await
                    .expect("migrate");
                RiverDb::Postgres(pool)
            }
            Backend::Sqlite(dir) => {
                let path = dir.join("river.sqlite3");
                let options = sqlx::sqlite::SqliteConnectOptions::from_str(&format!(
                    "sqlite://{}",
                    path.display()
                ))
                .expect("a path")
                .create_if_missing(true)
                .journal_mode(sqlx::sqlite::SqliteJournalMode::Wal)
                .busy_timeout(Duration::from_secs(5));
                let pool = sqlx::sqlite::SqlitePoolOptions::new()
                    .connect_with(options)
                    .await
                    .expect("open");
                SqliteMigrator::new(pool.clone())
                    .migrate_up()
                    .await
                    .expect("migrate");
                RiverDb::Sqlite(pool)
            }
        };
        let mut workers = riverqueue::Workers::new();
        workers
            .add_fn(
                |_ctx: riverqueue::WorkContext, job: riverqueue::Job<Job>| async move {
                    job.args.seen();
                    Ok::<_, riverqueue::BoxError>(riverqueue::WorkOutcome::Complete)
                },
            )
            .expect("add the worker");
        let builder = match db {
            RiverDb::Postgres(pool) => riverqueue::Client::builder(pool),
            RiverDb::Sqlite(pool) => riverqueue::Client::builder(pool),
        };
        let client = builder
            .workers(workers)
            .queue(
                "default",
                riverqueue::QueueConfig::new(harness::concurrency()),
            )
            .build()
            .expect("build the client");
        River { client, run: None }
    }

    async fn start(&mut self) {
        self.run = Some(self.client.start().expect("start"));
    }

    async fn insert(&self, task: Payload) {
        self.client
            .insert(Job::from(task))
            .opts(river_at(task.due_ms))
            .await
            .expect("insert");
    }

    async fn insert_batch(&self, tasks: &[Payload]) {
        self.client
            .insert_many(tasks.iter().map(|&t| (Job::from(t), river_at(t.due_ms))))
            .await
            .expect("insert_many");
    }
}

// ---- graphile_worker --------------------------------------------------------

impl graphile_worker::TaskHandler for Job {
    const IDENTIFIER: &'static str = "peer_task";

    async fn run(
        self,
        _ctx: graphile_worker::WorkerContext,
    ) -> impl graphile_worker::IntoTaskHandlerResult {
        self.seen();
        Ok::<(), String>(())
    }
}

struct Graphile {
    worker: Option<graphile_worker::Worker>,
    utils: graphile_worker::WorkerUtils,
}

fn graphile_at(due_ms: i64) -> graphile_worker::JobSpec {
    let at = chrono::DateTime::from_timestamp_millis(due_ms).expect("a valid instant");
    graphile_worker::JobSpec {
        run_at: Some(at),
        ..Default::default()
    }
}

impl Contender for Graphile {
    const HAS_BATCH: bool = true;

    async fn open(backend: &Backend) -> Self {
        let Backend::Postgres(url) = backend else {
            panic!("graphile_worker runs on PostgreSQL only");
        };
        let worker = graphile_worker::WorkerOptions::default()
            .database_url(url)
            .concurrency(harness::concurrency())
            .define_job::<Job>()
            .init()
            .await
            .expect("init");
        let utils = worker.create_utils();
        Graphile {
            worker: Some(worker),
            utils,
        }
    }

    async fn start(&mut self) {
        let worker = self.worker.take().expect("started once");
        tokio::spawn(async move { worker.run().await.expect("run") });
    }

    async fn insert(&self, task: Payload) {
        self.utils
            .add_job(Job::from(task), graphile_at(task.due_ms))
            .await
            .expect("add_job");
    }

    async fn insert_batch(&self, tasks: &[Payload]) {
        let specs: Vec<graphile_worker::JobSpec> =
            tasks.iter().map(|t| graphile_at(t.due_ms)).collect();
        let jobs: Vec<(Job, &graphile_worker::JobSpec)> = tasks
            .iter()
            .zip(&specs)
            .map(|(&t, spec)| (Job::from(t), spec))
            .collect();
        self.utils.add_jobs(&jobs).await.expect("add_jobs");
    }
}

// ---- apalis -----------------------------------------------------------------

async fn apalis_handler(job: Job) -> Result<(), BoxDynError> {
    job.seen();
    Ok(())
}

fn apalis_task(t: Payload) -> apalis::prelude::Task<Job> {
    // apalis keeps run_at in whole seconds.
    TaskBuilder::new(Job::from(t)).run_at_time(t.due()).build()
}

enum ApalisSink {
    Postgres(apalis_postgres::PostgresStorage<Job>),
    Sqlite(apalis_sqlite::SqliteStorage<Job>),
}

struct Apalis {
    sink: Mutex<ApalisSink>,
    worker_storage: Option<ApalisSink>,
}

impl Contender for Apalis {
    const HAS_BATCH: bool = true;

    async fn open(backend: &Backend) -> Self {
        // As the READMEs' basic examples: setup, then the polling storage.
        let (sink, worker_storage) = match backend {
            Backend::Postgres(url) => {
                let pool = apalis_postgres::PgPool::connect(url)
                    .await
                    .expect("connect");
                apalis_postgres::PostgresStorage::setup(&pool)
                    .await
                    .expect("setup");
                (
                    ApalisSink::Postgres(apalis_postgres::PostgresStorage::new(&pool)),
                    ApalisSink::Postgres(apalis_postgres::PostgresStorage::new(&pool)),
                )
            }
            Backend::Sqlite(dir) => {
                let path = dir.join("apalis.sqlite3");
                let options = sqlx::sqlite::SqliteConnectOptions::new()
                    .filename(&path)
                    .create_if_missing(true);
                let pool = apalis_sqlite::SqlitePool::connect_with(options)
                    .await
                    .expect("open");
                apalis_sqlite::SqliteStorage::setup(&pool)
                    .await
                    .expect("setup");
                (
                    ApalisSink::Sqlite(apalis_sqlite::SqliteStorage::new(&pool)),
                    ApalisSink::Sqlite(apalis_sqlite::SqliteStorage::new(&pool)),
                )
            }
        };
        Apalis {
            sink: Mutex::new(sink),
            worker_storage: Some(worker_storage),
        }
    }

    async fn start(&mut self) {
        match self.worker_storage.take().expect("started once") {
            ApalisSink::Postgres(storage) => {
                let worker = WorkerBuilder::new("peer")
                    .backend(storage)
                    .concurrency(harness::concurrency())
                    .build(apalis_handler);
                tokio::spawn(async move { worker.run().await.expect("run") });
            }
            ApalisSink::Sqlite(storage) => {
                let worker = WorkerBuilder::new("peer")
                    .backend(storage)
                    .concurrency(harness::concurrency())
                    .build(apalis_handler);
                tokio::spawn(async move { worker.run().await.expect("run") });
            }
        }
    }

    async fn insert(&self, task: Payload) {
        let mut sink = self.sink.lock().await;
        match &mut *sink {
            ApalisSink::Postgres(s) => s.push_task(apalis_task(task)).await.expect("push"),
            ApalisSink::Sqlite(s) => s.push_task(apalis_task(task)).await.expect("push"),
        }
    }

    async fn insert_batch(&self, tasks: &[Payload]) {
        let mut sink = self.sink.lock().await;
        let mut all = futures::stream::iter(tasks.iter().map(|&t| apalis_task(t)));
        match &mut *sink {
            ApalisSink::Postgres(s) => s.push_all(&mut all).await.expect("push_all"),
            ApalisSink::Sqlite(s) => s.push_all(&mut all).await.expect("push_all"),
        }
    }
}

// ---- awa --------------------------------------------------------------------

/// awa's job arguments (its derive names the kind `awa_task`).
#[derive(Clone, Copy, Debug, Deserialize, Serialize, awa::JobArgs)]
struct AwaTask {
    n: u64,
    due_ms: i64,
}

struct Awa {
    pool: sqlx08::PgPool,
    client: awa::Client,
}

fn awa_params(t: Payload) -> awa::InsertParams {
    let opts = awa::InsertOpts {
        run_at: Some(chrono::DateTime::from_timestamp_millis(t.due_ms).expect("a valid instant")),
        ..Default::default()
    };
    awa::insert::params_with(
        &AwaTask {
            n: t.n,
            due_ms: t.due_ms,
        },
        opts,
    )
    .expect("job arguments")
}

impl Contender for Awa {
    const HAS_BATCH: bool = true;

    async fn open(backend: &Backend) -> Self {
        let Backend::Postgres(url) = backend else {
            panic!("awa runs on PostgreSQL only");
        };
        // As awa's README: a pool with sqlx's defaults, its migrations, one
        // queue with its defaults but the workers.
        let pool = sqlx08::PgPool::connect(url).await.expect("connect");
        awa::migrations::run(&pool).await.expect("migrate");
        let client = awa::Client::builder(pool.clone())
            .queue(
                "default",
                awa::QueueConfig {
                    max_workers: harness::concurrency() as u32,
                    ..Default::default()
                },
            )
            .register::<AwaTask, _, _>(|task, _ctx| async move {
                Job {
                    n: task.n,
                    due_ms: task.due_ms,
                }
                .seen();
                Ok(awa::JobResult::Completed)
            })
            .build()
            .expect("build the client");
        Awa { pool, client }
    }

    async fn start(&mut self) {
        self.client.start().await.expect("start");
    }

    async fn insert(&self, task: Payload) {
        awa::insert::insert_many(&self.pool, &[awa_params(task)])
            .await
            .expect("insert");
    }

    async fn insert_batch(&self, tasks: &[Payload]) {
        // Its bulk path, `COPY`.
        let params: Vec<awa::InsertParams> = tasks.iter().map(|&t| awa_params(t)).collect();
        awa::insert_many_copy_from_pool(&self.pool, &params)
            .await
            .expect("insert_many_copy");
    }
}

fn main() {
    harness::main(|name, scenario: Scenario, backend| async move {
        match name.as_str() {
            "river" => harness::scenario::<River>(scenario, backend).await,
            "graphile" => harness::scenario::<Graphile>(scenario, backend).await,
            "apalis" => harness::scenario::<Apalis>(scenario, backend).await,
            "awa" => harness::scenario::<Awa>(scenario, backend).await,
            other => Err(format!(
                "unknown contender {other:?}: river, graphile, apalis or awa"
            )),
        }
    });
}
