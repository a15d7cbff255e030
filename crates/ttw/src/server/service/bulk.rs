//! Tasks chosen by filters ([`Selection`]): a page of them, and the bulk
//! actions (cancel, redrive) with their dry runs, which count what the
//! action would change with the same filters.

use std::time::{Duration, UNIX_EPOCH};

use ttw_durable::{Redrive, TaskId, TaskQuery, TaskState};

use super::super::config::{Scope, Token};
use super::super::refusal::{Answer, Code};
use super::super::selection::{CancelRequest, ListQuery, Order, RedriveRequest, Selection};
use super::super::wire::{PageView, TaskView};
use super::tasks::{state, time};
use super::{allow_queue, duration, Api};

/// The most tasks one bulk action changes.
pub(crate) const MAX_BULK: u64 = 1_000_000;

/// The query `s` means, checked: a token limited to some queues must name
/// one of them.
fn query(token: &Token, s: Selection<'_>) -> Answer<TaskQuery> {
    let mut query = TaskQuery::new();
    match s.queue {
        Some(queue) => {
            allow_queue(token, queue)?;
            query = query.queue(queue);
        }
        None if token.queues.is_some() && !token.scopes.contains(&Scope::Admin) => {
            return Err(Code::Forbidden.refuse(format!(
                "token {:?} may reach only its queues: name one",
                token.name
            )))
        }
        None => {}
    }
    if let Some(s) = s.state {
        query = query.state(state(s)?);
    }
    if let Some(key) = s.partition_key {
        query = query.partition_key(key);
    }
    if let Some(kind) = s.kind {
        query = query.kind(kind);
    }
    if let Some(key) = s.idempotency_key {
        query = query.idempotency_key(key);
    }
    for (field, text, set) in [
        ("due_from", s.due_from, TaskQuery::due_from as fn(_, _) -> _),
        ("due_before", s.due_before, TaskQuery::due_before),
        ("created_from", s.created_from, TaskQuery::created_from),
        (
            "created_before",
            s.created_before,
            TaskQuery::created_before,
        ),
    ] {
        if let Some(text) = text {
            query = set(query, time(field, text)?);
        }
    }
    Ok(query)
}

/// A bulk action's limit: 1 to [`MAX_BULK`], 1,000 by default.
fn bulk_limit(limit: Option<u64>) -> Answer<u64> {
    match limit.unwrap_or(1000) {
        n @ 1..=MAX_BULK => Ok(n),
        n => Err(Code::InvalidLimit.refuse(format!("limit is 1 to {MAX_BULK}, not {n}"))),
    }
}

/// A page of tasks in id order (or newest first), filtered; `next_cursor`
/// names the page after (absent on the last page).
pub(crate) async fn list(api: &Api, token: &Token, q: ListQuery) -> Answer<PageView> {
    let limit = q.limit.unwrap_or(100);
    if limit == 0 || limit > ttw_durable::MAX_PAGE {
        return Err(Code::InvalidLimit.refuse(format!(
            "limit is 1 to {}, not {limit}",
            ttw_durable::MAX_PAGE
        )));
    }
    let mut query = query(token, q.selection())?.limit(limit);
    let order = q.order.unwrap_or(Order::Asc);
    if matches!(order, Order::Desc | Order::DueDesc) {
        query = query.newest_first();
    }
    let by_due = matches!(order, Order::Due | Order::DueDesc);
    if by_due {
        query = query.by_due();
    }
    if let Some(cursor) = &q.cursor {
        let bad =
            || Code::InvalidCursor.refuse(format!("{cursor:?} is not a cursor of this order"));
        query = if by_due {
            let (at, id) = cursor.split_once('_').ok_or_else(bad)?;
            let at = at.parse::<u64>().map_err(|_| bad())?;
            let id = id
                .parse::<i64>()
                .ok()
                .filter(|&id| id > 0)
                .ok_or_else(bad)?;
            query.after_due(UNIX_EPOCH + Duration::from_millis(at), TaskId::new(id))
        } else {
            let id = cursor
                .parse::<i64>()
                .ok()
                .filter(|&id| id > 0)
                .ok_or_else(bad)?;
            query.after(TaskId::new(id))
        };
    }
    let tasks = api.store.list(&query).await?;
    // A page in due order goes on after (due time, id): `<ms>_<id>`.
    let next_cursor = (tasks.len() == limit as usize)
        .then(|| tasks.last())
        .flatten()
        .map(|t| match by_due {
            true => format!("{}_{}", crate::output::epoch_ms(t.run_at), t.id.get()),
            false => t.id.get().to_string(),
        });
    Ok(PageView {
        tasks: tasks.iter().map(TaskView::from).collect(),
        next_cursor,
    })
}

/// Cancels the scheduled tasks the request selects (or counts them, in a
/// dry run): how many.
pub(crate) async fn cancel(api: &Api, token: &Token, b: CancelRequest) -> Answer<u64> {
    let limit = bulk_limit(b.limit)?;
    let query = query(token, b.selection())?;
    if b.state.is_some() && query_state(&b.state)? != TaskState::Scheduled {
        return Err(Code::InvalidState.refuse("only scheduled tasks are cancelled"));
    }
    let query = query.state(TaskState::Scheduled);
    if b.dry_run {
        return Ok(api.store.count(&query).await?.min(limit));
    }
    Ok(api.store.cancel_many(&query, limit).await?)
}

fn query_state(text: &Option<String>) -> Answer<TaskState> {
    state(text.as_deref().unwrap_or("dead"))
}

/// Runs the finished tasks the request selects again, their attempts reset
/// (or counts them, in a dry run): how many.
pub(crate) async fn redrive(api: &Api, token: &Token, b: RedriveRequest) -> Answer<u64> {
    let limit = bulk_limit(b.limit)?;
    let s = query_state(&b.state)?;
    if !matches!(s, TaskState::Dead | TaskState::Done | TaskState::Cancelled) {
        return Err(
            Code::InvalidState.refuse("only finished tasks (dead, done, cancelled) are redriven")
        );
    }
    let query = query(token, b.selection())?;
    if b.dry_run {
        return Ok(api.store.count(&query.state(s)).await?.min(limit));
    }
    let mut redrive = Redrive::dead().state(s).limit(limit).matching(query);
    if let Some(spread) = &b.spread {
        let spread = duration(Code::InvalidDelay, "spread", spread)?;
        if super::from_now(spread).is_none() {
            return Err(Code::InvalidDelay.refuse("spread reaches past the year 9999"));
        }
        redrive = redrive.spread(spread);
    }
    Ok(api.store.redrive_many(&redrive).await?)
}
