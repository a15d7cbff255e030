//! The `ttw` tool run as a person runs it: the built binary, as a child
//! process, against a SQLite file and a PostgreSQL schema; exit codes
//! checked, `--json` output parsed, errors one line.

#[path = "support/backends.rs"]
mod backends;

use std::sync::Arc;
use std::time::Duration;

use backends::{Backend, Db};
use serde_json::Value;
use ttw_durable::{Recurring, Scheduler};

/// What one run of the tool did.
#[derive(Debug)]
struct Run {
    code: i32,
    stdout: String,
    stderr: String,
}

impl Run {
    /// The run succeeded and printed JSON: that JSON.
    fn json(&self) -> Value {
        assert_eq!(self.code, 0, "failed: {self:?}");
        serde_json::from_str(&self.stdout).unwrap_or_else(|e| panic!("not JSON ({e}): {self:?}"))
    }

    /// The run failed as the tool should: exit 1, one line on stderr
    /// starting `ttw: error:` and containing `what`, nothing on stdout, no
    /// panic.
    fn refused(&self, what: &str) {
        assert_eq!(self.code, 1, "{self:?}");
        assert!(self.stdout.is_empty(), "{self:?}");
        let lines: Vec<&str> = self.stderr.lines().collect();
        assert_eq!(lines.len(), 1, "one line: {self:?}");
        assert!(lines[0].starts_with("ttw: error: "), "{self:?}");
        assert!(lines[0].contains(what), "{what:?} not in {self:?}");
        assert!(!self.stderr.contains("panicked"), "{self:?}");
    }
}

/// Runs `ttw` with `args`, and `DATABASE_URL` unset (the database comes
/// from the arguments).
async fn run(args: &[String]) -> Run {
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_ttw-under-test"))
        .args(args)
        .env_remove("DATABASE_URL")
        .env_remove("TTW_SCHEMA")
        .env_remove("TTW_TOKEN")
        .output()
        .await
        .expect("the ttw binary runs");
    Run {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// Runs `ttw` on `db` with `args`.
async fn ttw(db: &Db, args: &[&str]) -> Run {
    let mut all = db.cli_args();
    all.extend(args.iter().map(|a| a.to_string()));
    run(&all).await
}

fn ids(list: &Value) -> Vec<i64> {
    list["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["id"].as_i64().unwrap())
        .collect()
}

on_both! {
    /// A session with the tool: create the schema, schedule (text, a file,
    /// a time, a key given twice), list by filters page by page, show by id
    /// and key, cancel, reschedule, read the counts, and redrive dead tasks
    /// one at a time and in bulk.
    async fn a_session_with_the_tool(db: Db) {
        let migrated = ttw(&db, &["--json", "migrate"]).await.json();
        assert_eq!(migrated["schema_version"], 16);

        let mut emails = Vec::new();
        for i in 0..5 {
            let key = format!("k{i}");
            let out = ttw(&db, &["--json", "schedule", &format!("mail {i}"), "--in", "1h", "--queue", "emails", "--key", &key])
                .await
                .json();
            assert_eq!(out["created"], true);
            emails.push(out["id"].as_i64().unwrap());
        }
        let again = ttw(&db, &["--json", "schedule", "other", "--key", "k0"]).await.json();
        assert_eq!((again["id"].as_i64(), again["created"].as_bool()), (Some(emails[0]), Some(false)));

        let dir = std::env::temp_dir().join(format!("ttw_cli_{}_{}", std::process::id(), db.cli_args().len()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("payload.bin");
        std::fs::write(&file, "<script>alert(1)</script>\n").unwrap();
        let from_file = ttw(&db, &["--json", "schedule", "--file", file.to_str().unwrap(), "--in", "30m"])
            .await
            .json()["id"]
            .as_i64()
            .unwrap();
        let later = ttw(&db, &["--json", "schedule", "report", "--at", "2030-01-01T00:00:00Z", "--queue", "reports", "--priority", "-3"])
            .await
            .json()["id"]
            .as_i64()
            .unwrap();

        let shown = ttw(&db, &["--json", "show", &from_file.to_string()]).await.json();
        // The service's own view of a task: a payload that is not JSON is
        // in base64 only.
        assert_eq!(shown["payload_base64"], "PHNjcmlwdD5hbGVydCgxKTwvc2NyaXB0Pgo=");
        assert!(shown.get("payload").is_none(), "{shown}");
        assert_eq!(shown["queue"], "default");
        let shown = ttw(&db, &["--json", "show", &later.to_string()]).await.json();
        assert_eq!((shown["run_at"].as_str(), shown["priority"].as_i64()), (Some("2030-01-01T00:00:00.000Z"), Some(-3)));
        let by_key = ttw(&db, &["--json", "show", "--key", "k3"]).await.json();
        assert_eq!((by_key["id"].as_i64(), by_key["queue"].as_str()), (Some(emails[3]), Some("emails")));

        // Pages of two, in id order, until a page that is not full.
        let mut seen = Vec::new();
        let mut after: Option<i64> = None;
        for _ in 0..5 {
            let mut args = vec!["--json", "list", "--state", "scheduled", "--queue", "emails", "--limit", "2"];
            let after_text = after.map(|a| a.to_string());
            if let Some(a) = &after_text {
                args.extend(["--after", a.as_str()]);
            }
            let page = ttw(&db, &args).await.json();
            seen.extend(ids(&page));
            after = page["next_after"].as_i64();
            if after.is_none() {
                break;
            }
        }
        assert_eq!(seen, emails, "every email once, in id order");
        let before_2029 = ttw(&db, &["--json", "list", "--due-before", "2029-01-01T00:00:00Z"]).await.json();
        let mut want = emails.clone();
        want.push(from_file);
        assert_eq!(ids(&before_2029), want);
        let from_2029 = ttw(&db, &["--json", "list", "--due-from", "2029-01-01T00:00:00Z"]).await.json();
        assert_eq!(ids(&from_2029), [later]);

        // The text table shows the payload as text.
        let text = ttw(&db, &["list", "--queue", "default"]).await;
        assert_eq!(text.code, 0, "{text:?}");
        assert!(text.stdout.starts_with("ID"), "{text:?}");
        assert!(text.stdout.contains("<script>alert(1)</script>\\n"), "{text:?}");

        // Cancel by key, once; reschedule by id.
        assert_eq!(ttw(&db, &["--json", "cancel", "--key", "k1"]).await.json()["cancelled"], true);
        ttw(&db, &["cancel", "--key", "k1"]).await.refused("is cancelled; only a scheduled task can be cancelled");
        let moved = ttw(&db, &["--json", "reschedule", &emails[2].to_string(), "--at", "2031-05-01T12:00:00Z"]).await.json();
        assert_eq!(moved["run_at"], "2031-05-01T12:00:00.000Z");

        let status = ttw(&db, &["--json", "status"]).await.json();
        assert_eq!(status["queues"]["emails"]["scheduled"], 4);
        assert_eq!(status["queues"]["emails"]["cancelled"], 1);
        assert_eq!(status["queues"]["reports"]["scheduled"], 1);
        assert_eq!(status["nodes"].as_array().unwrap().len(), 0);

        // Four dead emails: three redriven in bulk, then the last by id.
        db.exec("UPDATE ttw_tasks SET state = 'dead', attempts = 3, last_error = 'boom' WHERE queue = 'emails' AND state = 'scheduled'").await;
        let bulk = ttw(&db, &["--json", "redrive", "--all", "--queue", "emails", "--limit", "3", "--spread", "1h"]).await.json();
        assert_eq!(bulk["redriven"], 3);
        let status = ttw(&db, &["--json", "status"]).await.json();
        assert_eq!((status["queues"]["emails"]["scheduled"].as_i64(), status["queues"]["emails"]["dead"].as_i64()), (Some(3), Some(1)));
        let dead = ttw(&db, &["--json", "list", "--state", "dead"]).await.json();
        let last = ids(&dead)[0];
        assert_eq!(dead["tasks"][0]["last_error"], "boom");
        // Its attempts, as a node would have recorded the last one.
        db.exec(&format!(
            "INSERT INTO ttw_attempts (task_id, claim, attempt, locked_by, started_at, ended_at, outcome, status, detail) \
             VALUES ({last}, 3, 3, 'worker-1/00ff', 1000, 1250, 'dead', 410, 'boom: gone')"
        ))
        .await;
        let shown = ttw(&db, &["--json", "show", &last.to_string()]).await.json();
        let history = &shown["attempt_history"][0];
        assert_eq!(
            (history["outcome"].as_str(), history["node"].as_str(), history["status"].as_u64(), history["duration_ms"].as_u64()),
            (Some("dead"), Some("worker-1"), Some(410), Some(250))
        );
        let text = ttw(&db, &["show", &last.to_string()]).await;
        assert!(text.stdout.contains("OUTCOME") && text.stdout.contains("boom: gone") && text.stdout.contains("250 ms"), "{text:?}");
        assert_eq!(ttw(&db, &["--json", "redrive", &last.to_string()]).await.json()["redriven"], 1);
        let redriven = ttw(&db, &["--json", "show", &last.to_string()]).await.json();
        assert_eq!((redriven["state"].as_str(), redriven["attempts"].as_i64()), (Some("scheduled"), Some(0)));
        ttw(&db, &["redrive", &last.to_string()]).await.refused("only a dead task can be redriven");
        ttw(&db, &["show", "999999"]).await.refused("no task 999999");
        ttw(&db, &["schedule", "x", "--queue", "no spaces"]).await.refused("queue");
        let _ = std::fs::remove_dir_all(&dir);
    }
}

on_both! {
    /// `status` shows a running node with the leases it holds and when
    /// they run out; `schedules` shows the recurring schedules.
    async fn status_shows_nodes_and_schedules(db: Db) {
        let store = db.open().await;
        let scheduler = Scheduler::builder(store.clone())
            .node_id("worker-1")
            .start(|_task| async { Ok::<_, String>(()) })
            .await
            .unwrap();
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        while scheduler.stats().shards_owned != store.shards() {
            assert!(tokio::time::Instant::now() < deadline, "the node never held its shards");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        store
            .register_recurring(Recurring::cron("nightly", "0 3 * * *").time_zone("Europe/Berlin").queue("reports"))
            .await
            .unwrap();
        store.register_recurring(Recurring::every("poll", Duration::from_secs(90))).await.unwrap();

        let status = ttw(&db, &["--json", "status"]).await.json();
        let nodes = status["nodes"].as_array().unwrap();
        assert_eq!(nodes.len(), 1, "{status}");
        assert_eq!(nodes[0]["node_id"], "worker-1");
        assert_eq!(nodes[0]["queues"][0], "default");
        assert_eq!(nodes[0]["leases"].as_u64(), Some(u64::from(store.shards())));
        assert!(nodes[0]["lease_expires_at"].is_string(), "{status}");
        assert_eq!(nodes[0]["live"], true);
        let text = ttw(&db, &["status"]).await;
        assert!(text.stdout.contains("worker-1") && text.stdout.contains("NODE"), "{text:?}");

        let schedules = ttw(&db, &["--json", "schedules"]).await.json();
        let list = schedules["schedules"].as_array().unwrap();
        let names: Vec<&str> = list.iter().map(|s| s["name"].as_str().unwrap()).collect();
        assert_eq!(names, ["nightly", "poll"]);
        assert_eq!(list[0]["rule"], "cron 0 3 * * * Europe/Berlin");
        assert_eq!(list[0]["queue"], "reports");
        assert_eq!(list[1]["every_ms"], 90_000);
        let text = ttw(&db, &["schedules"]).await;
        assert!(text.stdout.contains("nightly") && text.stdout.contains("every 1m 30s"), "{text:?}");
        scheduler.shutdown().await.unwrap();
    }
}

on_both! {
    /// `queue` pauses and resumes a queue while a node serves it (the node
    /// starts none of its tasks while paused), sets and clears its limits
    /// (a limit not named is kept), lists and shows them, and refuses bad
    /// limits with one line and exit 1.
    async fn queue_settings_are_changed_live_from_the_tool(db: Db) {
        let store = db.open().await;
        let ran = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let count = ran.clone();
        let scheduler = Scheduler::builder(store.clone())
            .handle("sms", move |_task| {
                count.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                async { Ok::<_, String>(()) }
            })
            .start_queues()
            .await
            .unwrap();
        let paused = ttw(&db, &["--json", "queue", "pause", "sms"]).await.json();
        assert_eq!(paused["paused"], true, "{paused}");
        store.schedule("hi").queue("sms").await.unwrap();
        tokio::time::sleep(Duration::from_millis(1_500)).await;
        assert_eq!(ran.load(std::sync::atomic::Ordering::SeqCst), 0, "ran while paused");
        let resumed = ttw(&db, &["--json", "queue", "resume", "sms"]).await.json();
        assert_eq!(resumed["paused"], false);
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        while ran.load(std::sync::atomic::Ordering::SeqCst) == 0 {
            assert!(tokio::time::Instant::now() < deadline, "never ran after the resume");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }

        let set = ttw(&db, &["--json", "queue", "limit", "sms", "--concurrency", "8", "--rate", "100/s", "--burst", "10"]).await.json();
        assert_eq!((set["concurrency"].as_u64(), set["rate"]["count"].as_u64()), (Some(8), Some(100)));
        assert_eq!((set["rate"]["period_ms"].as_u64(), set["rate"]["burst"].as_u64()), (Some(1000), Some(10)));
        let per_key = ttw(&db, &["--json", "queue", "limit", "sms", "--per-key", "3"]).await.json();
        assert_eq!((per_key["per_key_concurrency"].as_u64(), per_key["concurrency"].as_u64()), (Some(3), Some(8)));
        let kept = ttw(&db, &["--json", "queue", "limit", "sms", "--rate", "none", "--per-key", "none"]).await.json();
        assert_eq!((kept["concurrency"].as_u64(), kept["rate"].is_null()), (Some(8), true));
        let limits = store.queue_settings("sms").await.unwrap().limits;
        assert_eq!((limits.concurrency_limit(), limits.rate_limit()), (Some(8), None));
        let list = ttw(&db, &["--json", "queue", "list"]).await.json();
        assert_eq!(list["queues"][0]["queue"], "sms");
        let text = ttw(&db, &["queue", "show", "sms"]).await;
        assert!(text.stdout.contains("CONCURRENCY") && text.stdout.contains('8'), "{text:?}");

        let retry = ttw(&db, &["--json", "queue", "retry", "sms", "--max-attempts", "3", "--backoff", "10s..10m"]).await.json();
        assert_eq!((retry["max_attempts"].as_u64(), retry["backoff"]["max_ms"].as_u64()), (Some(3), Some(600_000)));
        assert_eq!(store.queue_settings("sms").await.unwrap().retry.max_attempts_limit(), Some(3));
        ttw(&db, &["queue", "retry", "sms", "--backoff", "soon"]).await.refused("--backoff");
        ttw(&db, &["queue", "retry", "sms", "--max-attempts", "0"]).await.refused("max_attempts");
        ttw(&db, &["queue", "limit", "sms", "--concurrency", "0"]).await.refused("concurrency");
        ttw(&db, &["queue", "limit", "sms", "--rate", "5/fortnight"]).await.refused("--rate");
        ttw(&db, &["queue", "limit", "sms", "--burst", "3"]).await.refused("no rate");
        ttw(&db, &["queue", "limit", "sms"]).await.refused("--concurrency");
        ttw(&db, &["queue", "pause", "a,b"]).await.refused("queue name");
        scheduler.shutdown().await.unwrap();
    }
}

on_both! {
    /// A SQLite store moved to another store (PostgreSQL, or another SQLite
    /// file) by `ttw export` and `ttw import`: every scheduled task with its
    /// time, payload (bytes that are not UTF-8 too), queue, priority,
    /// attempt limit, partition key, kind, envelope (its trace context) and
    /// idempotency key (its own, or one from its old id), every recurring
    /// schedule (paused stays paused), no
    /// occurrence of a schedule, no finished task; a second import stores
    /// nothing twice.
    async fn a_store_moves_by_export_and_import(db: Db) {
        let dir = std::env::temp_dir().join(format!("ttw-export-{}-{:?}", std::process::id(), db.backend));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let source = dir.join("from.db");
        let from = ttw_durable::Store::sqlite(&source).await.unwrap();
        let hour = Duration::from_secs(3_600);
        let trace = ttw_durable::Envelope::new().traceparent("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01");
        let keyed = from.schedule(r#"{"order":42}"#).delay(hour).idempotency_key("order-42").queue("emails").priority(3).max_attempts(7).partition_key("tenant-a").kind("cancel_order").envelope(trace.clone()).await.unwrap();
        let keyless = from.schedule(vec![0xff, 0x00, 0xfe]).delay(2 * hour).await.unwrap();
        let done = from.schedule("done already").await.unwrap();
        let cancelled = from.schedule("cancelled").delay(hour).await.unwrap();
        assert!(from.cancel(cancelled).await.unwrap());
        from.register_recurring(Recurring::cron("nightly", "0 3 * * *").time_zone("Europe/Paris").payload("n").queue("emails")).await.unwrap();
        from.register_recurring(Recurring::every("tick", Duration::from_secs(60))).await.unwrap();
        assert!(from.pause_recurring("tick").await.unwrap());
        from.register_recurring(Recurring::every("soon", Duration::from_secs(2))).await.unwrap();
        // One task run to its end, and an occurrence made a task ahead of
        // its time.
        let scheduler = Scheduler::builder(from.clone())
            .start(|_task| async { Ok::<_, String>(()) })
            .await
            .unwrap();
        for _ in 0..400 {
            let page = from.pending_page(None, 1_000).await.unwrap();
            let finished = from.get(done).await.unwrap().unwrap().state == ttw_durable::TaskState::Done;
            if finished && page.iter().any(|t| t.recurring.is_some()) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        scheduler.shutdown().await.unwrap();
        let before = from.pending_page(None, 1_000).await.unwrap();
        assert!(before.iter().any(|t| t.recurring.is_some()), "an occurrence waits as a task");
        drop(from);

        let file = dir.join("export.jsonl");
        let exported = super::run(&["--database".into(), source.display().to_string(), "export".into(), "--output".into(), file.display().to_string()]).await;
        assert_eq!(exported.code, 0, "{exported:?}");
        assert!(exported.stderr.contains("exported 2 scheduled tasks and 3 recurring schedules"), "{exported:?}");
        let lines = std::fs::read_to_string(&file).unwrap();
        assert_eq!(lines.lines().count(), 5, "{lines}");

        ttw(&db, &["migrate"]).await;
        let first = ttw(&db, &["import", file.to_str().unwrap()]).await;
        assert_eq!(first.code, 0, "{first:?}");
        assert!(first.stdout.contains("imported 2 tasks (0 already there) and 3 recurring schedules (0 already there)"), "{first:?}");
        let again = ttw(&db, &["import", file.to_str().unwrap()]).await;
        assert!(again.stdout.contains("imported 0 tasks (2 already there) and 0 recurring schedules (3 already there)"), "{again:?}");

        let to = db.open_with(ttw_durable::Store::builder()).await;
        let moved = to.pending_page(None, 1_000).await.unwrap();
        let moved: Vec<_> = moved.iter().filter(|t| t.recurring.is_none()).collect();
        assert_eq!(moved.len(), 2, "{moved:?}");
        let find = |key: &str| moved.iter().find(|t| t.idempotency_key.as_deref() == Some(key)).unwrap_or_else(|| panic!("no task keyed {key}: {moved:?}"));
        let (a, b) = (find("order-42"), find(&format!("ttw-import:{}", keyless.get())));
        let original = |id| before.iter().find(|t| t.id == id).unwrap();
        let (oa, ob) = (original(keyed), original(keyless));
        assert_eq!((a.run_at, &a.payload, &a.queue, a.priority, a.max_attempts, &a.partition_key), (oa.run_at, &oa.payload, &oa.queue, 3, Some(7), &oa.partition_key));
        assert_eq!(a.partition_key.as_deref(), Some("tenant-a"));
        // Regression: the export kept neither a typed job's kind nor a
        // task's envelope, and a moved task lost its trace context.
        assert_eq!((a.kind.as_deref(), a.envelope.as_ref()), (Some("cancel_order"), Some(&trace)));
        assert_eq!((b.kind.as_deref(), b.envelope.as_ref()), (None, None));
        assert_eq!((b.run_at, &b.payload, &b.queue), (ob.run_at, &ob.payload, &ob.queue));
        assert_eq!(b.payload, [0xff, 0x00, 0xfe]);
        let schedules = to.list_recurring().await.unwrap();
        let nightly = schedules.iter().find(|s| s.name == "nightly").unwrap();
        assert_eq!((nightly.cron.as_deref(), nightly.time_zone.as_deref(), nightly.queue.as_str(), nightly.paused), (Some("0 3 * * *"), Some("Europe/Paris"), "emails", false));
        let tick = schedules.iter().find(|s| s.name == "tick").unwrap();
        assert_eq!((tick.every, tick.paused), (Some(Duration::from_secs(60)), true));

        // A file that is not an export is refused before anything is written.
        std::fs::write(dir.join("bad.jsonl"), format!("{}\n{{\"task\": {{\"id\": 1}}}}\n", lines.lines().next().unwrap())).unwrap();
        ttw(&db, &["import", dir.join("bad.jsonl").to_str().unwrap()]).await.refused("line 2");
        let _ = std::fs::remove_dir_all(&dir);
    }
}

/// Regression: `ttw --help` opened with the timer crate's description ("A
/// shared, fast, loss-free hierarchical timing wheel...") instead of saying
/// what the tool does.
#[tokio::test]
async fn help_says_what_the_tool_does() {
    let help = run(&["--help".to_string()]).await;
    assert_eq!(help.code, 0, "{help:?}");
    let first = help.stdout.lines().next().unwrap_or_default();
    assert!(
        first.starts_with("Operate a tokio-timing-wheel durable task store"),
        "{help:?}"
    );
    assert!(
        !help.stdout.contains("hierarchical timing wheel"),
        "{help:?}"
    );
}

/// Errors are one line and exit 1 (usage errors are clap's, exit 2): no
/// database named, a file that is not there (not created by mistake), a
/// URL nothing answers, a URL of another kind, `--schema` on SQLite, a bad
/// duration and a bad time.
#[tokio::test]
async fn errors_are_one_line_and_a_non_zero_exit() {
    let s = |v: &[&str]| v.iter().map(|a| a.to_string()).collect::<Vec<_>>();
    run(&s(&["status"])).await.refused("no database");
    let missing = std::env::temp_dir().join(format!("ttw_missing_{}.db", std::process::id()));
    let missing = missing.to_str().unwrap();
    run(&s(&["--database", missing, "status"]))
        .await
        .refused("no database at");
    assert!(
        !std::path::Path::new(missing).exists(),
        "a misspelt path creates nothing"
    );
    run(&s(&[
        "--database",
        "postgres://nobody@127.0.0.1:1/none",
        "status",
    ]))
    .await
    .refused("cannot open the PostgreSQL store");
    run(&s(&["--database", "mysql://localhost/x", "status"]))
        .await
        .refused("not a database this tool knows");

    let db = Db::new(Backend::Sqlite, "cli_errors");
    ttw(&db, &["--json", "migrate"]).await.json();
    ttw(&db, &["--schema", "x", "status"])
        .await
        .refused("--schema is for PostgreSQL");
    ttw(&db, &["schedule", "x", "--in", "5"])
        .await
        .refused("--in: not a duration");
    ttw(&db, &["schedule", "x", "--at", "tomorrow"])
        .await
        .refused("--at: invalid time: \"tomorrow\" is not an RFC 3339 time");
    ttw(&db, &["list", "--limit", "0"])
        .await
        .refused("a page holds 1 to 1000 tasks");
    ttw(&db, &["redrive", "--all", "--state", "scheduled"])
        .await
        .refused("only finished tasks");
    // Regression: `--in -5m` was a usage error from the argument parser
    // ("unexpected argument '-5'"), not the tool's own line.
    ttw(&db, &["schedule", "x", "--in", "-5m"])
        .await
        .refused("--in: a delay cannot be negative");
    ttw(&db, &["redrive", "--all", "--spread", "-1m"])
        .await
        .refused("--spread: a delay cannot be negative");
    let usage = ttw(&db, &["show"]).await;
    assert_eq!(usage.code, 2, "{usage:?}");
    assert!(!usage.stderr.contains("panicked"), "{usage:?}");
}

/// `ttw demo`, the README's first command: the service on a store of its
/// own, tasks scheduled over HTTP and delivered to its receiver, each once,
/// none early, every signature verified, each done by the API's account;
/// then the console's URL and token. Exit 0, and the store it made is gone.
#[tokio::test]
async fn the_demo_runs_the_service_end_to_end_and_says_what_happened() {
    let demo = run(&["demo".into(), "--tasks".into(), "3".into()]).await;
    assert_eq!(demo.code, 0, "{demo:?}");
    for said in [
        "ttw demo: 3 task(s) scheduled",
        "ttw demo: 3 of 3 delivered (3 request(s)), 0 early",
        "3 signature(s) verified; GET /v1/tasks/{id} says 3 done",
        "/console/ (token ",
    ] {
        assert!(demo.stdout.contains(said), "{said:?} in:\n{}", demo.stdout);
    }
    assert_eq!(
        demo.stdout.matches("signature verified").count(),
        3,
        "{}",
        demo.stdout
    );
    // A count out of range is a usage error.
    let refused = run(&["demo".into(), "--tasks".into(), "0".into()]).await;
    assert_eq!(refused.code, 2, "{refused:?}");
}

/// `ttw.example.toml`, the file the README starts a service from, is
/// valid once its secrets are set, and names the one that is not.
#[tokio::test]
async fn the_example_configuration_is_valid() {
    let file = concat!(env!("CARGO_MANIFEST_DIR"), "/../../ttw.example.toml");
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_ttw-under-test"))
        .args(["server", "--config", file, "--check"])
        .env(
            "TTW_ORDERS_SECRET",
            "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
        )
        .env("TTW_TOKEN_CHECKOUT", "checkout-token-0123456789")
        .env("TTW_TOKEN_OPERATOR", "operator-token-0123456789")
        .env_remove("DATABASE_URL")
        .output()
        .await
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("is valid: 2 queue(s)"), "{stdout}");
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_ttw-under-test"))
        .args(["server", "--config", file, "--check"])
        .env_remove("TTW_ORDERS_SECRET")
        .output()
        .await
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr.contains("TTW_ORDERS_SECRET is not set"), "{stderr}");
}
