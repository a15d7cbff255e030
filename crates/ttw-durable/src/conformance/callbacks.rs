//! `callbacks`: the outcome statements write a task's callback task in
//! their own transaction.

use super::claims::holding_every_shard;
use super::*;

/// The outcome a callback task carries, as JSON.
fn outcome(info: &crate::model::task::TaskInfo) -> serde_json::Value {
    serde_json::from_slice(&info.payload).expect("the payload is JSON")
}

/// `callbacks`: a done task with a `callback` (told by a batch of
/// successes), a dead one with a `failure_callback` (a permanent failure)
/// and one that died in a reclaim (out of attempts after its lock ran out)
/// each write one task, due at once in the same queue, to that URL, with
/// the trace context of the task it tells of, `outcome_of`, and the
/// outcome as JSON; a retry tells nothing, nor does a task without a URL
/// for its outcome; and the tasks written are handed to the schedulers.
async fn callbacks_case(store: &Store) {
    use std::sync::{Arc, Mutex};

    use crate::model::attempts::Receipt;
    use crate::model::envelope::Envelope;
    use crate::sql::claims::{Claiming, Failed, Finished};

    let (db, names) = (store.db(), store.names());
    let handed: Arc<Mutex<Vec<i64>>> = Arc::default();
    let claims = holding_every_shard(store, "n1").await.telling({
        let handed = handed.clone();
        Arc::new(move |tasks| handed.lock().unwrap().extend(tasks.iter().map(|t| t.id)))
    });
    let parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    let both = Envelope::new()
        .callback("https://hooks.example/done")
        .failure_callback("https://hooks.example/dead")
        .traceparent(parent)
        .encode();
    let on_death = Envelope::new()
        .failure_callback("https://hooks.example/dead")
        .encode();
    let rows = [
        TaskParams {
            envelope: Some(&both),
            kind: None,
            ..task(1_000, None, "default")
        },
        // Done, with no callback of its own.
        TaskParams {
            envelope: Some(&on_death),
            kind: None,
            ..task(1_000, None, "default")
        },
        // Fails once (a retry), then for good.
        TaskParams {
            envelope: Some(&on_death),
            kind: None,
            ..task(1_000, None, "default")
        },
        // One attempt, cut short by a lock that runs out.
        TaskParams {
            envelope: Some(&on_death),
            kind: None,
            max_attempts: Some(1),
            ..task(1_000, None, "default")
        },
    ];
    let ids: Vec<i64> = on_conn!(store, c => tasks::insert(c, names, &rows, 1).await.unwrap())
        .iter()
        .map(|i| i.task.id)
        .collect();
    let claimed = claims
        .claim(Claiming {
            fired: &claims.due_before(5_000).await.unwrap(),
            now: 2_000,
            locked_until: 100_000,
        })
        .await
        .unwrap();
    assert_eq!(claimed.len(), 4);
    let queue: std::sync::Arc<str> = "default".into();
    let tasks: Vec<crate::model::attempt::Task> = claimed
        .into_iter()
        .map(|c| c.into_task(queue.clone()))
        .collect();
    let tells: Vec<(bool, bool)> = tasks
        .iter()
        .map(|t| (t.attempt.tells.done, t.attempt.tells.dead))
        .collect();
    assert_eq!(
        tells,
        [(true, true), (false, true), (false, true), (false, true)]
    );

    // Two successes in one batch: only the first has a callback.
    let batch: Vec<Finished> = tasks[..2]
        .iter()
        .map(|t| Finished {
            success: crate::sql::claims::Success {
                id: t.attempt.id,
                claim: t.attempt.claim,
            },
            receipt: Receipt::status(200).answer("accepted"),
            tell: t.attempt.tells.done,
        })
        .collect();
    assert_eq!(claims.complete_many(&batch, 3_000).await.unwrap().len(), 2);
    let told = std::mem::take(&mut *handed.lock().unwrap());
    assert_eq!(told.len(), 1, "one callback: {told:?}");
    let callback = tasks::get(db, Which::Id(told[0])).await.unwrap().unwrap();
    assert_eq!(callback.state, TaskState::Scheduled);
    assert_eq!(callback.queue, "default");
    assert_eq!(
        crate::model::time::to_ms(callback.run_at).unwrap(),
        3_000,
        "due at once"
    );
    let envelope = callback.envelope.clone().unwrap();
    assert_eq!(envelope.outcome_of().map(|id| id.get()), Some(ids[0]));
    assert_eq!(
        envelope.get_destination().map(|d| d.url()),
        Some("https://hooks.example/done")
    );
    assert_eq!(envelope.get_traceparent(), Some(parent));
    assert_eq!(envelope.get_callback(), None, "a callback tells nothing");
    assert_eq!(
        outcome(&callback),
        serde_json::json!({"id": ids[0], "queue": "default", "state": "done", "attempts": 1,
            "status": 200, "answer": "accepted", "error": null, "finished_at": 3_000, "kind": null})
    );

    // A retry tells nothing; a death tells the failure callback.
    let retried = claims.fail(&tasks[2].attempt, boom(4_000, 3, 3_100)).await;
    assert_eq!(retried.unwrap(), Some(Failed::Retry(4_000)));
    assert!(handed.lock().unwrap().is_empty(), "a retry tells nothing");
    let mut fired = claims.due_before(5_000).await.unwrap();
    fired.retain(|due| due.id == ids[2]);
    let again = claims
        .claim(Claiming {
            fired: &fired,
            now: 4_000,
            locked_until: 100_000,
        })
        .await
        .unwrap();
    let again = again[0].clone().into_task(queue.clone());
    let mut permanent = boom(0, 3, 4_100);
    permanent.dead_now = true;
    permanent.status = Some(410);
    assert_eq!(
        claims.fail(&again.attempt, permanent).await.unwrap(),
        Some(Failed::Dead)
    );
    let told = std::mem::take(&mut *handed.lock().unwrap());
    assert_eq!(told.len(), 1);
    let dead = tasks::get(db, Which::Id(told[0])).await.unwrap().unwrap();
    assert_eq!(
        dead.envelope
            .as_ref()
            .and_then(|e| e.get_destination())
            .map(|d| d.url()),
        Some("https://hooks.example/dead")
    );
    assert_eq!(
        outcome(&dead),
        serde_json::json!({"id": ids[2], "queue": "default", "state": "dead", "attempts": 2,
            "status": 410, "answer": null, "error": "boom", "finished_at": 4_100, "kind": null})
    );

    // Out of attempts when its lock ran out: dead by the reclaim, told.
    let reclaimed = claims.reclaim(3, 200_000).await.unwrap();
    assert_eq!(reclaimed.len(), 1);
    assert!(reclaimed[0].dead);
    let told = std::mem::take(&mut *handed.lock().unwrap());
    assert_eq!(told.len(), 1);
    let reclaimed = tasks::get(db, Which::Id(told[0])).await.unwrap().unwrap();
    let seen = outcome(&reclaimed);
    assert_eq!(
        (&seen["id"], &seen["state"], &seen["attempts"]),
        (
            &serde_json::json!(ids[3]),
            &serde_json::json!("dead"),
            &serde_json::json!(1)
        )
    );
    assert!(seen["error"]
        .as_str()
        .is_some_and(|e| e.starts_with("lock expired")));

    // Nothing else was written: the four tasks and three callbacks.
    let scheduled = claims.due_before(i64::MAX / 4).await.unwrap();
    assert_eq!(scheduled.len(), 3, "{scheduled:?}");
}
conformance!(callback_statements, callbacks_case);
