//! `ttw export` and `ttw import`: a store's scheduled tasks and recurring
//! schedules written as JSON lines, and scheduled again in another store
//! (a SQLite store moved to PostgreSQL), keys kept, none twice.
//!
//! A line is `{"task": {...}}` or `{"recurring": {...}}`. A task's
//! `idempotency_key` is its own, or `ttw-import:<its id>` for one without,
//! so importing the same file twice stores each task once. Occurrences of
//! a recurring schedule are not written: the schedule makes them again.

use std::io::{BufRead, Write};
use std::path::Path;
use std::time::Duration;

use base64::Engine as _;
use serde::{Deserialize, Serialize};
use ttw_durable::{CatchUp, Envelope, NewTask, PendingTask, Recurring, Store, TaskId, MAX_PAGE};

use crate::error::{fail, Failure, Result};

/// Tasks scheduled in one batch on import.
const BATCH: usize = 1_000;

#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
enum Line {
    #[serde(rename = "task")]
    Task(TaskLine),
    #[serde(rename = "recurring")]
    Recurring(RecurringLine),
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct TaskLine {
    /// Its id in the store it came from.
    id: i64,
    run_at_ms: i64,
    queue: String,
    priority: i16,
    max_attempts: Option<u32>,
    idempotency_key: String,
    partition_key: Option<String>,
    payload_base64: String,
    /// A typed job's kind (absent from exports written before kinds).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    kind: Option<String>,
    /// Its own destination, trace context and callbacks (absent from
    /// exports written before they were kept).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    envelope: Option<Envelope>,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct RecurringLine {
    name: String,
    cron: Option<String>,
    time_zone: Option<String>,
    every_ms: Option<u64>,
    catch_up: String,
    missed_after_ms: u64,
    paused: bool,
    queue: String,
    priority: i16,
    max_attempts: Option<u32>,
    payload_base64: String,
    /// Its occurrences' kind (absent from exports written before kinds).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    kind: Option<String>,
}

fn b64() -> base64::engine::GeneralPurpose {
    base64::engine::general_purpose::STANDARD
}

fn written(err: std::io::Error) -> Failure {
    Failure(format!("cannot write the export: {err}"))
}

/// Writes every scheduled task (not an occurrence of a recurring schedule)
/// and every recurring schedule to `out`, a line each.
pub(crate) async fn export(store: &Store, out: &mut dyn Write) -> Result<()> {
    let (mut tasks, mut after) = (0u64, None::<TaskId>);
    loop {
        let page = store.pending_page(after, MAX_PAGE).await?;
        let Some(last) = page.last() else { break };
        after = Some(last.id);
        for task in page.iter().filter(|t| t.recurring.is_none()) {
            write_line(out, &Line::Task(task_line(task)))?;
            tasks += 1;
        }
    }
    let schedules = store.list_recurring().await?;
    for s in &schedules {
        let line = RecurringLine {
            name: s.name.clone(),
            cron: s.cron.clone(),
            time_zone: s.time_zone.clone(),
            every_ms: s.every.map(|d| d.as_millis() as u64),
            catch_up: s.catch_up.name().to_owned(),
            missed_after_ms: s.missed_after.as_millis() as u64,
            paused: s.paused,
            queue: s.queue.clone(),
            priority: s.priority,
            max_attempts: s.max_attempts,
            payload_base64: b64().encode(&s.payload),
            kind: s.kind.clone(),
        };
        write_line(out, &Line::Recurring(line))?;
    }
    out.flush().map_err(written)?;
    eprintln!(
        "exported {tasks} scheduled tasks and {} recurring schedules",
        schedules.len()
    );
    Ok(())
}

fn task_line(task: &PendingTask) -> TaskLine {
    TaskLine {
        id: task.id.get(),
        run_at_ms: millis(task.run_at),
        queue: task.queue.clone(),
        priority: task.priority,
        max_attempts: task.max_attempts,
        idempotency_key: task.import_key(),
        partition_key: task.partition_key.clone(),
        payload_base64: b64().encode(&task.payload),
        kind: task.kind.clone(),
        envelope: task.envelope.clone(),
    }
}

fn millis(at: std::time::SystemTime) -> i64 {
    match at.duration_since(std::time::UNIX_EPOCH) {
        Ok(d) => d.as_millis() as i64,
        Err(e) => -(e.duration().as_millis() as i64),
    }
}

fn write_line(out: &mut dyn Write, line: &Line) -> Result<()> {
    serde_json::to_writer(&mut *out, line)
        .map_err(|err| Failure(format!("cannot write the export: {err}")))?;
    out.write_all(b"\n").map_err(written)
}

/// Schedules every line of `file` (`-` for standard input) in `store`: the
/// tasks in batches, by their keys (one already there is left as it is),
/// and the recurring schedules by name.
pub(crate) async fn import(store: &Store, file: &Path) -> Result<()> {
    let reader: Box<dyn BufRead> = if file == Path::new("-") {
        Box::new(std::io::stdin().lock())
    } else {
        let f = std::fs::File::open(file)
            .map_err(|err| Failure(format!("cannot read {}: {err}", file.display())))?;
        Box::new(std::io::BufReader::new(f))
    };
    // Every line is read and checked before anything is written.
    let mut tasks = Vec::new();
    let mut schedules = Vec::new();
    for (n, line) in reader.lines().enumerate() {
        let at = |what: String| Failure(format!("line {}: {what}", n + 1));
        let line = line.map_err(|err| at(err.to_string()))?;
        if line.trim().is_empty() {
            continue;
        }
        match serde_json::from_str::<Line>(&line).map_err(|err| at(err.to_string()))? {
            Line::Task(t) => tasks.push(new_task(t).map_err(at)?),
            Line::Recurring(r) => schedules.push(recurring(r).map_err(at)?),
        }
    }
    let (mut created, total) = (0usize, tasks.len());
    let mut tasks = tasks.into_iter().peekable();
    while tasks.peek().is_some() {
        let batch: Vec<NewTask> = tasks.by_ref().take(BATCH).collect();
        created += store
            .schedule_batch(batch)
            .await?
            .iter()
            .filter(|s| s.is_created())
            .count();
    }
    let mut registered = 0;
    for (schedule, name, paused) in schedules.iter().cloned() {
        if store.register_recurring(schedule).await? == ttw_durable::Registered::Created {
            registered += 1;
        }
        if paused {
            store.pause_recurring(&name).await?;
        }
    }
    println!(
        "imported {created} tasks ({} already there) and {registered} recurring schedules ({} already there)",
        total - created,
        schedules.len() - registered
    );
    Ok(())
}

fn payload(text: &str) -> std::result::Result<Vec<u8>, String> {
    b64()
        .decode(text)
        .map_err(|err| format!("payload_base64: {err}"))
}

fn new_task(t: TaskLine) -> std::result::Result<NewTask, String> {
    let at = if t.run_at_ms >= 0 {
        std::time::UNIX_EPOCH + Duration::from_millis(t.run_at_ms as u64)
    } else {
        return Err(format!("run_at_ms {} is before 1970", t.run_at_ms));
    };
    let mut task = NewTask::new(payload(&t.payload_base64)?)
        .at(at)
        .queue(t.queue)
        .priority(t.priority)
        .idempotency_key(t.idempotency_key);
    if let Some(n) = t.max_attempts {
        task = task.max_attempts(n);
    }
    if let Some(key) = t.partition_key {
        task = task.partition_key(key);
    }
    if let Some(kind) = t.kind {
        task = task.kind(kind);
    }
    if let Some(envelope) = t.envelope {
        task = task.envelope(envelope);
    }
    Ok(task)
}

/// A schedule, its name, and whether it is paused.
type Schedule = (Recurring, String, bool);

fn recurring(r: RecurringLine) -> std::result::Result<Schedule, String> {
    let catch_up = CatchUp::from_name(&r.catch_up)
        .ok_or_else(|| format!("catch_up `{}` is none of skip, last, all", r.catch_up))?;
    let name = r.name.clone();
    let mut schedule = match (r.cron, r.every_ms) {
        (Some(cron), None) => Recurring::cron(r.name, cron),
        (None, Some(ms)) => Recurring::every(r.name, Duration::from_millis(ms)),
        _ => return Err("a recurring schedule has either `cron` or `every_ms`".into()),
    };
    if let Some(zone) = r.time_zone {
        schedule = schedule.time_zone(zone);
    }
    schedule = schedule
        .payload(payload(&r.payload_base64)?)
        .queue(r.queue)
        .priority(r.priority)
        .catch_up(catch_up)
        .missed_after(Duration::from_millis(r.missed_after_ms));
    if let Some(n) = r.max_attempts {
        schedule = schedule.max_attempts(n);
    }
    if let Some(kind) = r.kind {
        schedule = schedule.kind(kind);
    }
    Ok((schedule, name, r.paused))
}

/// Opens `path` for `ttw export --output`, or standard output.
pub(crate) fn output(path: Option<&Path>) -> Result<Box<dyn Write>> {
    match path {
        None => Ok(Box::new(std::io::BufWriter::new(std::io::stdout().lock()))),
        Some(p) => match std::fs::File::create(p) {
            Ok(f) => Ok(Box::new(std::io::BufWriter::new(f))),
            Err(err) => fail(format!("cannot create {}: {err}", p.display())),
        },
    }
}
