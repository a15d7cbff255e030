//! `selection`: the filters of a page, a count, a bulk cancel and a
//! redrive (`sql::admin::Filter`) select the same tasks on each backend,
//! in both tables, and pages run either way.

use super::*;
use crate::client::admin::TaskQuery;
use crate::client::bulk::Redrive;
use crate::model::task::TaskId;

/// The ids of a page.
async fn ids(store: &Store, query: TaskQuery) -> Vec<TaskId> {
    store
        .list(&query)
        .await
        .unwrap()
        .iter()
        .map(|t| t.id)
        .collect()
}

/// `selection`: by partition key, idempotency key, due and created times,
/// newest first and after a cursor; counted, cancelled at most so many,
/// and redriven from the history by the same filter.
async fn selection_case(store: &Store) {
    let pause = || tokio::time::sleep(Duration::from_millis(30));
    let hour = Duration::from_secs(3600);
    let t1 = store
        .schedule("1")
        .partition_key("a")
        .idempotency_key("k1")
        .delay(hour)
        .await
        .unwrap();
    let t2 = store
        .schedule("2")
        .partition_key("a")
        .delay(2 * hour)
        .await
        .unwrap();
    pause().await;
    let mid = crate::model::time::from_ms(store.clock().now_ms());
    pause().await;
    let t3 = store
        .schedule("3")
        .partition_key("b")
        .delay(hour)
        .await
        .unwrap();
    let t4 = store.schedule("4").delay(3 * hour).await.unwrap();

    let a = || TaskQuery::new().partition_key("a");
    assert_eq!(ids(store, a()).await, [t1, t2]);
    assert_eq!(
        ids(store, TaskQuery::new().newest_first()).await,
        [t4, t3, t2, t1]
    );
    assert_eq!(
        ids(store, TaskQuery::new().newest_first().after(t3)).await,
        [t2, t1]
    );
    assert_eq!(
        ids(store, TaskQuery::new().created_from(mid)).await,
        [t3, t4]
    );
    assert_eq!(
        ids(store, TaskQuery::new().created_before(mid)).await,
        [t1, t2]
    );
    assert_eq!(
        ids(store, TaskQuery::new().idempotency_key("k1")).await,
        [t1]
    );
    let soon = crate::model::time::from_ms(store.clock().now_ms()) + hour + hour / 2;
    assert_eq!(ids(store, a().due_before(soon)).await, [t1]);
    assert_eq!(store.count(&a()).await.unwrap(), 2);
    assert_eq!(
        store
            .count(&TaskQuery::new().state(TaskState::Scheduled))
            .await
            .unwrap(),
        4
    );

    // At most one, the oldest id first; then the rest of the key.
    assert_eq!(store.cancel_many(&a(), 1).await.unwrap(), 1);
    assert_eq!(
        store.get(t1).await.unwrap().unwrap().state,
        TaskState::Cancelled
    );
    assert_eq!(store.cancel_many(&a(), 10).await.unwrap(), 1);
    let cancelled_a = a().state(TaskState::Cancelled);
    assert_eq!(store.count(&cancelled_a).await.unwrap(), 2);
    assert_eq!(ids(store, cancelled_a.clone()).await, [t1, t2]);
    assert!(store
        .cancel_many(&TaskQuery::new().state(TaskState::Dead), 10)
        .await
        .unwrap_err()
        .is_config());

    // The same filter, redriven from the history; the other key untouched.
    let redrive = Redrive::dead().state(TaskState::Cancelled).matching(a());
    assert_eq!(store.redrive_many(&redrive).await.unwrap(), 2);
    assert_eq!(store.count(&cancelled_a).await.unwrap(), 0);
    assert_eq!(
        store
            .count(&TaskQuery::new().state(TaskState::Scheduled))
            .await
            .unwrap(),
        4
    );
    due_order(store).await;
}
conformance!(selection_statements, selection_case);

/// Pages in due order, of tasks of their own key: due at +2 s, +1 s (two,
/// a tie), +3 s in id order; pages follow each other by (due time, id)
/// both ways, a cursor inside a tie splits it, and an id alone is no
/// cursor of that order.
async fn due_order(store: &Store) {
    let base = crate::model::time::from_ms(store.clock().now_ms()) + Duration::from_secs(5 * 3600);
    let mut t = Vec::new();
    for offset in [2, 1, 1, 3] {
        let at = base + Duration::from_secs(offset);
        t.push(
            store
                .schedule("d")
                .partition_key("due")
                .at(at)
                .await
                .unwrap(),
        );
    }
    let due = || {
        TaskQuery::new()
            .state(TaskState::Scheduled)
            .partition_key("due")
            .by_due()
    };
    assert_eq!(ids(store, due()).await, [t[1], t[2], t[0], t[3]]);
    let first = store.list(&due().limit(2)).await.unwrap();
    assert_eq!(ids(store, due().after_task(&first[1])).await, [t[0], t[3]]);
    let latest = store.list(&due().newest_first().limit(2)).await.unwrap();
    assert_eq!(
        latest.iter().map(|t| t.id).collect::<Vec<_>>(),
        [t[3], t[0]]
    );
    assert_eq!(
        ids(store, due().newest_first().after_task(&latest[1])).await,
        [t[2], t[1]]
    );
    let tie = base + Duration::from_secs(1);
    assert_eq!(
        ids(store, due().after_due(tie, t[1])).await,
        [t[2], t[0], t[3]]
    );
    assert_eq!(
        ids(store, due().newest_first().after_due(tie, t[2])).await,
        [t[1]]
    );
    assert_eq!(
        ids(
            store,
            due().due_from(base + Duration::from_secs(2)).limit(1)
        )
        .await,
        [t[0]]
    );
    assert!(store
        .list(&due().after(t[0]))
        .await
        .unwrap_err()
        .is_config());
}

/// `bounded counts`: each pending count stops at the bound and says so;
/// the finished ones are counted in the newest `bound` of the history,
/// and a full window marks every finished count as a floor; with room to
/// spare they equal the full counts.
async fn bounded_counts_case(store: &Store) {
    for _ in 0..3 {
        store.schedule("a").queue("a").await.unwrap();
    }
    let mut b = Vec::new();
    for _ in 0..3 {
        b.push(store.schedule("b").queue("b").await.unwrap());
    }
    for id in &b[..2] {
        assert!(store.cancel(*id).await.unwrap());
    }
    let tight = store.bounded_queue_counts(2).await.unwrap();
    assert_eq!(tight.counts["a"].scheduled, 2);
    assert!(tight.is_capped("a", TaskState::Scheduled));
    assert_eq!(tight.counts["b"].scheduled, 1);
    assert!(!tight.is_capped("b", TaskState::Scheduled));
    assert!(!tight.is_capped("a", TaskState::Dead));
    assert_eq!(tight.counts["b"].cancelled, 2);
    for queue in ["a", "b"] {
        assert!(tight.is_capped(queue, TaskState::Done));
        assert!(tight.is_capped(queue, TaskState::Cancelled));
    }
    let roomy = store.bounded_queue_counts(10).await.unwrap();
    assert!(roomy.at_least.is_empty(), "{:?}", roomy.at_least);
    assert_eq!(roomy.counts, store.queue_counts().await.unwrap());
    assert!(store.bounded_queue_counts(0).await.unwrap_err().is_config());
}
conformance!(bounded_counts, bounded_counts_case);
