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
}
conformance!(selection_statements, selection_case);
