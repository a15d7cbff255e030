//! `claims`: the scheduler's statements, for a session that holds every
//! shard.

use super::*;

/// Statements of a session of node `node` (session `<node>/a`) that holds
/// every shard of the queue `default` (4 shards).
pub(super) async fn holding_every_shard(store: &Store, node: &str) -> crate::sql::claims::Claims {
    use std::sync::Arc;

    use crate::model::lanes::Lanes;

    let session = format!("{node}/a");
    let me = leases::Session {
        node,
        session: &session,
        ttl_ms: 60_000,
    };
    leases::join(
        store.db(),
        me,
        leases::Joining {
            process: None,
            queues: "default",
        },
    )
    .await
    .unwrap();
    let shards = leases::Shards {
        queue: "default",
        shards: &[0, 1, 2, 3],
    };
    assert_eq!(leases::take(store.db(), me, shards).await.unwrap().len(), 4);
    let lanes = Arc::new(Lanes::new(vec!["default".to_string()], 4).unwrap());
    crate::sql::claims::Claims::new(store.db().clone(), lanes, 4, session)
}

/// `claims`: the scheduler's statements, for a session that holds every
/// shard: the window read, the catch-up poll, a claim (only of tasks due
/// and held), a success and a failure recorded under the fence (a stale
/// claim refused), a reclaim of a lock run out, and why a task was not
/// claimed; and the history of each attempt they write (done, failed,
/// interrupted, dead), deleted with the task by the retention sweep.
async fn claims_case(store: &Store) {
    use crate::sql::claims::{Claiming, Failed, Success};

    let (db, names) = (store.db(), store.names());
    let claims = holding_every_shard(store, "n1").await;
    let far = 4_000_000_000_000;
    let rows = [
        task(1_000, None, "default"),
        task(2_000, None, "default"),
        task(far, None, "default"),
    ];
    let ids: Vec<i64> = on_conn!(store, c => tasks::insert(c, names, &rows, 1).await.unwrap())
        .iter()
        .map(|i| i.task.id)
        .collect();

    let due = claims.due_before(5_000).await.unwrap();
    assert_eq!(
        due.iter().map(|d| (d.id, d.run_at)).collect::<Vec<_>>(),
        [(ids[0], 1_000), (ids[1], 2_000)]
    );
    let changes = claims
        .changed_since(crate::sql::claims::Since {
            horizon: 5_000,
            since: None,
            slack: i64::MAX / 4,
        })
        .await
        .unwrap();
    assert!(changes.db_now > 0);
    assert_eq!(changes.due.len(), 2);

    let claimed = claims
        .claim(Claiming {
            fired: &due,
            now: 3_000,
            locked_until: 100_000,
        })
        .await
        .unwrap();
    assert_eq!(claimed.len(), 2);
    assert!(claimed
        .iter()
        .all(|c| c.attempt.number == 1 && c.payload == b"p"));
    assert!(
        claims
            .claim(Claiming {
                fired: &due,
                now: 3_000,
                locked_until: 100_000
            })
            .await
            .unwrap()
            .is_empty(),
        "claimed once"
    );
    let first = claimed[0].attempt;
    let stale = Success {
        id: first.id,
        claim: first.claim + 1,
    };
    assert!(
        claims
            .complete_many(&[stale.into()], 3_100)
            .await
            .unwrap()
            .is_empty(),
        "a stale claim is refused"
    );
    let done = Success {
        id: first.id,
        claim: first.claim,
    };
    assert_eq!(
        claims.complete_many(&[done.into()], 3_100).await.unwrap(),
        [done]
    );
    assert_eq!(
        tasks::get(db, Which::Id(first.id))
            .await
            .unwrap()
            .unwrap()
            .state,
        TaskState::Done
    );

    let second = claimed[1].attempt;
    let failed = claims.fail(&second, boom(4_000, 3, 3_200)).await.unwrap();
    assert_eq!(failed, Some(Failed::Retry(4_000)));
    let info = tasks::get(db, Which::Id(second.id)).await.unwrap().unwrap();
    assert_eq!(
        (info.state, info.last_error.as_deref()),
        (TaskState::Scheduled, Some("boom"))
    );
    let again = claims
        .claim(Claiming {
            fired: &claims.due_before(5_000).await.unwrap(),
            now: 5_000,
            locked_until: 6_000,
        })
        .await
        .unwrap();
    assert_eq!(again.len(), 1);
    assert_eq!(again[0].attempt.number, 2);
    let reclaimed = claims.reclaim(3, 7_000).await.unwrap();
    assert_eq!(reclaimed.len(), 1, "its lock ran out at 6,000");
    assert!(!reclaimed[0].dead);
    assert_eq!(
        tasks::get(db, Which::Id(second.id))
            .await
            .unwrap()
            .unwrap()
            .state,
        TaskState::Scheduled
    );

    // A third attempt fails for good: dead.
    let third = claims
        .claim(Claiming {
            fired: &claims.due_before(8_000).await.unwrap(),
            now: 7_500,
            locked_until: 100_000,
        })
        .await
        .unwrap();
    assert_eq!(third.len(), 1);
    let mut permanent = boom(0, 3, 7_600);
    permanent.dead_now = true;
    permanent.status = Some(410);
    assert_eq!(
        claims.fail(&third[0].attempt, permanent).await.unwrap(),
        Some(Failed::Dead)
    );
    let seen = |a: &crate::model::attempts::AttemptInfo| {
        (
            a.attempt,
            a.outcome.as_str(),
            a.node.clone(),
            a.started_at.and_then(|t| crate::model::time::to_ms(t).ok()),
            a.ended_at.and_then(|t| crate::model::time::to_ms(t).ok()),
            a.status,
        )
    };
    let n1 = Some("n1".to_string());
    let attempts = crate::sql::attempts::of_task(db, second.id).await.unwrap();
    assert_eq!(
        attempts.iter().map(seen).collect::<Vec<_>>(),
        [
            (1, "failed", n1.clone(), Some(3_000), Some(3_200), None),
            (2, "interrupted", n1.clone(), Some(5_000), Some(7_000), None),
            (3, "dead", n1.clone(), Some(7_500), Some(7_600), Some(410)),
        ]
    );
    assert_eq!(attempts[0].detail.as_deref(), Some("boom"));
    assert!(attempts[1]
        .detail
        .as_deref()
        .is_some_and(|d| d.starts_with("lock expired")));
    let done_attempts = crate::sql::attempts::of_task(db, first.id).await.unwrap();
    assert_eq!(
        done_attempts.iter().map(seen).collect::<Vec<_>>(),
        [(1, "done", n1.clone(), Some(3_000), Some(3_100), None)]
    );
    // The sweep deletes a finished task's attempts with it.
    crate::sql::testing::finish_into_history(db, second.id, 8_000)
        .await
        .unwrap();
    assert_eq!(claims.sweep(10_000, 100).await.unwrap(), 2);
    assert!(crate::sql::attempts::of_task(db, second.id)
        .await
        .unwrap()
        .is_empty());

    let why = claims.why_unclaimed(&[ids[2]]).await.unwrap();
    assert_eq!(why.len(), 1);
    assert_eq!(
        (why[0].state, why[0].run_at, why[0].held),
        (TaskState::Scheduled, far, true)
    );
}
conformance!(claim_statements, claims_case);
