//! The durable layer's metrics reach an installed recorder (here the
//! Prometheus exporter `ttw server` serves at `/metrics`), with the names and labels the
//! docs list, and a delivery's log lines carry its span: task id, queue,
//! attempt and lateness. One test: the recorder and the subscriber are
//! global to this test binary.

#[path = "support/settings.rs"]
mod settings;

#[path = "support/prometheus.rs"]
mod prometheus;

use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use metrics_exporter_prometheus::PrometheusBuilder;
use prometheus::sample;
use settings::{fast, wait_state};
use ttw_durable::{NewTask, Store, TaskState};

/// Log output, kept.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Also two regressions: `ttw_tasks` kept the last counts of a queue
/// whose tasks had all been swept (it now reads zero), and a batch looked
/// up its scheduled counter, allocating its label, once per task (now once
/// per run of one queue; the counts must stay right).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_and_delivery_spans() {
    let recorder = PrometheusBuilder::new().install_recorder().unwrap();
    ttw_durable::describe_metrics();
    let logs = Captured::default();
    let writer = logs.clone();
    tracing::subscriber::set_global_default(
        tracing_subscriber::fmt()
            .with_ansi(false)
            .with_writer(move || writer.clone())
            .finish(),
    )
    .unwrap();

    let store = Store::builder()
        .shards(16)
        .sqlite_in_memory()
        .await
        .unwrap();
    let scheduler = fast(&store)
        .node_id("m1")
        .max_attempts(2)
        .start(|task| async move {
            tracing::info!("handling");
            if task.payload() == b"fail" {
                Err("it failed".to_string())
            } else {
                Ok(())
            }
        })
        .await
        .unwrap();
    let mut ids = Vec::new();
    for payload in ["a", "b", "c", "fail"] {
        ids.push(
            store
                .schedule(payload)
                .queue("default")
                .delay(Duration::from_millis(50))
                .await
                .unwrap(),
        );
    }
    for &id in &ids[..3] {
        wait_state(&store, id, TaskState::Done, Duration::from_secs(10)).await;
    }
    wait_state(&store, ids[3], TaskState::Dead, Duration::from_secs(10)).await;
    // A heartbeat sets the node's gauges.
    tokio::time::sleep(Duration::from_millis(500)).await;
    store.publish_task_counts().await.unwrap();

    let page = recorder.render();
    let q = "{queue=\"default\"}";
    for (name, want) in [
        ("ttw_tasks_scheduled_total", 4.0),
        ("ttw_deliveries_total", 5.0),
        ("ttw_attempts_succeeded_total", 3.0),
        ("ttw_attempts_failed_total", 2.0),
        ("ttw_retries_total", 1.0),
        ("ttw_tasks_dead_total", 1.0),
        ("ttw_lateness_seconds_count", 5.0),
        ("ttw_handler_duration_seconds_count", 5.0),
    ] {
        assert_eq!(
            sample(&page, &format!("{name}{q} ")),
            Some(want),
            "{name} in\n{page}"
        );
    }
    assert_eq!(
        sample(&page, "ttw_shards_owned{node=\"m1\"} "),
        Some(16.0),
        "{page}"
    );
    assert!(
        sample(&page, "ttw_window_tasks{node=\"m1\"} ").is_some(),
        "{page}"
    );
    for (state, want) in [("done", 3.0), ("dead", 1.0), ("scheduled", 0.0)] {
        let line = format!("ttw_tasks{{queue=\"default\",state=\"{state}\"}} ");
        assert_eq!(sample(&page, &line), Some(want), "{line} in\n{page}");
    }
    assert!(
        page.contains("# HELP ttw_lateness_seconds"),
        "described: {page}"
    );

    // Every handler's line is inside its delivery's span.
    let text = String::from_utf8(logs.0.lock().unwrap().clone()).unwrap();
    let handled: Vec<&str> = text.lines().filter(|l| l.contains("handling")).collect();
    assert_eq!(handled.len(), 5, "{text}");
    for line in &handled {
        assert!(line.contains("ttw_delivery{task_id="), "{line}");
        assert!(line.contains("queue=default"), "{line}");
        assert!(line.contains("lateness_ms="), "{line}");
    }
    let fail = ids[3].get();
    assert!(
        handled
            .iter()
            .any(|l| l.contains(&format!("task_id={fail} queue=default attempt=2"))),
        "{text}"
    );
    scheduler.shutdown().await.unwrap();

    // A batch counts its tasks by queue, however they are interleaved.
    store
        .schedule_batch(["x", "y", "x", "x"].map(|q| {
            NewTask::new("later")
                .queue(q)
                .delay(Duration::from_secs(3600))
        }))
        .await
        .unwrap();
    let page = recorder.render();
    for (queue, want) in [("x", 3.0), ("y", 1.0)] {
        let line = format!("ttw_tasks_scheduled_total{{queue=\"{queue}\"}} ");
        assert_eq!(sample(&page, &line), Some(want), "{line} in\n{page}");
    }

    // A queue whose tasks are all swept away reads zero, not its last
    // counts.
    let brief = store
        .schedule("brief")
        .queue("brief")
        .delay(Duration::from_secs(3600))
        .await
        .unwrap();
    store.cancel(brief).await.unwrap();
    store.publish_task_counts().await.unwrap();
    let cancelled = "ttw_tasks{queue=\"brief\",state=\"cancelled\"} ";
    assert_eq!(sample(&recorder.render(), cancelled), Some(1.0));
    let sweeper = fast(&store)
        .node_id("m2")
        .retention(Duration::from_millis(1))
        .start(|_| async { Ok::<(), String>(()) })
        .await
        .unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while store.queue_counts().await.unwrap().contains_key("brief") {
        assert!(tokio::time::Instant::now() < deadline, "never swept");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    sweeper.shutdown().await.unwrap();
    let counts = store.publish_task_counts().await.unwrap();
    assert!(!counts.contains_key("brief"));
    let page = recorder.render();
    assert_eq!(sample(&page, cancelled), Some(0.0), "{page}");
}
