//! `queues` and the limited claim (`claims/limited.rs`): settings read back
//! as written, a rate set again keeps its bucket, and the limited claim
//! obeys a pause, a concurrency (a task whose lock ran out stops counting)
//! and a rate, leaving the rest held back in claim order; the plain claim
//! leaves a controlled queue's tasks alone and says why.

use std::sync::Arc;
use std::time::Duration;

use super::*;
use crate::model::due::Due;
use crate::model::flow::{QueueLimits, Rate, RetryPolicy};
use crate::model::lanes::Lanes;
use crate::sql::claims::{Claiming, Claims, Success, Wait};
use crate::sql::queues;

async fn queues_case(store: &Store) {
    let (db, names) = (store.db(), store.names());
    let all = ["conc", "rate", "paused", "free"];
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
            queues: &all.join(","),
        },
    )
    .await
    .unwrap();
    for queue in all {
        crate::sql::schema::add_lease_rows(db, queue, 4)
            .await
            .unwrap();
        assert_eq!(
            leases::take(
                db,
                me,
                leases::Shards {
                    queue,
                    shards: &[0, 1, 2, 3]
                }
            )
            .await
            .unwrap()
            .len(),
            4
        );
    }
    let lanes = Arc::new(Lanes::new(all.iter().map(|q| q.to_string()).collect(), 4).unwrap());
    let claims = Claims::new(db.clone(), lanes.clone(), 4, "n1/a".to_string());

    // Settings as written, and as read back.
    assert!(queues::get(db, "conc").await.unwrap().is_none());
    queues::set_limits(db, "conc", &QueueLimits::new().concurrency(2))
        .await
        .unwrap();
    let rate = Rate::new(2, Duration::from_secs(1)).burst(2);
    queues::set_limits(db, "rate", &QueueLimits::new().rate(rate))
        .await
        .unwrap();
    queues::set_paused(db, "paused", true).await.unwrap();
    let listed: Vec<_> = queues::list(db)
        .await
        .unwrap()
        .into_iter()
        .map(|r| r.settings())
        .collect();
    assert_eq!(
        listed
            .iter()
            .map(|s| (s.queue.as_str(), s.paused))
            .collect::<Vec<_>>(),
        [("conc", false), ("paused", true), ("rate", false)]
    );
    assert_eq!(listed[0].limits.concurrency_limit(), Some(2));
    assert_eq!(listed[2].limits.rate_limit(), Some(rate));
    assert_eq!(
        queues::bucket(db, "rate").await.unwrap().unwrap().0,
        2.0,
        "a full bucket"
    );

    // Five tasks due in each queue.
    let mut due: Vec<(&str, Vec<Due>)> = Vec::new();
    for queue in all {
        let rows: Vec<_> = (0..5).map(|i| task(1_000 + i, None, queue)).collect();
        on_conn!(store, c => tasks::insert(c, names, &rows, 1).await.unwrap());
    }
    let fired = claims.due_before(5_000).await.unwrap();
    for queue in all {
        let lane = |d: &Due| &**lanes.queue_of(d.lane) == queue;
        let mut mine: Vec<Due> = fired.iter().copied().filter(lane).collect();
        mine.sort_unstable_by_key(|d| d.id);
        assert_eq!(mine.len(), 5, "{queue}");
        due.push((queue, mine));
    }

    // The plain claim takes only the queue without settings, and says why
    // it left the others.
    let every: Vec<Due> = {
        let mut every = fired.clone();
        every.sort_unstable_by_key(|d| d.id);
        every
    };
    let plain = claims
        .claim(Claiming {
            fired: &every,
            now: 3_000,
            locked_until: 100_000,
        })
        .await
        .unwrap();
    assert_eq!(plain.len(), 5, "the free queue's five");
    let left: Vec<i64> = due[..3]
        .iter()
        .flat_map(|(_, d)| d.iter().map(|d| d.id))
        .collect();
    let mut left_sorted = left.clone();
    left_sorted.sort_unstable();
    let why = claims.why_unclaimed(&left_sorted).await.unwrap();
    assert!(
        why.len() == 15 && why.iter().all(|u| u.controlled && u.held),
        "{why:?}"
    );

    // Concurrency 2: two claimed, three held back in claim order.
    let conc = &due[0].1;
    let first = claims
        .claim_limited(
            "conc",
            Claiming {
                fired: conc,
                now: 3_000,
                locked_until: 100_000,
            },
        )
        .await
        .unwrap();
    assert_eq!(
        (first.claimed.len(), first.wait, first.controlled),
        (2, Wait::Full, true)
    );
    assert_eq!(
        first.held,
        conc[2..].iter().map(|d| d.id).collect::<Vec<_>>()
    );
    let none = claims
        .claim_limited(
            "conc",
            Claiming {
                fired: &conc[2..],
                now: 3_000,
                locked_until: 100_000,
            },
        )
        .await
        .unwrap();
    assert_eq!(
        (none.claimed.len(), none.held.len(), none.wait),
        (0, 3, Wait::Full)
    );
    // One finishes: one more place.
    let a = first.claimed[0].attempt;
    let done = Success {
        id: a.id,
        claim: a.claim,
    };
    assert_eq!(
        claims.complete_many(&[done.into()], 3_100).await.unwrap(),
        [done]
    );
    let one = claims
        .claim_limited(
            "conc",
            Claiming {
                fired: &conc[2..],
                now: 3_200,
                locked_until: 100_000,
            },
        )
        .await
        .unwrap();
    assert_eq!((one.claimed.len(), one.held.len()), (1, 2));
    // Past the running tasks' locks (a dead node's), their places are free.
    let later = claims
        .claim_limited(
            "conc",
            Claiming {
                fired: &conc[3..],
                now: 100_001,
                locked_until: 200_000,
            },
        )
        .await
        .unwrap();
    assert_eq!(
        (later.claimed.len(), later.held.len(), later.wait),
        (2, 0, Wait::No)
    );

    // Rate 2 a second, burst 2: two now, then a token in at most 500 ms.
    let rated = &due[1].1;
    let burst = claims
        .claim_limited(
            "rate",
            Claiming {
                fired: rated,
                now: 3_000,
                locked_until: 100_000,
            },
        )
        .await
        .unwrap();
    assert_eq!(burst.claimed.len(), 2);
    let next = claims
        .claim_limited(
            "rate",
            Claiming {
                fired: &rated[2..],
                now: 3_000,
                locked_until: 100_000,
            },
        )
        .await
        .unwrap();
    match next.wait {
        Wait::Rate(ms) => assert!((1..=500).contains(&ms), "{ms} ms"),
        other => panic!("waits for {other:?}"),
    }
    assert!(next.claimed.len() <= 1, "at most what refilled meanwhile");
    // The same rate set again keeps the bucket: no new burst.
    let (tokens, _) = queues::bucket(db, "rate").await.unwrap().unwrap();
    queues::set_limits(db, "rate", &QueueLimits::new().rate(rate))
        .await
        .unwrap();
    let (kept, _) = queues::bucket(db, "rate").await.unwrap().unwrap();
    assert!(kept <= tokens + 0.01 && kept < 1.0, "{tokens} then {kept}");
    // A new rate starts from what is left, at most its burst.
    let faster = Rate::per_second(100).burst(50);
    queues::set_limits(db, "rate", &QueueLimits::new().rate(faster))
        .await
        .unwrap();
    assert!(queues::bucket(db, "rate").await.unwrap().unwrap().0 < 1.0);

    // Paused: nothing, everything held.
    let paused = claims
        .claim_limited(
            "paused",
            Claiming {
                fired: &due[2].1,
                now: 3_000,
                locked_until: 100_000,
            },
        )
        .await
        .unwrap();
    assert_eq!(
        (paused.claimed.len(), paused.held.len(), paused.wait),
        (0, 5, Wait::Paused)
    );
    queues::set_paused(db, "paused", false).await.unwrap();
    let resumed = claims
        .claim_limited(
            "paused",
            Claiming {
                fired: &due[2].1,
                now: 3_000,
                locked_until: 100_000,
            },
        )
        .await
        .unwrap();
    assert_eq!((resumed.claimed.len(), resumed.controlled), (5, false));

    // A per-key cap of 1: one task of each key, and the keyless one, run;
    // the others wait for their key, which the claim names as full, and
    // the queue itself does not wait.
    crate::sql::schema::add_lease_rows(db, "keyed", 4)
        .await
        .unwrap();
    leases::join(
        db,
        me,
        leases::Joining {
            process: None,
            queues: &[&all[..], &["keyed"]].concat().join(","),
        },
    )
    .await
    .unwrap();
    assert_eq!(
        leases::take(
            db,
            me,
            leases::Shards {
                queue: "keyed",
                shards: &[0, 1, 2, 3]
            }
        )
        .await
        .unwrap()
        .len(),
        4
    );
    let keyed_lanes = Arc::new(Lanes::new(vec!["keyed".to_string()], 4).unwrap());
    let keyed_claims = Claims::new(db.clone(), keyed_lanes, 4, "n1/a".to_string());
    queues::set_limits(db, "keyed", &QueueLimits::new().per_key_concurrency(1))
        .await
        .unwrap();
    let keys = [Some("a"), Some("a"), Some("b"), Some("a"), Some("b"), None];
    let rows: Vec<_> = keys
        .iter()
        .enumerate()
        .map(|(i, &key)| crate::sql::tasks::TaskParams {
            partition_key: key,
            envelope: None,
            kind: None,
            ..task(1_000 + i as i64, None, "keyed")
        })
        .collect();
    on_conn!(store, c => tasks::insert(c, names, &rows, 1).await.unwrap());
    let mut fired = keyed_claims.due_before(5_000).await.unwrap();
    fired.sort_unstable_by_key(|d| d.id);
    assert_eq!(fired.len(), 6);
    assert_eq!(fired[0].key, crate::sql::announce::key_hash(Some("a")));
    assert_eq!(fired[5].key, 0);
    let first = keyed_claims
        .claim_limited(
            "keyed",
            Claiming {
                fired: &fired,
                now: 3_000,
                locked_until: 100_000,
            },
        )
        .await
        .unwrap();
    let ids = |v: &[usize]| v.iter().map(|&i| fired[i].id).collect::<Vec<_>>();
    let mut claimed: Vec<i64> = first.claimed.iter().map(|c| c.attempt.id).collect();
    claimed.sort_unstable();
    assert_eq!(
        claimed,
        ids(&[0, 2, 5]),
        "the first of a, the first of b, the keyless one"
    );
    // Held in turns: a's second, b's second, a's third.
    assert_eq!(first.held, ids(&[1, 4, 3]));
    assert_eq!(
        first.wait,
        Wait::No,
        "the queue has room; only keys are full"
    );
    let mut full = first.full_keys.clone();
    full.sort_unstable();
    let mut want = vec![fired[0].key, fired[2].key];
    want.sort_unstable();
    assert_eq!(full, want);
    let again = keyed_claims
        .claim_limited(
            "keyed",
            Claiming {
                fired: &fired,
                now: 3_000,
                locked_until: 100_000,
            },
        )
        .await
        .unwrap();
    assert!(again.claimed.is_empty() && again.held.len() == 3);

    // The key goes into the history with a task that finishes there.
    assert!(tasks::cancel(db, tasks::Which::Id(fired[1].id), 4_000)
        .await
        .unwrap());
    let kept = queues::history_partition_key(db, fired[1].id)
        .await
        .unwrap();
    assert_eq!(kept.as_deref(), Some("a"));

    // Without a per-key cap, free places still go to keys in turn: with a
    // and b running one each, a place goes to c's task, due last, before
    // a's or b's waiting tasks, due first.
    let late = crate::sql::tasks::TaskParams {
        partition_key: Some("c"),
        envelope: None,
        kind: None,
        ..task(1_010, None, "keyed")
    };
    on_conn!(store, c => tasks::insert(c, names, &[late], 1).await.unwrap());
    queues::set_limits(db, "keyed", &QueueLimits::new().concurrency(4))
        .await
        .unwrap();
    let mut waiting = keyed_claims.due_before(5_000).await.unwrap();
    waiting.sort_unstable_by_key(|d| d.id);
    assert_eq!(waiting.len(), 3, "a's third, b's second, c's first");
    let turn = keyed_claims
        .claim_limited(
            "keyed",
            Claiming {
                fired: &waiting,
                now: 3_000,
                locked_until: 100_000,
            },
        )
        .await
        .unwrap();
    let taken: Vec<i64> = turn.claimed.iter().map(|c| c.attempt.id).collect();
    assert_eq!(
        taken,
        vec![waiting[2].id],
        "c's task takes the one free place"
    );
    assert_eq!(turn.held, vec![waiting[0].id, waiting[1].id]);
    // This node waits for places for a and b: the other nodes read it.
    assert_eq!(
        queues::key_waits(db, "keyed").await.unwrap(),
        [
            ("a".to_string(), "n1/a".to_string()),
            ("b".to_string(), "n1/a".to_string())
        ]
    );

    // Across nodes: key z waits on another node, with nothing running.
    // Of two free places, one is left to z (its turn comes first), the
    // other goes to a's task; b's waits, and this node says so.
    queues::set_limits(db, "keyed", &QueueLimits::new().concurrency(6))
        .await
        .unwrap();
    queues::note_key_wait(
        db,
        queues::KeyWait {
            queue: "keyed",
            key: "z",
            session: "n9/z",
            until: 3_500,
        },
    )
    .await
    .unwrap();
    let shared = keyed_claims
        .claim_limited(
            "keyed",
            Claiming {
                fired: &waiting[..2],
                now: 3_000,
                locked_until: 100_000,
            },
        )
        .await
        .unwrap();
    let taken: Vec<i64> = shared.claimed.iter().map(|c| c.attempt.id).collect();
    assert_eq!(taken, vec![waiting[0].id], "one place left to z, one to a");
    assert_eq!(
        (shared.held.clone(), shared.wait),
        (vec![waiting[1].id], Wait::Full)
    );
    assert_eq!(
        queues::key_waits(db, "keyed").await.unwrap(),
        [
            ("b".to_string(), "n1/a".to_string()),
            ("z".to_string(), "n9/z".to_string())
        ]
    );
    // Once z's wait is over (its node no longer asks), b takes the place.
    let later = keyed_claims
        .claim_limited(
            "keyed",
            Claiming {
                fired: &waiting[1..2],
                now: 3_600,
                locked_until: 100_000,
            },
        )
        .await
        .unwrap();
    assert_eq!(later.claimed.len(), 1, "{later:?}");
    assert_eq!(queues::key_waits(db, "keyed").await.unwrap(), []);
    queues::set_limits(db, "keyed", &QueueLimits::new().per_key_concurrency(1))
        .await
        .unwrap();

    // A queue's retry policy: read back; its attempt limit decides dead
    // over the node's default (10 here), a task's own limit over both.
    let policy = RetryPolicy::new()
        .max_attempts(1)
        .backoff(crate::Backoff::exponential(
            Duration::from_millis(50),
            Duration::from_secs(2),
        ));
    queues::set_retry(db, "keyed", &policy).await.unwrap();
    let row = queues::get(db, "keyed").await.unwrap().unwrap().settings();
    assert_eq!(
        (row.retry, row.limits.per_key_limit()),
        (policy, Some(1)),
        "the limits are kept"
    );
    assert_eq!(
        queues::queue_backoff(db, "keyed").await.unwrap(),
        Some(crate::Backoff::exponential(
            Duration::from_millis(50),
            Duration::from_secs(2)
        ))
    );
    assert_eq!(queues::queue_backoff(db, "conc").await.unwrap(), None);
    let running = &first.claimed[0].attempt;
    let failed = keyed_claims
        .fail(running, boom(9_000, 10, 3_500))
        .await
        .unwrap();
    assert_eq!(
        failed,
        Some(crate::sql::claims::Failed::Dead),
        "the queue's limit of 1"
    );
    queues::set_retry(db, "keyed", &RetryPolicy::new())
        .await
        .unwrap();
    let second = &first.claimed[1].attempt;
    let failed = keyed_claims
        .fail(second, boom(9_000, 10, 3_500))
        .await
        .unwrap();
    assert_eq!(
        failed,
        Some(crate::sql::claims::Failed::Retry(9_000)),
        "the node's again"
    );

    // Limits cleared: the queue is no longer controlled.
    queues::set_limits(db, "conc", &QueueLimits::new())
        .await
        .unwrap();
    assert!(queues::get(db, "conc")
        .await
        .unwrap()
        .unwrap()
        .settings()
        .limits
        .is_empty());
}
conformance!(queue_statements, queues_case);
