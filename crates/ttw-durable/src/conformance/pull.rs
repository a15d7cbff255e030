//! `claims::pull`: a pull queue's statements: the claim under a lease (due
//! order, kinds, pause, concurrency, per-key concurrency), ack, nack and
//! extend fenced on the claim, and the reclaim of a lease run out.

use super::*;
use crate::model::backoff::Backoff;
use crate::model::flow::{QueueLimits, Rate};
use crate::sql::claims::pull::{self, Nacked, Nacking, Pulling, Settled};
use crate::sql::queues;
use std::time::Duration;

fn pulling<'a>(now: i64, max: i64, kinds: &'a [String]) -> Pulling<'a> {
    Pulling {
        queue: "default",
        max,
        now,
        lease_until: now + 1_000,
        worker: "w1",
        kinds,
    }
}

fn nacking(id: i64, claim: i64, now: i64) -> Nacking<'static> {
    Nacking {
        id,
        claim,
        now,
        error: "no printer",
        retry_in: Some(500),
        dead: false,
        backoff: Backoff::default(),
        default_max: 3,
    }
}

async fn state(store: &Store, id: i64) -> TaskState {
    tasks::get(store.db(), Which::Id(id))
        .await
        .unwrap()
        .unwrap()
        .state
}

/// The claim hands out due tasks in due order, leased to the worker, each
/// once; ack, nack and extend pass only under the current claim before the
/// lease runs out; a nack is a retry recorded under the worker's name, or
/// dead; a lease run out is taken back by the reclaim as `expired`; a
/// queue's pause, concurrency and per-key concurrency bound the claim, and
/// kinds filter it.
async fn pull_case(store: &Store) {
    let (db, names) = (store.db(), store.names());
    let any = |_: &str| true;
    let far = 4_000_000_000_000;
    let mut typed = task(1_500, None, "default");
    typed.kind = Some("receipt");
    let rows = [
        task(1_000, None, "default"),
        typed,
        task(2_000, None, "default"),
        task(far, None, "default"),
    ];
    let ids: Vec<i64> = on_conn!(store, c => tasks::insert(c, names, &rows, 1).await.unwrap())
        .iter()
        .map(|i| i.task.id)
        .collect();

    // Of kind `receipt` only.
    let kinds = ["receipt".to_string()];
    let typed = pull::claim(db, pulling(3_000, 10, &kinds))
        .await
        .unwrap()
        .rows;
    assert_eq!(typed.iter().map(|r| r.id).collect::<Vec<_>>(), [ids[1]]);
    assert_eq!(typed[0].kind.as_deref(), Some("receipt"));

    // The rest that is due, in due order, never the one due later.
    let held = pull::claim(db, pulling(3_000, 10, &[])).await.unwrap().rows;
    assert_eq!(
        held.iter()
            .map(|r| (r.id, r.attempts, r.claims))
            .collect::<Vec<_>>(),
        [(ids[0], 1, 1), (ids[2], 1, 1)]
    );
    assert!(pull::claim(db, pulling(3_000, 10, &[]))
        .await
        .unwrap()
        .rows
        .is_empty());

    // Ack: once, under the current claim, while the lease holds.
    let ack = |id, claim, now| async move {
        let one = [pull::Acking {
            id,
            claim,
            answer: Some("printed"),
            allowed: &any,
        }];
        pull::ack(db, names, &one, now)
            .await
            .map(|(mut settled, told)| (settled.remove(0), told))
    };
    assert_eq!(ack(ids[0], 2, 3_100).await.unwrap().0, Settled::Stale);
    assert_eq!(
        ack(ids[0], 1, 3_100).await.unwrap().0,
        Settled::Yes("default".to_string())
    );
    assert_eq!(ack(ids[0], 1, 3_100).await.unwrap().0, Settled::Stale);
    assert_eq!(state(store, ids[0]).await, TaskState::Done);
    // Not in a queue the caller may use: nothing changes.
    let none = |_: &str| false;
    let two = [
        pull::Acking {
            id: ids[1],
            claim: 1,
            answer: None,
            allowed: &none,
        },
        pull::Acking {
            id: ids[0],
            claim: 1,
            answer: None,
            allowed: &any,
        },
    ];
    let (refused, _) = pull::ack(db, names, &two, 3_100).await.unwrap();
    assert_eq!(
        refused,
        [Settled::NotAllowed("default".to_string()), Settled::Stale],
        "a group answers each ack"
    );
    assert_eq!(state(store, ids[1]).await, TaskState::Running);

    // Extend: moves the lease, and is stale once it ran out.
    assert_eq!(
        pull::extend(db, ids[2], 1, 3_500, 9_000, &any)
            .await
            .unwrap(),
        Settled::Yes(())
    );
    assert_eq!(
        pull::extend(db, ids[1], 1, 4_500, 9_000, &any)
            .await
            .unwrap(),
        Settled::Stale,
        "the typed task's lease ended at 4,000"
    );

    // Nack: a retry after `retry_in`, its attempt under the worker's name.
    let (nacked, _, moved) = pull::nack(db, names, nacking(ids[2], 1, 5_000), &any)
        .await
        .unwrap();
    assert_eq!(nacked, Settled::Yes(Nacked::Retry(5_500, "default".into())));
    assert_eq!(moved.map(|m| m.run_at), Some(5_500));
    assert_eq!(state(store, ids[2]).await, TaskState::Scheduled);
    let again = pull::claim(db, pulling(6_000, 10, &[])).await.unwrap().rows;
    assert_eq!(
        again
            .iter()
            .map(|r| (r.id, r.attempts, r.claims))
            .collect::<Vec<_>>(),
        [(ids[2], 2, 2)]
    );
    // The first claim is stale now; a nack that gives up is dead.
    let (stale, _, _) = pull::nack(db, names, nacking(ids[2], 1, 6_100), &any)
        .await
        .unwrap();
    assert_eq!(stale, Settled::Stale);
    let mut give_up = nacking(ids[2], 2, 6_200);
    give_up.dead = true;
    let (dead, _, moved) = pull::nack(db, names, give_up, &any).await.unwrap();
    assert_eq!(
        (dead, moved),
        (Settled::Yes(Nacked::Dead("default".into())), None)
    );
    assert_eq!(state(store, ids[2]).await, TaskState::Dead);
    let attempts = crate::sql::attempts::of_task(db, ids[2]).await.unwrap();
    assert_eq!(
        attempts
            .iter()
            .map(|a| (a.attempt, a.outcome.as_str(), a.node.as_deref()))
            .collect::<Vec<_>>(),
        [(1, "failed", Some("w1")), (2, "dead", Some("w1"))]
    );

    // The typed task's lease ran out at 4,000: the reclaim takes it back
    // (a node holding its shard), as `expired`, and not before.
    let claims = super::claims::holding_every_shard(store, "n1").await;
    assert!(claims.reclaim(5, 3_900).await.unwrap().is_empty());
    let reclaimed = claims.reclaim(5, 7_000).await.unwrap();
    assert_eq!(reclaimed.len(), 1);
    assert_eq!(reclaimed[0].due.map(|d| d.id), Some(ids[1]));
    let attempts = crate::sql::attempts::of_task(db, ids[1]).await.unwrap();
    assert_eq!(attempts[0].outcome.as_str(), "expired");
    assert!(attempts[0]
        .detail
        .as_deref()
        .is_some_and(|d| d.starts_with("lease expired: worker w1")));

    // Flow control: paused, nothing; a concurrency of 1 counts what runs.
    let more = [task(1_000, None, "default"), task(1_000, None, "default")];
    on_conn!(store, c => tasks::insert(c, names, &more, 1).await.unwrap());
    queues::set_paused(db, "default", true).await.unwrap();
    assert!(pull::claim(db, pulling(8_000, 10, &[]))
        .await
        .unwrap()
        .rows
        .is_empty());
    queues::set_paused(db, "default", false).await.unwrap();
    queues::set_limits(db, "default", &QueueLimits::new().concurrency(1))
        .await
        .unwrap();
    assert_eq!(
        pull::claim(db, pulling(8_000, 10, &[]))
            .await
            .unwrap()
            .rows
            .len(),
        1
    );
    assert!(pull::claim(db, pulling(8_000, 10, &[]))
        .await
        .unwrap()
        .rows
        .is_empty());

    // Per key: one of each key at a time.
    queues::set_limits(db, "default", &QueueLimits::new().per_key_concurrency(1))
        .await
        .unwrap();
    let mut keyed = Vec::new();
    for key in ["a", "a", "b"] {
        let mut row = task(1_000, None, "default");
        row.partition_key = Some(key);
        keyed.push(row);
    }
    on_conn!(store, c => tasks::insert(c, names, &keyed, 1).await.unwrap());
    let by_key = pull::claim(db, pulling(9_000, 10, &[])).await.unwrap().rows;
    let mut keys: Vec<_> = by_key
        .iter()
        .filter_map(|r| r.partition_key.clone())
        .collect();
    keys.sort();
    assert_eq!(keys, ["a", "b"], "one of key a waits for the other");
    let held_back = pull::claim(db, pulling(9_000, 10, &[])).await.unwrap();
    assert!(held_back.rows.is_empty());
    assert_eq!(
        held_back.again_in,
        Some(pull::HELD_BACK_LOOK_MS),
        "a key's place can free elsewhere"
    );

    // A rate: the claims pay from the queue's bucket (a burst of 2, then
    // one a second), and say when its next token comes.
    let rated = Rate::new(1, Duration::from_secs(1)).burst(2);
    queues::set_limits(db, "default", &QueueLimits::new().rate(rated))
        .await
        .unwrap();
    let lots: Vec<_> = (0..5).map(|_| task(1_000, None, "default")).collect();
    on_conn!(store, c => tasks::insert(c, names, &lots, 1).await.unwrap());
    let first = pull::claim(db, pulling(9_000, 10, &[])).await.unwrap();
    assert_eq!(first.rows.len(), 2, "the burst");
    let second = pull::claim(db, pulling(9_000, 10, &[])).await.unwrap();
    assert!(second.rows.is_empty(), "{:?}", second.rows);
    let next = second.again_in.expect("when the next token comes");
    assert!((1..=1_000).contains(&next), "{next}");
    // Nothing was left behind by a claim that took all it asked for.
    let unlimited = QueueLimits::new();
    queues::set_limits(db, "default", &unlimited).await.unwrap();
    let one = pull::claim(db, pulling(9_000, 1, &[])).await.unwrap();
    assert_eq!((one.rows.len(), one.again_in), (1, None));

    // A worker seen (as the claims record it); a day unseen, it is
    // forgotten.
    pull::seen(db, "default", "w1", 9_000).await.unwrap();
    let seen = pull::workers(db, Some("default"), 9_000).await.unwrap();
    assert_eq!(
        seen.iter()
            .map(|w| (w.worker.as_str(), w.last_seen))
            .collect::<Vec<_>>(),
        [("w1", 9_000)]
    );
    assert!(seen[0].held >= 5, "{seen:?}");
    assert!(pull::workers(db, Some("other"), 9_000)
        .await
        .unwrap()
        .is_empty());
    let later = 9_000 + pull::WORKER_FORGOTTEN_MS + 1;
    assert!(pull::workers(db, None, later).await.unwrap().is_empty());
    assert!(
        pull::workers(db, None, 9_000).await.unwrap().is_empty(),
        "deleted"
    );
}
conformance!(pull_statements, pull_case);

/// The claim takes the lowest priority number first, in due order within a
/// priority, and reads past a priority with only tasks due later (a backlog
/// of the future at priority 0 does not hide priority 5's due task); a page
/// that ends inside a priority leaves the rest for the next claim.
async fn pull_priority_case(store: &Store) {
    let (db, names) = (store.db(), store.names());
    let far = 4_000_000_000_000;
    let mut rows = Vec::new();
    for (priority, run_at) in [
        (5, 1_000),
        (1, 2_000),
        (1, 1_500),
        (0, far),
        (0, far + 1),
        (3, 2_500),
    ] {
        let mut row = task(run_at, None, "default");
        row.priority = priority;
        rows.push(row);
    }
    let ids: Vec<i64> = on_conn!(store, c => tasks::insert(c, names, &rows, 1).await.unwrap())
        .iter()
        .map(|i| i.task.id)
        .collect();
    let first = pull::claim(db, pulling(3_000, 3, &[])).await.unwrap().rows;
    assert_eq!(
        first.iter().map(|r| r.id).collect::<Vec<_>>(),
        [ids[2], ids[1], ids[5]],
        "priority 1 in due order, then 3"
    );
    let rest = pull::claim(db, pulling(3_000, 3, &[])).await.unwrap().rows;
    assert_eq!(rest.iter().map(|r| r.id).collect::<Vec<_>>(), [ids[0]]);
    assert!(pull::claim(db, pulling(3_000, 3, &[]))
        .await
        .unwrap()
        .rows
        .is_empty());
}
conformance!(pull_priority, pull_priority_case);

/// Past [`pull::PRIORITY_LEVELS`] priorities, the rest of a page is still
/// taken in priority order: twelve priorities, one due task each, claimed
/// in two pages.
async fn pull_many_priorities_case(store: &Store) {
    let names = store.names();
    let rows: Vec<_> = (0..12)
        .map(|n| {
            let mut row = task(1_000 + n, None, "default");
            row.priority = 11 - n;
            row
        })
        .collect();
    let ids: Vec<i64> = on_conn!(store, c => tasks::insert(c, names, &rows, 1).await.unwrap())
        .iter()
        .map(|i| i.task.id)
        .collect();
    let mut taken = Vec::new();
    for _ in 0..2 {
        let page = pull::claim(store.db(), pulling(3_000, 10, &[]))
            .await
            .unwrap()
            .rows;
        taken.extend(page.iter().map(|r| r.id));
    }
    let lowest_first: Vec<i64> = ids.iter().rev().copied().collect();
    assert_eq!(taken, lowest_first);
}
conformance!(pull_many_priorities, pull_many_priorities_case);

/// Regression: the fence of an ack, nack or extend wrapped the task's id in
/// its `IS TRUE` check, which keeps a planner from reading through an
/// index, so every settle read the whole table (a drain of 50,000 held
/// tasks acked 266 a second on PostgreSQL). The plan of the fenced read
/// reaches the task by its key (see [`crate::sql::testing::plan`]).
async fn pull_settles_by_key_case(store: &Store) {
    let db = store.db();
    let plan = crate::sql::testing::plan(db, &pull::find_held_sql(db), &[1, 1, 0]).await;
    let by_key = if db.is_sqlite() {
        plan.contains("PRIMARY KEY")
    } else {
        plan.contains("ttw_tasks_pkey")
    };
    assert!(
        by_key && !plan.contains("Seq Scan") && !plan.contains("SCAN ttw_tasks"),
        "{plan}"
    );
}
conformance!(pull_settles_by_key, pull_settles_by_key_case);
