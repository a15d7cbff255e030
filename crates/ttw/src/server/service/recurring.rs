//! Recurring schedules: put one (created, updated or unchanged), list
//! them, pause, resume or delete one.

use ttw_durable::{CatchUp, Recurring, RecurringInfo, Registered};

use super::super::config::Token;
use super::super::refusal::{Answer, Code, Refusal};
use super::super::wire::{NewRecurring, RecurringOutcome, RecurringView};
use super::tasks::decode_payload;
use super::{allow_queue, duration, from_now, known_queue, Api};

/// The schedule `name` defines, checked: its queue known and allowed.
fn definition(api: &Api, token: &Token, name: &str, b: NewRecurring) -> Answer<Recurring> {
    let invalid = |message: String| Code::InvalidSchedule.refuse(message);
    let mut schedule = match (&b.cron, &b.every) {
        (Some(cron), None) => Recurring::cron(name.to_string(), cron.clone()),
        (None, Some(every)) => {
            let every = duration(Code::InvalidSchedule, "every", every)?;
            if from_now(every).is_none() {
                return Err(invalid(format!(
                    "every {every:?} reaches past the year 9999"
                )));
            }
            Recurring::every(name.to_string(), every)
        }
        _ => return Err(invalid("give cron or every, one of them".into())),
    };
    if let Some(zone) = b.time_zone {
        schedule = schedule.time_zone(zone);
    }
    let queue = b
        .queue
        .unwrap_or_else(|| ttw_durable::DEFAULT_QUEUE.to_string());
    known_queue(api, &queue)?;
    allow_queue(token, &queue)?;
    schedule = schedule
        .queue(queue)
        .payload(decode_payload(b.payload, b.payload_base64)?);
    if let Some(p) = b.priority {
        schedule = schedule.priority(p);
    }
    if let Some(kind) = b.kind {
        schedule = schedule.kind(kind);
    }
    match b.max_attempts {
        Some(0) => return Err(Code::InvalidRequest.refuse("max_attempts: at least 1")),
        Some(n) => schedule = schedule.max_attempts(n),
        None => {}
    }
    if let Some(c) = &b.catch_up {
        schedule = schedule.catch_up(match c.as_str() {
            "skip" => CatchUp::Skip,
            "last" => CatchUp::Last,
            "all" => CatchUp::All,
            _ => return Err(invalid(format!("catch_up {c:?}: skip, last or all"))),
        });
    }
    if let Some(m) = &b.missed_after {
        schedule = schedule.missed_after(duration(Code::InvalidSchedule, "missed_after", m)?);
    }
    Ok(schedule)
}

/// Creates the schedule `name`, or changes it to this definition.
///
/// Registering comes first: a new name is created, the same definition
/// changes nothing (its queue is the one checked). Registering refuses
/// another definition under the name, and a bad definition: then the
/// schedule is updated if it exists (in a queue the token may use;
/// otherwise it is not found), which says what is wrong with a bad one.
pub(crate) async fn put(
    api: &Api,
    token: &Token,
    name: &str,
    b: NewRecurring,
) -> Answer<RecurringOutcome> {
    let schedule = definition(api, token, name, b)?;
    match api.store.register_recurring(schedule.clone()).await {
        Ok(Registered::Created) => Ok(RecurringOutcome::Created),
        Ok(_) => Ok(RecurringOutcome::Unchanged),
        Err(err) if err.is_invalid_schedule() => {
            let existing = find_named(api, name).await?;
            match existing {
                None => Err(recurring_error(err)),
                Some(info) if allow_queue(token, &info.queue).is_err() => Err(not_found(name)),
                Some(_) => match api.store.update_recurring(schedule).await {
                    Ok(true) => Ok(RecurringOutcome::Updated),
                    Ok(false) => Err(not_found(name)),
                    Err(err) => Err(recurring_error(err)),
                },
            }
        }
        Err(err) => Err(recurring_error(err)),
    }
}

/// A store error of a recurring schedule: its definition is the caller's
/// fault (400), as the other store errors say.
fn recurring_error(err: ttw_durable::Error) -> Refusal {
    if err.is_invalid_schedule() {
        Code::InvalidSchedule.refuse(err.to_string())
    } else if err.is_config() {
        Code::InvalidRequest.refuse(err.to_string())
    } else {
        err.into()
    }
}

fn not_found(name: &str) -> Refusal {
    Code::NotFound.refuse(format!("no recurring schedule {name:?}"))
}

async fn find_named(api: &Api, name: &str) -> Answer<Option<RecurringInfo>> {
    Ok(api
        .store
        .list_recurring()
        .await?
        .into_iter()
        .find(|info| info.name == name))
}

/// Every schedule of the queues the token may use.
pub(crate) async fn list(api: &Api, token: &Token) -> Answer<Vec<RecurringView>> {
    Ok(api
        .store
        .list_recurring()
        .await?
        .iter()
        .filter(|info| allow_queue(token, &info.queue).is_ok())
        .map(RecurringView::from)
        .collect())
}

/// The schedule `name`, if the token may see it: 404 otherwise.
async fn found(api: &Api, token: &Token, name: &str) -> Answer<RecurringInfo> {
    match find_named(api, name).await? {
        Some(info) if allow_queue(token, &info.queue).is_ok() => Ok(info),
        _ => Err(not_found(name)),
    }
}

/// A change to the schedule `name`.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Change {
    Pause,
    Resume,
    Delete,
}

/// Pauses, resumes or deletes the schedule `name`: whether that changed
/// anything (false if it was so already).
pub(crate) async fn change(api: &Api, token: &Token, name: &str, change: Change) -> Answer<bool> {
    found(api, token, name).await?;
    Ok(match change {
        Change::Pause => api.store.pause_recurring(name).await?,
        Change::Resume => api.store.resume_recurring(name).await?,
        Change::Delete => api.store.delete_recurring(name).await?,
    })
}
