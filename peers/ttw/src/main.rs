//! Contenders `ttw` (this crate's durable layer) and `poll` (the "poll every
//! second with `FOR UPDATE SKIP LOCKED`" loop, on the same tables) for the
//! peers benchmark. Run by the runner in `peers/`; see `peers/README.md`.

#[path = "../../src/harness.rs"]
mod harness;
#[path = "../../../crates/ttw-durable/benches/support/polling.rs"]
mod polling;

use harness::{Backend, Contender, Payload, Scenario};
use ttw_durable::{NewTask, Scheduler, Store};

async fn store(backend: &Backend) -> Store {
    match backend {
        Backend::Postgres(url) => Store::postgres(url).await,
        Backend::Sqlite(dir) => Store::sqlite(dir.join("tasks.db")).await,
    }
    .expect("open the store")
}

/// The durable layer with its defaults, but for the handlers in flight.
struct Ttw {
    store: Store,
    scheduler: Option<Scheduler>,
}

impl Contender for Ttw {
    const HAS_BATCH: bool = true;

    async fn open(backend: &Backend) -> Self {
        Ttw {
            store: store(backend).await,
            scheduler: None,
        }
    }

    async fn start(&mut self) {
        let scheduler = Scheduler::builder(self.store.clone())
            .max_concurrency(harness::concurrency())
            .start(|task| async move {
                harness::seen(Payload::from_bytes(task.payload()));
                Ok::<_, String>(())
            })
            .await
            .expect("start the scheduler");
        self.scheduler = Some(scheduler);
    }

    async fn insert(&self, task: Payload) {
        self.store
            .schedule(task.to_bytes())
            .at(task.due())
            .await
            .expect("schedule");
    }

    async fn insert_batch(&self, tasks: &[Payload]) {
        self.store
            .schedule_batch(tasks.iter().map(|t| NewTask::new(t.to_bytes()).at(t.due())))
            .await
            .expect("schedule a batch");
    }
}

/// The baseline: the store's tables, filled by the store, drained by a poll
/// loop. Task numbers are the rows' ids less one.
struct Poll {
    store: Store,
    backend: Backend,
}

impl Contender for Poll {
    const HAS_BATCH: bool = false;

    async fn open(backend: &Backend) -> Self {
        Poll {
            store: store(backend).await,
            backend: backend.clone(),
        }
    }

    async fn start(&mut self) {
        let pool = match &self.backend {
            Backend::Postgres(url) => polling::Pool::postgres(url, None).await,
            Backend::Sqlite(dir) => polling::Pool::sqlite(&dir.join("tasks.db")).await,
        };
        let run = |id: i64, run_at: i64| {
            harness::seen(Payload {
                n: (id - 1) as u64,
                due_ms: run_at,
            })
        };
        tokio::spawn(polling::poll_loop(pool, harness::concurrency(), run));
    }

    async fn insert(&self, task: Payload) {
        self.store
            .schedule(Vec::new())
            .at(task.due())
            .await
            .expect("schedule");
    }

    async fn insert_batch(&self, _: &[Payload]) {
        unreachable!("no batch insert")
    }
}

fn main() {
    harness::main(|name, scenario: Scenario, backend| async move {
        match name.as_str() {
            "ttw" => harness::scenario::<Ttw>(scenario, backend).await,
            "poll" => harness::scenario::<Poll>(scenario, backend).await,
            other => Err(format!("unknown contender {other:?}: ttw or poll")),
        }
    });
}
