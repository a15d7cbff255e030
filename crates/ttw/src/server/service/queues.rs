//! Queues' settings that every node obeys (pause, global concurrency,
//! rate, retry), for the queues of this server's configuration.

use ttw_durable::{Backoff, QueueLimits, Rate, RetryPolicy};

use super::super::config::Token;
use super::super::refusal::{Answer, Code, Refusal};
use super::super::wire::{NewLimits, NewRetry, QueueView};
use super::{allow_queue, duration, Api};

/// A queue named in a path: 404 `not_found` unless the configuration has
/// it.
fn configured(api: &Api, name: &str) -> Answer<()> {
    if api.settings.queues.iter().any(|q| q.name == name) {
        Ok(())
    } else {
        Err(Code::NotFound.refuse(format!("no queue {name:?} in this server's configuration")))
    }
}

/// The queue's settings now.
async fn view(api: &Api, name: &str) -> Answer<QueueView> {
    let mut view = QueueView::from(&api.store.queue_settings(name).await?);
    view.pull = api.settings.queues.iter().any(|q| {
        q.name == name && matches!(q.target, Some(super::super::config::TargetSettings::Pull))
    });
    Ok(view)
}

/// Every configured queue the token may see, with its settings.
pub(crate) async fn list(api: &Api, token: &Token) -> Answer<Vec<QueueView>> {
    let mut shown = Vec::new();
    for queue in &api.settings.queues {
        if allow_queue(token, &queue.name).is_ok() {
            shown.push(view(api, &queue.name).await?);
        }
    }
    Ok(shown)
}

/// One queue's settings.
pub(crate) async fn get(api: &Api, token: &Token, name: &str) -> Answer<QueueView> {
    configured(api, name)?;
    allow_queue(token, name)?;
    view(api, name).await
}

/// Pauses or resumes the queue on every node; answers its settings.
pub(crate) async fn set_paused(api: &Api, name: &str, paused: bool) -> Answer<QueueView> {
    configured(api, name)?;
    if paused {
        api.store.pause_queue(name).await?;
    } else {
        api.store.resume_queue(name).await?;
    }
    view(api, name).await
}

/// A setting the store refused: 400 `invalid_limit` when it is out of
/// range, as any other store error otherwise.
fn refused_setting(err: ttw_durable::Error) -> Refusal {
    if err.is_config() {
        Code::InvalidLimit.refuse(err.to_string())
    } else {
        err.into()
    }
}

/// A count of a setting: 400 `invalid_limit` when it is out of range.
fn count(what: &str, n: i64) -> Answer<u32> {
    u32::try_from(n)
        .ok()
        .filter(|n| (1..=ttw_durable::MAX_LIMIT).contains(n))
        .ok_or_else(|| {
            Code::InvalidLimit.refuse(format!(
                "{what} must be from 1 to {}, not {n}",
                ttw_durable::MAX_LIMIT
            ))
        })
}

/// Sets the queue's limits across every node (an absent one is
/// cleared); answers its settings.
pub(crate) async fn put_limits(api: &Api, name: &str, b: NewLimits) -> Answer<QueueView> {
    configured(api, name)?;
    let mut limits = QueueLimits::new();
    if let Some(n) = b.concurrency {
        limits = limits.concurrency(count("concurrency", n)?);
    }
    if let Some(n) = b.per_key_concurrency {
        limits = limits.per_key_concurrency(count("per_key_concurrency", n)?);
    }
    if let Some(r) = b.rate {
        let per = duration(Code::InvalidLimit, "rate.per", &r.per)?;
        let mut rate = Rate::new(count("rate.count", r.count)?, per);
        if let Some(burst) = r.burst {
            rate = rate.burst(count("rate.burst", burst)?);
        }
        limits = limits.rate(rate);
    }
    api.store
        .set_queue_limits(name, limits)
        .await
        .map_err(refused_setting)?;
    view(api, name).await
}

/// Sets the queue's retry policy over each node's own (an absent part is
/// cleared); answers its settings.
pub(crate) async fn put_retry(api: &Api, name: &str, b: NewRetry) -> Answer<QueueView> {
    configured(api, name)?;
    let mut retry = RetryPolicy::new();
    if let Some(n) = b.max_attempts {
        retry = retry.max_attempts(count("max_attempts", n)?);
    }
    if let Some(backoff) = b.backoff {
        retry = retry.backoff(Backoff::exponential(
            duration(Code::InvalidLimit, "backoff.base", &backoff.base)?,
            duration(Code::InvalidLimit, "backoff.max", &backoff.max)?,
        ));
    }
    api.store
        .set_queue_retry(name, retry)
        .await
        .map_err(refused_setting)?;
    view(api, name).await
}
