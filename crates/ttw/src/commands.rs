//! The commands that read or change the store and print what they did.

use std::time::SystemTime;

use serde_json::json;
use ttw_durable::{CatchUp, Redrive, Scheduled, Store, TaskId, TaskInfo, TaskQuery};

use crate::cli::{ListArgs, RedriveArgs, RescheduleArgs, ScheduleArgs, Target, When};
use crate::error::{fail, Result};
use crate::output::{self, print_json, table};
use crate::parse::{flag_duration as parse_duration, flag_time as parse_time};

pub(crate) async fn migrate(store: &Store, json: bool) -> Result<()> {
    let version = store.schema_version().await?;
    if json {
        print_json(&json!({ "schema_version": version, "shards": store.shards() }));
    } else {
        println!(
            "schema up to date: version {version}, {} shards, {}",
            store.shards(),
            if store.is_postgres() {
                "PostgreSQL"
            } else {
                "SQLite"
            }
        );
    }
    Ok(())
}

pub(crate) async fn status(store: &Store, json: bool) -> Result<()> {
    let counts = store.queue_counts().await?;
    let late = store.oldest_due().await?;
    let nodes = store.nodes().await?;
    if json {
        let queues: serde_json::Map<_, _> = counts
            .iter()
            .map(|(q, c)| {
                let mut v = output::counts_json(c);
                v["late_ms"] = json!(late.get(q).map(|t| output::ago(*t).as_millis() as u64));
                (q.clone(), v)
            })
            .collect();
        let nodes: Vec<_> = nodes
            .iter()
            .map(|n| {
                json!({
                    "node_id": n.node_id,
                    "queues": n.queues,
                    "heartbeat_at": output::time(n.heartbeat_at),
                    "leaving": n.leaving,
                    "leases": n.leases,
                    "lease_expires_at": n.lease_expires_at.map(output::time),
                    "live": n.live,
                })
            })
            .collect();
        print_json(&json!({ "queues": queues, "nodes": nodes }));
        return Ok(());
    }
    let rows: Vec<Vec<String>> = counts
        .iter()
        .map(|(q, c)| {
            vec![
                q.clone(),
                c.scheduled.to_string(),
                c.running.to_string(),
                c.done.to_string(),
                c.dead.to_string(),
                c.cancelled.to_string(),
                late.get(q)
                    .map_or("-".into(), |t| output::span(output::ago(*t))),
            ]
        })
        .collect();
    if rows.is_empty() {
        println!("no tasks");
    } else {
        print!(
            "{}",
            table(
                &[
                    "QUEUE",
                    "SCHEDULED",
                    "RUNNING",
                    "DONE",
                    "DEAD",
                    "CANCELLED",
                    "OLDEST DUE, LATE BY"
                ],
                &rows
            )
        );
    }
    println!();
    if nodes.is_empty() {
        println!("no nodes");
        return Ok(());
    }
    let rows: Vec<Vec<String>> = nodes
        .iter()
        .map(|n| {
            vec![
                n.node_id.clone(),
                n.queues.join(","),
                format!("{} ago", output::span(output::ago(n.heartbeat_at))),
                n.leases.to_string(),
                match n.lease_expires_at {
                    None => "-".into(),
                    Some(t) if n.live => format!("in {}", output::span(output::until(t))),
                    Some(t) => format!("{} ago", output::span(output::ago(t))),
                },
                match (n.live, n.leaving) {
                    (false, _) => "expired",
                    (true, true) => "leaving",
                    (true, false) => "live",
                }
                .to_string(),
            ]
        })
        .collect();
    print!(
        "{}",
        table(
            &[
                "NODE",
                "QUEUES",
                "HEARTBEAT",
                "LEASES",
                "LEASES EXPIRE",
                "STATE"
            ],
            &rows
        )
    );
    Ok(())
}

pub(crate) async fn list(store: &Store, args: ListArgs, json: bool) -> Result<()> {
    let mut query = TaskQuery::new().limit(args.limit);
    if let Some(state) = args.state {
        query = query.state(state);
    }
    if let Some(queue) = args.queue {
        query = query.queue(queue);
    }
    if let Some(kind) = args.kind {
        query = query.kind(kind);
    }
    if let Some(from) = args.due_from {
        query = query.due_from(parse_time("--due-from", &from)?);
    }
    if let Some(before) = args.due_before {
        query = query.due_before(parse_time("--due-before", &before)?);
    }
    if let Some(after) = args.after {
        query = query.after(TaskId::new(after));
    }
    let tasks = store.list(&query).await?;
    // A full page may have a next one.
    let next = (tasks.len() == args.limit as usize)
        .then(|| tasks.last().map(|t| t.id.get()))
        .flatten();
    if json {
        let tasks: Vec<_> = tasks.iter().map(crate::server::wire::task_json).collect();
        print_json(&json!({ "tasks": tasks, "next_after": next }));
        return Ok(());
    }
    if tasks.is_empty() {
        println!("no tasks");
        return Ok(());
    }
    let rows: Vec<Vec<String>> = tasks
        .iter()
        .map(|t| {
            vec![
                t.id.to_string(),
                t.state.as_str().to_string(),
                t.queue.clone(),
                t.kind.clone().unwrap_or_default(),
                t.priority.to_string(),
                output::time(t.run_at),
                t.attempts.to_string(),
                t.idempotency_key.clone().unwrap_or_default(),
                output::payload_cell(&t.payload, 40),
            ]
        })
        .collect();
    print!(
        "{}",
        table(
            &["ID", "STATE", "QUEUE", "KIND", "PRIO", "DUE", "ATTEMPTS", "KEY", "PAYLOAD"],
            &rows
        )
    );
    if let Some(next) = next {
        println!("next page: --after {next}");
    }
    Ok(())
}

/// The task `target` names, or a failure saying there is none.
async fn find(store: &Store, target: &Target) -> Result<TaskInfo> {
    let found = match (&target.id, &target.key) {
        (_, Some(key)) => store.get_by_key(key).await?,
        (Some(id), None) => store.get(TaskId::new(*id)).await?,
        (None, None) => return fail("name a task: an id, or --key KEY"),
    };
    match found {
        Some(task) => Ok(task),
        None => fail(match (&target.id, &target.key) {
            (_, Some(key)) => format!("no task has the key {key:?}"),
            (id, None) => format!("no task {}", id.unwrap_or_default()),
        }),
    }
}

pub(crate) async fn show(store: &Store, target: Target, json: bool) -> Result<()> {
    let task = find(store, &target).await?;
    let attempts = store.attempts(task.id).await?;
    if json {
        let mut shown = crate::server::wire::task_json(&task);
        shown["attempt_history"] = attempts
            .iter()
            .map(crate::server::wire::attempt_json)
            .collect();
        print_json(&shown);
        return Ok(());
    }
    let rows = vec![
        vec!["id".into(), task.id.to_string()],
        vec!["state".into(), task.state.as_str().into()],
        vec!["queue".into(), task.queue.clone()],
        vec![
            "kind".into(),
            task.kind.clone().unwrap_or_else(|| "(untyped)".into()),
        ],
        vec!["priority".into(), task.priority.to_string()],
        vec!["due".into(), output::time(task.run_at)],
        vec![
            "attempts".into(),
            match task.max_attempts {
                Some(max) => format!("{} of {max}", task.attempts),
                None => format!("{} (the scheduler's limit)", task.attempts),
            },
        ],
        vec![
            "key".into(),
            task.idempotency_key.clone().unwrap_or_else(|| "-".into()),
        ],
        vec![
            "last error".into(),
            task.last_error.clone().unwrap_or_else(|| "-".into()),
        ],
        vec!["payload".into(), format!("{} bytes", task.payload.len())],
    ];
    let mut rows = rows;
    if let (Some(worker), Some(until)) = (&task.worker, task.lease_until) {
        rows.push(vec!["worker".into(), worker.clone()]);
        rows.push(vec!["lease until".into(), output::time(until)]);
    }
    print!("{}", table(&["FIELD", "VALUE"], &rows));
    println!("{}", output::payload_text(&task.payload));
    if !attempts.is_empty() {
        println!();
        print!("{}", output::attempts_table(&attempts));
    }
    Ok(())
}

/// The time `when` names, or `None` for now.
fn when(when: &When) -> Result<Option<SystemTime>> {
    match (&when.after, &when.at) {
        (Some(after), _) => {
            let d = parse_duration("--in", after)?;
            match SystemTime::now().checked_add(d) {
                Some(t) => Ok(Some(t)),
                None => fail(format!("--in: {after:?} is too far ahead")),
            }
        }
        (None, Some(at)) => Ok(Some(parse_time("--at", at)?)),
        (None, None) => Ok(None),
    }
}

pub(crate) async fn schedule(store: &Store, args: ScheduleArgs, json: bool) -> Result<()> {
    let payload: Vec<u8> = match (&args.payload, &args.file) {
        (_, Some(path)) if path.as_os_str() == "-" => {
            let mut buf = Vec::new();
            std::io::Read::read_to_end(&mut std::io::stdin(), &mut buf).map_err(|err| {
                crate::error::Failure(format!(
                    "cannot read the payload from standard input: {err}"
                ))
            })?;
            buf
        }
        (_, Some(path)) => std::fs::read(path).map_err(|err| {
            crate::error::Failure(format!(
                "cannot read the payload from {}: {err}",
                path.display()
            ))
        })?,
        (Some(text), None) => text.clone().into_bytes(),
        (None, None) => return fail("give a payload, or --file PATH"),
    };
    let mut schedule = store
        .schedule(payload)
        .queue(args.queue)
        .priority(args.priority);
    if let Some(at) = when(&args.when)? {
        schedule = schedule.at(at);
    }
    if let Some(key) = args.key {
        schedule = schedule.idempotency_key(key);
    }
    if let Some(n) = args.max_attempts {
        schedule = schedule.max_attempts(n);
    }
    let outcome: Scheduled = schedule.submit().await?;
    let (id, created) = (outcome.id(), outcome.is_created());
    if json {
        print_json(&json!({ "id": id.get(), "created": created }));
    } else if created {
        println!("scheduled task {id}");
    } else {
        println!("task {id} already has this key; nothing scheduled");
    }
    Ok(())
}

/// Why a task could not be changed: its state, or that it is gone.
async fn refused(store: &Store, target: &Target, only: &str, verb: &str) -> Result<()> {
    let task = find(store, target).await?;
    fail(format!(
        "task {} is {}; only a {only} task can be {verb}",
        task.id,
        task.state.as_str()
    ))
}

pub(crate) async fn cancel(store: &Store, target: Target, json: bool) -> Result<()> {
    let done = match (&target.id, &target.key) {
        (_, Some(key)) => store.cancel_by_key(key).await?,
        (Some(id), None) => store.cancel(TaskId::new(*id)).await?,
        (None, None) => return fail("name a task: an id, or --key KEY"),
    };
    if !done {
        return refused(store, &target, "scheduled", "cancelled").await;
    }
    let task = find(store, &target).await?;
    if json {
        print_json(&json!({ "id": task.id.get(), "cancelled": true }));
    } else {
        println!("cancelled task {}", task.id);
    }
    Ok(())
}

pub(crate) async fn reschedule(store: &Store, args: RescheduleArgs, json: bool) -> Result<()> {
    let Some(at) = when(&args.when)? else {
        return fail("say when: --in DURATION or --at TIME");
    };
    let target = args.target;
    let done = match (&target.id, &target.key) {
        (_, Some(key)) => store.reschedule_by_key(key, at).await?,
        (Some(id), None) => store.reschedule(TaskId::new(*id), at).await?,
        (None, None) => return fail("name a task: an id, or --key KEY"),
    };
    if !done {
        return refused(store, &target, "scheduled", "rescheduled").await;
    }
    let task = find(store, &target).await?;
    if json {
        print_json(&json!({ "id": task.id.get(), "run_at": output::time(task.run_at) }));
    } else {
        println!("task {} is due at {}", task.id, output::time(task.run_at));
    }
    Ok(())
}

pub(crate) async fn redrive(store: &Store, args: RedriveArgs, json: bool) -> Result<()> {
    if let Some(id) = args.id {
        let target = Target {
            id: Some(id),
            key: None,
        };
        if !store.redrive(TaskId::new(id)).await? {
            return refused(store, &target, "dead", "redriven").await;
        }
        if json {
            print_json(&json!({ "redriven": 1, "ids": [id] }));
        } else {
            println!("task {id} is scheduled again, due now");
        }
        return Ok(());
    }
    let spread = parse_duration("--spread", &args.spread)?;
    let mut redrive = Redrive::dead()
        .state(args.state)
        .limit(args.limit)
        .spread(spread);
    if let Some(queue) = &args.queue {
        redrive = redrive.queue(queue.clone());
    }
    let n = store.redrive_many(&redrive).await?;
    let state = args.state;
    if json {
        print_json(&json!({ "redriven": n, "spread_ms": spread.as_millis() as u64 }));
    } else {
        println!(
            "{n} {} task{} scheduled again, due over the next {}",
            state.as_str(),
            if n == 1 { "" } else { "s" },
            output::span(spread)
        );
    }
    Ok(())
}

pub(crate) async fn schedules(store: &Store, json: bool) -> Result<()> {
    let list = store.list_recurring().await?;
    let rule = |s: &ttw_durable::RecurringInfo| match (&s.cron, s.every) {
        (Some(cron), _) => format!("cron {cron} {}", s.time_zone.as_deref().unwrap_or("UTC")),
        (None, Some(every)) => format!("every {}", output::span(every)),
        (None, None) => "-".to_string(),
    };
    let catch_up = CatchUp::name;
    if json {
        let list: Vec<_> = list
            .iter()
            .map(|s| {
                json!({
                    "name": s.name,
                    "rule": rule(s),
                    "cron": s.cron,
                    "time_zone": s.time_zone,
                    "every_ms": s.every.map(|d| d.as_millis() as u64),
                    "queue": s.queue,
                    "priority": s.priority,
                    "paused": s.paused,
                    "catch_up": catch_up(s.catch_up),
                    "next_at": output::time(s.next_at),
                })
            })
            .collect();
        print_json(&json!({ "schedules": list }));
        return Ok(());
    }
    if list.is_empty() {
        println!("no recurring schedules");
        return Ok(());
    }
    let rows: Vec<Vec<String>> = list
        .iter()
        .map(|s| {
            vec![
                s.name.clone(),
                rule(s),
                s.queue.clone(),
                if s.paused {
                    "paused".into()
                } else {
                    output::time(s.next_at)
                },
                catch_up(s.catch_up).into(),
                output::payload_cell(&s.payload, 30),
            ]
        })
        .collect();
    print!(
        "{}",
        table(
            &["NAME", "RULE", "QUEUE", "NEXT", "CATCH-UP", "PAYLOAD"],
            &rows
        )
    );
    Ok(())
}
