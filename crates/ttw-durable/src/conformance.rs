//! The statement conformance suite: every function of `sql/` run on each
//! backend, with what it must do written down as assertions. A third
//! backend would be added to [`Backend`] and pass the same cases.
//!
//! SQLite runs always (in memory); PostgreSQL when `DATABASE_URL` is set
//! when the tests are built (a fresh schema per case, dropped after), and
//! is otherwise compiled as `#[ignore]`d (`build.rs`). The scheduler's
//! claims and outcomes (`claims.rs`) have their own fenced tests there and
//! in `ttw-tests`, and run here too.

use std::time::Duration;

use crate::client::store::{Store, StoreBuilder};
use crate::model::task::TaskState;
use crate::sql::db::Conn;
use crate::sql::recurring::{Advance, Change, Definition};
use crate::sql::tasks::{MakeDue, TaskParams, Which};
use crate::sql::testing::with_any_pool;
use crate::sql::{admin, history, keys, leases, recurring, tasks};

/// A backend the statements must behave alike on.
#[derive(Debug, Clone, Copy)]
enum Backend {
    Sqlite,
    #[cfg(feature = "postgres")]
    Postgres,
}

/// A retryable failure, `"boom"`, retried at `retry_at` under a default
/// limit of `default_max` attempts, at `now`.
fn boom(retry_at: i64, default_max: i64, now: i64) -> crate::sql::claims::AttemptFailed<'static> {
    crate::sql::claims::AttemptFailed {
        error: "boom",
        status: None,
        retry_at,
        default_max,
        dead_now: false,
        now,
    }
}

/// A store on `backend` for one case, and what to drop after it.
async fn open(backend: Backend, case: &str) -> (Store, Option<String>) {
    let builder = StoreBuilder::default()
        .shards(4)
        .connect_timeout(Duration::from_secs(20));
    match backend {
        Backend::Sqlite => (builder.sqlite_in_memory().await.unwrap(), None),
        #[cfg(feature = "postgres")]
        Backend::Postgres => {
            let url = std::env::var("DATABASE_URL")
                .expect("built with DATABASE_URL but run without it: set it, or rebuild without");
            let schema = format!("ttw_conf_{case}_{}", std::process::id());
            let store = builder
                .postgres_schema(schema.clone())
                .postgres(&url)
                .await
                .unwrap();
            (store, Some(schema))
        }
    }
}

/// Drops a PostgreSQL case's schema.
async fn close(store: Store, schema: Option<String>) {
    if let Some(schema) = schema {
        with_any_pool!(store.db(), pool => {
            sqlx::query(&format!("DROP SCHEMA IF EXISTS {schema} CASCADE"))
                .execute(pool)
                .await
                .unwrap();
        });
    }
}

/// Runs `$body` with `$conn` a [`Conn`] taken from the store's pool.
macro_rules! on_conn {
    ($store:expr, $conn:ident => $body:expr) => {
        with_any_pool!($store.db(), pool => {
            let mut held = pool.acquire().await.unwrap();
            let $conn = Conn::from(&mut *held);
            $body
        })
    };
}

/// Declares `$name` as one test per backend.
macro_rules! conformance {
    ($name:ident, $case:ident) => {
        mod $name {
            use super::*;

            #[tokio::test]
            async fn sqlite() {
                let (store, drop) = open(Backend::Sqlite, stringify!($name)).await;
                $case(&store).await;
                close(store, drop).await;
            }

            #[cfg(feature = "postgres")]
            #[tokio::test]
            #[cfg_attr(ttw_no_postgres, ignore = "needs DATABASE_URL when built")]
            async fn postgres() {
                let (store, drop) = open(Backend::Postgres, stringify!($name)).await;
                $case(&store).await;
                close(store, drop).await;
            }
        }
    };
}

fn task<'a>(run_at: i64, key: Option<&'a str>, queue: &'a str) -> TaskParams<'a> {
    TaskParams {
        run_at,
        payload: b"p",
        idempotency_key: key,
        max_attempts: None,
        recurring: None,
        queue,
        priority: 0,
        partition_key: None,
        envelope: None,
        kind: None,
    }
}

/// `tasks`: the insert returns the tasks created in row order (keyless
/// ones too), and nothing for a key taken in `ttw_tasks`; a task is read,
/// cancelled once (moving it to the history, still read), and made due
/// again only from the state asked.
async fn tasks_case(store: &Store) {
    let names = store.names();
    let rows = [
        task(1_000, None, "default"),
        task(2_000, Some("k1"), "mail"),
        task(3_000, None, "default"),
    ];
    let inserted = on_conn!(store, c => tasks::insert(c, names, &rows, 500).await.unwrap());
    assert_eq!(inserted.len(), 3);
    assert!(inserted[0].task.id < inserted[2].task.id);
    assert_eq!(inserted[1].idempotency_key.as_deref(), Some("k1"));
    assert_eq!(&*inserted[1].task.queue, "mail");
    assert_eq!(inserted[1].task.run_at, 2_000);
    let again = on_conn!(store, c => tasks::insert(c, names, &[task(9, Some("k1"), "x")], 500).await.unwrap());
    assert!(again.is_empty(), "a key taken in ttw_tasks creates nothing");

    let id = inserted[0].task.id;
    let info = tasks::get(store.db(), Which::Id(id))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        (info.state, info.attempts, info.payload),
        (TaskState::Scheduled, 0, b"p".to_vec())
    );
    let by_key = tasks::get(store.db(), Which::Key("k1"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(by_key.id.get(), inserted[1].task.id);
    assert!(tasks::get(store.db(), Which::Id(id + 100))
        .await
        .unwrap()
        .is_none());

    let moved = tasks::make_due(
        store.db(),
        names,
        MakeDue {
            which: Which::Key("k1"),
            from: TaskState::Scheduled,
            run_at: 7_000,
            restart: false,
        },
    )
    .await
    .unwrap();
    assert_eq!(
        moved.iter().map(|t| (t.id, t.run_at)).collect::<Vec<_>>(),
        [(inserted[1].task.id, 7_000)]
    );
    let not_dead = tasks::make_due(
        store.db(),
        names,
        MakeDue {
            which: Which::Id(id),
            from: TaskState::Dead,
            run_at: 7_000,
            restart: true,
        },
    )
    .await
    .unwrap();
    assert!(
        not_dead.is_empty(),
        "only a task in the state asked is changed"
    );

    assert!(tasks::cancel(store.db(), Which::Id(id), 600).await.unwrap());
    assert!(!tasks::cancel(store.db(), Which::Id(id), 601).await.unwrap());
    let info = tasks::get(store.db(), Which::Id(id))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(info.state, TaskState::Cancelled, "read from the history");
}
conformance!(task_statements, tasks_case);

/// `keys`: a key a finished task holds in the history is taken again by
/// the insert, and the protocol's last step deletes the new task and names
/// the finished one; holders are found in either table; a replacement
/// changes only a pending task.
async fn keys_case(store: &Store) {
    let names = store.names();
    let first = on_conn!(store, c => tasks::insert(c, names, &[task(1_000, Some("done-key"), "default")], 1).await.unwrap());
    let old = first[0].task.id;
    assert!(tasks::cancel(store.db(), Which::Id(old), 2).await.unwrap());
    let twin = on_conn!(store, c => tasks::insert(c, names, &[task(1_000, Some("done-key"), "default")], 3).await.unwrap());
    assert_eq!(
        twin.len(),
        1,
        "the history is not in ttw_tasks's unique index"
    );
    let new = twin[0].task.id;
    let gone = on_conn!(store, c => keys::drop_finished_twins(c, names, &[new]).await.unwrap());
    assert_eq!(gone, [(new, old)]);
    assert!(tasks::get(store.db(), Which::Id(new))
        .await
        .unwrap()
        .is_none());
    let none = on_conn!(store, c => keys::drop_finished_twins(c, names, &[]).await.unwrap());
    assert!(none.is_empty());

    let pending = on_conn!(store, c => tasks::insert(c, names, &[task(5_000, Some("p"), "default")], 4).await.unwrap());
    let found =
        on_conn!(store, c => keys::holders(c, names, &["p", "done-key", "nobody"]).await.unwrap());
    assert_eq!(found.len(), 2);
    assert_eq!(found["p"], pending[0].task.id);
    assert_eq!(found["done-key"], old);
    let holder = on_conn!(store, c => keys::holder(c, names, "done-key").await.unwrap()).unwrap();
    assert_eq!(
        (holder.id, holder.state, holder.is_pending()),
        (old, TaskState::Cancelled, false)
    );
    let holder = on_conn!(store, c => keys::holder(c, names, "p").await.unwrap()).unwrap();
    assert!(holder.is_pending());
    assert!(on_conn!(store, c => keys::holder(c, names, "nobody").await.unwrap()).is_none());

    let replacement = keys::Replacement {
        key: "p",
        payload: b"v2",
        run_at: None,
        max_attempts: Some(3),
        priority: None,
        max_wait: None,
        kind: None,
    };
    let replaced =
        on_conn!(store, c => keys::replace_pending(c, names, replacement).await.unwrap()).unwrap();
    assert_eq!(
        (replaced.id, replaced.run_at),
        (pending[0].task.id, 5_000),
        "the time is kept"
    );
    let info = tasks::get(store.db(), Which::Key("p"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!((info.payload, info.max_attempts), (b"v2".to_vec(), Some(3)));
    let finished = keys::Replacement {
        key: "done-key",
        ..replacement
    };
    assert!(
        on_conn!(store, c => keys::replace_pending(c, names, finished).await.unwrap()).is_none()
    );

    // A debounce's longest wait caps the time at the task's creation (4)
    // plus the wait, whatever time the replacement asks for.
    let capped = keys::Replacement {
        run_at: Some(9_000),
        max_wait: Some(2_000),
        ..replacement
    };
    let replaced = on_conn!(store, c => keys::replace_pending(c, names, capped).await.unwrap());
    assert_eq!(replaced.unwrap().run_at, 2_004);
    let sooner = keys::Replacement {
        run_at: Some(1_500),
        ..capped
    };
    let replaced = on_conn!(store, c => keys::replace_pending(c, names, sooner).await.unwrap());
    assert_eq!(
        replaced.unwrap().run_at,
        1_500,
        "a time before the cap is kept"
    );
    // The key released from the finished task, in the history, is free.
    on_conn!(store, c => keys::release(c, names, old).await.unwrap());
    assert!(on_conn!(store, c => keys::holder(c, names, "done-key").await.unwrap()).is_none());
    let again = on_conn!(store, c => tasks::insert(c, names, &[task(1_000, Some("done-key"), "default")], 5).await.unwrap());
    let new = again[0].task.id;
    let gone = on_conn!(store, c => keys::drop_finished_twins(c, names, &[new]).await.unwrap());
    assert!(gone.is_empty(), "no finished task holds the key now");
}
conformance!(key_statements, keys_case);

fn definition(name: &str, next_at: i64) -> Definition<'_> {
    Definition {
        name,
        shard: 0,
        cron: None,
        time_zone: None,
        every_ms: Some(10_000),
        catch_up: "skip",
        missed_after_ms: 60_000,
        payload: b"r",
        max_attempts: None,
        queue: "default",
        priority: 0,
        kind: None,
        next_at,
    }
}

/// `recurring` and `leases`: a schedule registered once, listed, held by
/// the session whose lease holds its shard, advanced under its fence (and
/// refused on a stale version), changed, paused, resumed and deleted; a
/// session joins, takes free shards, is seen by another, gives leases
/// back, leaves and ends.
async fn recurring_and_leases_case(store: &Store) {
    let (db, names) = (store.db(), store.names());
    assert!(
        recurring::register(db, names, definition("tick", 10_000), 1)
            .await
            .unwrap()
            .is_none()
    );
    let held = recurring::register(db, names, definition("tick", 99), 2)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        (held.name.as_str(), held.next_at, held.version),
        ("tick", 10_000, 0)
    );
    assert_eq!(
        recurring::list(db).await.unwrap(),
        std::slice::from_ref(&held)
    );

    let me = leases::Session {
        node: "n1",
        session: "n1/a",
        ttl_ms: 60_000,
    };
    leases::join(
        db,
        me,
        leases::Joining {
            process: Some("host:1"),
            queues: "default",
        },
    )
    .await
    .unwrap();
    let around = leases::look_around(db, me).await.unwrap();
    assert!(around.stamped && around.members.is_empty() && around.leases.is_empty());
    let search = leases::Search {
        queue: "default",
        shards: 4,
        offset: 0,
        want: 4,
    };
    let free = leases::free_shards(db, me, search).await.unwrap();
    assert_eq!(
        free.iter().map(|f| f.shard).collect::<Vec<_>>(),
        [0, 1, 2, 3]
    );
    assert!(free.iter().all(|f| f.owner_session.is_none()));
    let took = leases::take(
        db,
        me,
        leases::Shards {
            queue: "default",
            shards: &[0, 1, 2, 3],
        },
    )
    .await
    .unwrap();
    assert_eq!(took.len(), 4);
    assert_eq!(leases::look_around(db, me).await.unwrap().leases.len(), 4);
    assert_eq!(
        recurring::held(db, "n1/a").await.unwrap(),
        std::slice::from_ref(&held)
    );
    assert!(recurring::held(db, "n2/b").await.unwrap().is_empty());

    let other = leases::Session {
        node: "n2",
        session: "n2/b",
        ttl_ms: 60_000,
    };
    leases::join(
        db,
        other,
        leases::Joining {
            process: None,
            queues: "default",
        },
    )
    .await
    .unwrap();
    assert!(
        leases::free_shards(db, other, search)
            .await
            .unwrap()
            .is_empty(),
        "held shards are not free"
    );
    assert!(leases::take(
        db,
        other,
        leases::Shards {
            queue: "default",
            shards: &[0]
        }
    )
    .await
    .unwrap()
    .is_empty());
    let seen = leases::look_around(db, other).await.unwrap();
    assert_eq!(seen.members.len(), 1);
    assert_eq!(
        (seen.members[0].node.as_str(), seen.members[0].leaving),
        ("n1", false)
    );
    let nodes = admin::nodes(db).await.unwrap();
    assert_eq!(
        nodes
            .iter()
            .map(|n| (n.node_id.as_str(), n.leases))
            .collect::<Vec<_>>(),
        [("n1", 4), ("n2", 0)]
    );

    let key = "ttw:recurring:tick:10000";
    let occurrence = TaskParams {
        recurring: Some("tick"),
        ..task(10_000, Some(key), "default")
    };
    let pass = Advance {
        name: "tick",
        tasks: &[occurrence],
        next_at: 20_000,
        read_next_at: 10_000,
        read_version: 0,
    };
    let made = recurring::advance(db, names, pass, 5)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(made.len(), 1);
    let stale = recurring::advance(db, names, pass, 6).await.unwrap();
    assert!(
        stale.is_none(),
        "the fence refuses a pass that read an older next_at"
    );
    assert_eq!(recurring::list(db).await.unwrap()[0].next_at, 20_000);

    assert!(recurring::change(
        db,
        names,
        recurring::Changing {
            name: "tick",
            change: Change::Define(definition("tick", 30_000)),
            now: 7
        }
    )
    .await
    .unwrap());
    let row = &recurring::list(db).await.unwrap()[0];
    assert_eq!((row.next_at, row.version), (30_000, 1));
    assert!(
        tasks::get(db, Which::Key(key)).await.unwrap().is_none(),
        "its pending occurrence is deleted"
    );
    assert!(recurring::change(
        db,
        names,
        recurring::Changing {
            name: "tick",
            change: Change::Pause,
            now: 8
        }
    )
    .await
    .unwrap());
    assert!(!recurring::change(
        db,
        names,
        recurring::Changing {
            name: "tick",
            change: Change::Pause,
            now: 9
        }
    )
    .await
    .unwrap());
    assert!(
        recurring::held(db, "n1/a").await.unwrap().is_empty(),
        "a paused schedule is not held"
    );
    assert!(recurring::change(
        db,
        names,
        recurring::Changing {
            name: "tick",
            change: Change::Resume,
            now: 10
        }
    )
    .await
    .unwrap());
    assert!(recurring::change(
        db,
        names,
        recurring::Changing {
            name: "tick",
            change: Change::Delete,
            now: 11
        }
    )
    .await
    .unwrap());
    assert!(!recurring::change(
        db,
        names,
        recurring::Changing {
            name: "tick",
            change: Change::Delete,
            now: 12
        }
    )
    .await
    .unwrap());
    assert!(recurring::list(db).await.unwrap().is_empty());

    leases::release(
        db,
        "n1/a",
        leases::Shards {
            queue: "default",
            shards: &[3],
        },
    )
    .await
    .unwrap();
    assert_eq!(
        leases::free_shards(db, other, search).await.unwrap().len(),
        1
    );
    leases::release_all(db, "n1/a").await.unwrap();
    assert_eq!(
        leases::free_shards(db, other, search).await.unwrap().len(),
        4
    );
    leases::mark_leaving(db, "n1", "n1/a").await.unwrap();
    assert!(leases::look_around(db, other).await.unwrap().members[0].leaving);
    leases::end_membership(db, "n1", "n1/a").await.unwrap();
    assert!(leases::look_around(db, other)
        .await
        .unwrap()
        .members
        .is_empty());
    assert!(
        !leases::look_around(db, me).await.unwrap().stamped,
        "its row is gone"
    );
}
conformance!(recurring_and_lease_statements, recurring_and_leases_case);

/// `admin` and `history`: counts per state and queue, a filtered page
/// after an id, how late each queue is, due counts per bucket, finished
/// tasks counted, listed and redriven from either table, and the sweep.
async fn admin_case(store: &Store) {
    let (db, names) = (store.db(), store.names());
    assert_eq!(admin::schema_version(db).await.unwrap(), Some(16));
    let rows = [
        task(1_000, None, "a"),
        task(2_000, None, "a"),
        task(50_000, None, "b"),
        task(3_000, Some("dead"), "b"),
    ];
    let ids: Vec<i64> = on_conn!(store, c => tasks::insert(c, names, &rows, 1).await.unwrap())
        .iter()
        .map(|i| i.task.id)
        .collect();
    assert!(tasks::cancel(db, Which::Id(ids[0]), 100).await.unwrap());
    tasks::mark_dead(db, ids[3], 200).await.unwrap();

    let mut counts = admin::state_counts(db).await.unwrap();
    counts.sort();
    assert_eq!(
        counts,
        [
            ("cancelled".to_string(), 1),
            ("dead".to_string(), 1),
            ("scheduled".to_string(), 2)
        ]
    );
    let mut by_queue = admin::queue_state_counts(db).await.unwrap();
    by_queue.sort();
    assert_eq!(by_queue[0], ("a".to_string(), "cancelled".to_string(), 1));
    assert_eq!(by_queue.len(), 4);

    let filter = admin::Filter {
        state: Some(TaskState::Scheduled),
        due_before: Some(10_000),
        ..admin::Filter::default()
    };
    let page = admin::Page {
        filter,
        after: None,
        limit: 10,
        newest_first: false,
        by_due: false,
    };
    let got = admin::page(db, page).await.unwrap();
    assert_eq!(got.iter().map(|t| t.id.get()).collect::<Vec<_>>(), [ids[1]]);
    let after = admin::Page {
        filter: admin::Filter::default(),
        after: Some(admin::Cursor::Id(ids[1])),
        ..page
    };
    let got = admin::page(db, after).await.unwrap();
    assert_eq!(
        got.iter().map(|t| t.id.get()).collect::<Vec<_>>(),
        [ids[2], ids[3]]
    );

    assert_eq!(
        admin::oldest_due(db, 10_000).await.unwrap(),
        [("a".to_string(), 2_000)]
    );
    let mut buckets = admin::due_buckets(
        db,
        admin::Buckets {
            now: 10_000,
            width: 20_000,
            end: 100_000,
        },
    )
    .await
    .unwrap();
    buckets.sort();
    assert_eq!(
        buckets,
        [(-1, 1), (2, 1)],
        "one overdue, one in the third bucket"
    );

    let dead = admin::Filter {
        state: Some(TaskState::Dead),
        queue: Some("b"),
        ..admin::Filter::default()
    };
    assert_eq!(admin::count(db, dead).await.unwrap(), 1);
    assert_eq!(
        admin::ids(
            db,
            admin::IdPage {
                filter: dead,
                after: 0,
                take: 10
            }
        )
        .await
        .unwrap(),
        [ids[3]]
    );
    let cancelled = admin::Filter {
        state: Some(TaskState::Cancelled),
        ..admin::Filter::default()
    };
    assert_eq!(
        admin::ids(
            db,
            admin::IdPage {
                filter: cancelled,
                after: ids[0],
                take: 10
            }
        )
        .await
        .unwrap(),
        Vec::<i64>::new()
    );
    let back = admin::redrive(
        db,
        names,
        admin::Redriving {
            ids: &[ids[3]],
            state: TaskState::Dead,
            at: 400,
        },
    )
    .await
    .unwrap();
    assert_eq!(
        back.iter().map(|t| (t.id, t.run_at)).collect::<Vec<_>>(),
        [(ids[3], 400)]
    );
    let back = admin::redrive(
        db,
        names,
        admin::Redriving {
            ids: &[ids[0]],
            state: TaskState::Cancelled,
            at: 500,
        },
    )
    .await
    .unwrap();
    assert_eq!(
        back.iter().map(|t| (t.id, t.run_at)).collect::<Vec<_>>(),
        [(ids[0], 500)]
    );
    let info = tasks::get(db, Which::Id(ids[0])).await.unwrap().unwrap();
    assert_eq!((info.state, info.attempts), (TaskState::Scheduled, 0));

    assert!(tasks::cancel(db, Which::Id(ids[0]), 100).await.unwrap());
    assert_eq!(history::sweep(db, i64::MAX, 1).await.unwrap(), 1);
    assert!(tasks::get(db, Which::Id(ids[0])).await.unwrap().is_none());
}
conformance!(admin_and_history_statements, admin_case);

// After the macros above, which they use.
mod callbacks;
mod claims;
mod pull;
mod queues;
mod selection;
