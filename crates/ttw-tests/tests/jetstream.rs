//! The NATS JetStream target against a real `nats-server -js`: messages
//! carry the task, a task counts as done only after the stream's
//! acknowledgement, a server stopped for 5 s loses nothing, and a scheduler
//! `SIGKILL`ed after its publishes were acknowledged but before their
//! outcomes were written leaves the stream with exactly one message per
//! task once it is back (the stream drops the repeat by `Nats-Msg-Id`),
//! while a redrive is a new message.
#![cfg(all(target_os = "linux", feature = "nats"))]

#[path = "support/child.rs"]
mod child;
#[path = "support/backends.rs"]
#[macro_use]
mod backends;
#[path = "support/nats.rs"]
mod nats;
#[path = "support/states.rs"]
mod states;

use std::collections::HashSet;
use std::time::Duration;

use async_nats::jetstream::{self, stream::Stream};
use backends::{Backend, Db};
use nats::Nats;
use states::wait_for_state;
use tokio::io::{AsyncBufReadExt, BufReader};
use ttw_durable::{
    Backoff, JetStream, Redrive, Scheduler, SchedulerBuilder, Store, TaskId, TaskState,
};

/// The stream every test publishes into: subjects `tasks.>`, on disk.
async fn stream(client: &async_nats::Client) -> Stream {
    jetstream::new(client.clone())
        .create_stream(jetstream::stream::Config {
            name: "TASKS".into(),
            subjects: vec!["tasks.>".into()],
            storage: jetstream::stream::StorageType::File,
            duplicate_window: Duration::from_secs(120),
            ..Default::default()
        })
        .await
        .expect("create the stream")
}

fn target(client: async_nats::Client) -> JetStream {
    JetStream::builder(client)
        .subject("tasks.{queue}.{key}")
        .timeout(Duration::from_secs(1))
        .build()
        .unwrap()
}

fn scheduler(store: &Store, target: JetStream) -> SchedulerBuilder {
    Scheduler::builder(store.clone())
        .backoff(Backoff::exponential(
            Duration::from_millis(100),
            Duration::from_millis(500),
        ))
        .max_attempts(1000)
        .deliver("events", target)
}

/// Every message in the stream, in order.
async fn messages(stream: &Stream) -> Vec<jetstream::message::StreamMessage> {
    let mut stream = stream.clone();
    let last = stream.info().await.unwrap().state.last_sequence;
    let mut out = Vec::new();
    for seq in 1..=last {
        if let Ok(m) = stream.get_raw_message(seq).await {
            out.push(m);
        }
    }
    out
}

fn header(m: &jetstream::message::StreamMessage, name: &str) -> String {
    m.headers
        .get(name)
        .map(|v| v.as_str().to_string())
        .unwrap_or_default()
}

async fn schedule(store: &Store, n: u64, spread: Duration) -> Vec<TaskId> {
    let mut ids = Vec::new();
    for i in 0..n {
        let id = store
            .schedule(format!("event {i}").into_bytes())
            .queue("events")
            .delay(spread * i as u32 / n as u32)
            .idempotency_key(format!("k{i}"))
            .await
            .unwrap();
        ids.push(id);
    }
    ids
}

on_both! {
    /// Each task becomes one message on its subject, with the task's
    /// fields as headers and `Nats-Msg-Id` its message id; a task is done
    /// once the stream acknowledged it.
    #[cfg_attr(ttw_no_nats, ignore = "needs nats-server when built")]
    async fn each_task_is_one_message_with_its_fields(db: Db) {
        let server = Nats::start().await;
        let client = server.client().await;
        let stream = stream(&client).await;
        let store = db.open().await;
        let scheduler = scheduler(&store, target(client)).start_queues().await.unwrap();
        let ids = schedule(&store, 30, Duration::from_millis(600)).await;
        wait_for_state(&store, &ids, TaskState::Done, Duration::from_secs(30)).await;
        scheduler.shutdown().await.unwrap();

        let messages = messages(&stream).await;
        assert_eq!(messages.len(), 30);
        let mut seen = HashSet::new();
        for m in &messages {
            let task = header(m, "ttw-task-id");
            assert_eq!(header(m, "Nats-Msg-Id"), format!("ttw-{task}-0"));
            assert_eq!(header(m, "ttw-message-id"), format!("ttw-{task}-0"));
            assert_eq!(header(m, "ttw-attempt"), "1");
            assert_eq!(header(m, "ttw-queue"), "events");
            let key = header(m, "ttw-idempotency-key");
            assert_eq!(m.subject.as_str(), format!("tasks.events.{key}"));
            let i = key.strip_prefix('k').unwrap();
            assert_eq!(&m.payload[..], format!("event {i}").as_bytes());
            seen.insert(task.parse::<i64>().unwrap());
        }
        assert_eq!(seen, ids.iter().map(|id| id.get()).collect());
    }
}

on_both! {
    /// `nats-server` is killed while tasks fall due and started again 5 s
    /// later on its store: publishes in the gap fail and are retried, and
    /// in the end every task is done with exactly one message in the
    /// stream.
    #[cfg_attr(ttw_no_nats, ignore = "needs nats-server when built")]
    async fn a_server_stopped_for_5_s_loses_nothing(db: Db) {
        let mut server = Nats::start().await;
        let client = server.client().await;
        let stream = stream(&client).await;
        let store = db.open().await;
        let scheduler = scheduler(&store, target(client)).start_queues().await.unwrap();
        let ids = schedule(&store, 120, Duration::from_secs(4)).await;
        tokio::time::sleep(Duration::from_secs(1)).await;
        server.stop().await;
        tokio::time::sleep(Duration::from_secs(5)).await;
        server.resume().await;
        wait_for_state(&store, &ids, TaskState::Done, Duration::from_secs(60)).await;
        let stats = scheduler.stats();
        scheduler.shutdown().await.unwrap();
        assert!(stats.retried > 0, "publishes failed while the server was down: {stats:?}");

        let messages = messages(&stream).await;
        let tasks: Vec<i64> = messages.iter().map(|m| header(m, "ttw-task-id").parse().unwrap()).collect();
        let unique: HashSet<i64> = tasks.iter().copied().collect();
        assert_eq!(unique, ids.iter().map(|id| id.get()).collect(), "every task arrived");
        assert_eq!(tasks.len(), ids.len(), "one message per task");
    }
}

on_both! {
    /// A cluster of three `nats-server`s and a stream with 3 replicas; the
    /// server leading the stream is `SIGKILL`ed while tasks fall due: the
    /// publishes it was to acknowledge fail or time out and are retried
    /// (on the servers left, once they elect a new leader), and every task
    /// is in the stream exactly once (`Nats-Msg-Id`), none lost. Prints the
    /// pause: the longest gap between two messages of the stream.
    #[cfg_attr(ttw_no_nats, ignore = "needs nats-server when built")]
    async fn a_cluster_losing_its_stream_leader_loses_nothing(db: Db) {
        // One cluster at a time: each takes six ports and a leader election.
        static ONE: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
        let _one = ONE.lock().await;
        let mut servers = Nats::cluster().await;
        let client = Nats::cluster_client(&servers).await;
        let js = jetstream::new(client.clone());
        // The cluster elects its meta leader first: until then a stream
        // cannot be created.
        let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
        let mut stream = loop {
            let made = js
                .get_or_create_stream(jetstream::stream::Config {
                    name: "TASKS".into(),
                    subjects: vec!["tasks.>".into()],
                    storage: jetstream::stream::StorageType::File,
                    num_replicas: 3,
                    duplicate_window: Duration::from_secs(120),
                    ..Default::default()
                })
                .await;
            match made {
                Ok(stream) => break stream,
                Err(err) => {
                    assert!(tokio::time::Instant::now() < deadline, "no stream within 60 s: {err}");
                    tokio::time::sleep(Duration::from_millis(250)).await;
                }
            }
        };
        let store = db.open().await;
        let scheduler = scheduler(&store, target(client)).start_queues().await.unwrap();
        let ids = schedule(&store, 300, Duration::from_secs(6)).await;
        tokio::time::sleep(Duration::from_secs(2)).await;
        let leader = stream.info().await.unwrap().cluster.as_ref().and_then(|c| c.leader.clone()).expect("the stream has a leader");
        let index: usize = leader.strip_prefix('n').and_then(|n| n.parse().ok()).expect("a server of the cluster");
        servers[index].stop().await;
        wait_for_state(&store, &ids, TaskState::Done, Duration::from_secs(90)).await;
        let stats = scheduler.stats();
        scheduler.shutdown().await.unwrap();

        let messages = messages(&stream).await;
        let tasks: Vec<i64> = messages.iter().map(|m| header(m, "ttw-task-id").parse().unwrap()).collect();
        let unique: HashSet<i64> = tasks.iter().copied().collect();
        assert_eq!(unique, ids.iter().map(|id| id.get()).collect(), "every task arrived");
        assert_eq!(tasks.len(), ids.len(), "one message per task");
        let pause = messages
            .windows(2)
            .map(|w| (w[1].time - w[0].time).as_seconds_f64())
            .fold(0.0, f64::max);
        println!(
            "{:?}: stream leader {leader} killed; 300 tasks, {} retried publishes, longest gap between messages {pause:.2} s",
            db.backend, stats.retried
        );
    }
}

on_both! {
    /// A scheduler process is `SIGKILL`ed after the stream acknowledged its
    /// publishes and before their outcomes were written. Restarted under
    /// its node id, it delivers them all again; the stream drops the
    /// repeats by `Nats-Msg-Id`, so it holds exactly one message per task.
    /// A redrive afterwards is a new run: a new message each, with a new id.
    #[cfg_attr(ttw_no_nats, ignore = "needs nats-server when built")]
    async fn a_scheduler_killed_between_ack_and_outcome_leaves_one_message_per_task(db: Db) {
        let server = Nats::start().await;
        let client = server.client().await;
        let stream = stream(&client).await;
        let store = db.open().await;
        let ids = schedule(&store, 20, Duration::ZERO).await;

        // The scheduler process: it publishes each task through the target,
        // prints `PUBLISHED <id>` once the stream has acknowledged it, and
        // then never returns, so no outcome is written.
        let url = server.url();
        let mut child = child::command("nats-publisher", &["--nats", &url])
            .envs(db.env())
            .spawn()
            .unwrap();
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let mut published = HashSet::new();
        tokio::time::timeout(Duration::from_secs(60), async {
            while published.len() < ids.len() {
                let line = lines.next_line().await.unwrap().expect("the child runs");
                if let Some(id) = line.strip_prefix("PUBLISHED ") {
                    published.insert(id.parse::<i64>().unwrap());
                }
            }
        })
        .await
        .expect("the child publishes every task within 60 s");
        child.kill().await.unwrap();
        assert_eq!(messages(&stream).await.len(), ids.len(), "acknowledged before the kill");
        for id in &ids {
            let info = store.get(*id).await.unwrap().unwrap();
            assert_eq!(info.state, TaskState::Running, "no outcome written: {info:?}");
        }

        let scheduler = scheduler(&store, target(client.clone()))
            .node_id("publisher")
            .start_queues()
            .await
            .unwrap();
        wait_for_state(&store, &ids, TaskState::Done, Duration::from_secs(60)).await;
        let redelivered = store.get(ids[0]).await.unwrap().unwrap();
        assert_eq!(redelivered.attempts, 2, "published twice: {redelivered:?}");
        let messages_now = messages(&stream).await;
        assert_eq!(messages_now.len(), ids.len(), "exactly one message per task");

        let again = Redrive::dead().state(TaskState::Done).queue("events");
        assert_eq!(store.redrive_many(&again).await.unwrap(), ids.len() as u64);
        wait_for_state(&store, &ids, TaskState::Done, Duration::from_secs(30)).await;
        scheduler.shutdown().await.unwrap();
        let messages_now = messages(&stream).await;
        assert_eq!(messages_now.len(), 2 * ids.len(), "a redrive is a new message");
        for m in &messages_now[ids.len()..] {
            // Two claims before this run: the killed one and the redelivery.
            let task = header(m, "ttw-task-id");
            assert_eq!(header(m, "Nats-Msg-Id"), format!("ttw-{task}-2"));
        }
    }
}

/// Bad configuration is refused with a clear error at build or start.
#[tokio::test]
#[cfg_attr(ttw_no_nats, ignore = "needs nats-server when built")]
async fn bad_configuration_is_refused() {
    let server = Nats::start().await;
    let client = server.client().await;
    for (builder, says) in [
        (JetStream::builder(client.clone()), "needs a subject"),
        (
            JetStream::builder(client.clone()).subject("tasks.>"),
            "wildcard",
        ),
        (
            JetStream::builder(client.clone()).subject("tasks.{payload}"),
            "unknown field",
        ),
        (
            JetStream::builder(client.clone())
                .subject("tasks")
                .timeout(Duration::ZERO),
            "timeout",
        ),
    ] {
        let err = builder.build().unwrap_err();
        assert!(err.is_config() && err.to_string().contains(says), "{err}");
    }
    let store = Db::new(Backend::Sqlite, "jetstream_bad_config")
        .open()
        .await;
    let slow = JetStream::builder(client)
        .subject("tasks")
        .timeout(Duration::from_secs(120))
        .build()
        .unwrap();
    let err = Scheduler::builder(store)
        .deliver("events", slow)
        .start_queues()
        .await
        .unwrap_err();
    assert!(err.to_string().contains("callback_timeout"), "{err}");
}
