//! Regression: a task that went dead during a reclaim bumped
//! `SchedulerStats::dead` but not `ttw_tasks_dead_total` (the reclaim's rows
//! lost their queue on the way), and reclaims had no metric at all. Every
//! node event now goes through one sink that bumps the stats and the metrics
//! together. A test binary of its own: the recorder is global to it.

#[path = "support/settings.rs"]
mod settings;

#[path = "support/prometheus.rs"]
mod prometheus;

use std::sync::Arc;
use std::time::Duration;

use metrics_exporter_prometheus::PrometheusBuilder;
use prometheus::sample;
use settings::{fast, wait_state};
use ttw_durable::{Store, TaskState};

/// A node dies while its handler runs the last attempt a task has; the
/// node that takes its shards over reclaims the task and finds it out of
/// attempts: dead. Its stats and its metrics say the same: one reclaimed,
/// one dead, in the task's queue.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_dead_in_a_reclaim_is_counted_in_the_metrics_too() {
    let recorder = PrometheusBuilder::new().install_recorder().unwrap();
    let store = Store::builder().shards(4).sqlite_in_memory().await.unwrap();
    let started = Arc::new(tokio::sync::Notify::new());
    let s = started.clone();
    let first = fast(&store)
        .node_id("crashing")
        .callback_timeout(Duration::from_millis(500))
        .lock_grace(Duration::from_millis(200))
        .handle("emails", move |_task| {
            let s = s.clone();
            async move {
                s.notify_one();
                futures::future::pending::<()>().await;
                Ok::<_, String>(())
            }
        })
        .start_queues()
        .await
        .unwrap();
    let id = store
        .schedule(b"work".to_vec())
        .queue("emails")
        .max_attempts(1)
        .await
        .unwrap();
    tokio::time::timeout(Duration::from_secs(10), started.notified())
        .await
        .expect("the first attempt starts");
    first.abort();

    let survivor = fast(&store)
        .node_id("survivor")
        .handle("emails", |_task| async move { Ok::<_, String>(()) })
        .start_queues()
        .await
        .unwrap();
    wait_state(&store, id, TaskState::Dead, Duration::from_secs(15)).await;
    let stats = survivor.stats();
    assert_eq!((stats.reclaimed, stats.dead), (1, 1), "{stats:?}");
    let page = recorder.render();
    assert_eq!(
        sample(&page, "ttw_tasks_reclaimed_total{queue=\"emails\"}"),
        Some(1.0),
        "{page}"
    );
    assert_eq!(
        sample(&page, "ttw_tasks_dead_total{queue=\"emails\"}"),
        Some(1.0),
        "{page}"
    );
    survivor.shutdown().await.unwrap();
}
