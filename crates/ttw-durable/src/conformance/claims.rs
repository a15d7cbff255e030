//! `claims`: the scheduler's statements, for a session that holds every
//! shard.

use super::*;

/// `claims`: the scheduler's statements, for a session that holds every
/// shard: the window read, the catch-up poll, a claim (only of tasks due
/// and held), a success and a failure recorded under the fence (a stale
/// claim refused), a reclaim of a lock run out, and why a task was not
/// claimed.
async fn claims_case(store: &Store) {
    use std::sync::Arc;

    use crate::model::lanes::Lanes;
    use crate::sql::claims::{Claiming, Claims, Failed, Success};

    let (db, names) = (store.db(), store.names());
    let me = leases::Session {
        node: "n1",
        session: "n1/a",
        ttl_ms: 60_000,
    };
    leases::join(
        db,
        me,
        leases::Joining {
            process: None,
            queues: "default",
        },
    )
    .await
    .unwrap();
    assert_eq!(
        leases::take(
            db,
            me,
            leases::Shards {
                queue: "default",
                shards: &[0, 1, 2, 3]
            }
        )
        .await
        .unwrap()
        .len(),
        4
    );
    let lanes = Arc::new(Lanes::new(vec!["default".to_string()], 4).unwrap());
    let claims = Claims::new(db.clone(), lanes, 4, "n1/a".to_string());
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
            .complete_many(&[stale], 3_100)
            .await
            .unwrap()
            .is_empty(),
        "a stale claim is refused"
    );
    let done = Success {
        id: first.id,
        claim: first.claim,
    };
    assert_eq!(claims.complete_many(&[done], 3_100).await.unwrap(), [done]);
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

    let why = claims.why_unclaimed(&[ids[2]]).await.unwrap();
    assert_eq!(why.len(), 1);
    assert_eq!(
        (why[0].state, why[0].run_at, why[0].held),
        (TaskState::Scheduled, far, true)
    );
}
conformance!(claim_statements, claims_case);
