//! A pull queue's work: claims by long poll, and the settles of a claim,
//! each fenced on it. What the store does is [`ttw_durable::Pulls`]; here
//! are what is HTTP's: the queue served as a pull queue and allowed for
//! the token, the bounds of a request, and the answers.

use std::sync::Arc;
use std::time::Duration;

use ttw_durable::{Claim, NackOutcome, Pulls, MAX_CLAIM, MAX_WORKER_NAME};

use super::super::config::{TargetSettings, Token};
use super::super::refusal::{Answer, Code};
use super::super::wire::{
    rfc3339, AckRequest, ClaimRequest, ClaimedList, ClaimedTask, ExtendRequest, NackRequest,
    SettleOutcome, SettledView, WorkerList, WorkerView,
};
use super::tasks::parse_id;
use super::{allow_queue, duration, Api};

/// A claim's lease unless it names one.
const DEFAULT_LEASE: Duration = Duration::from_secs(30);

/// The store's pulls, settling only tasks of the queues `token` may use.
fn pulls(api: &Api, token: &Arc<Token>) -> Pulls {
    let token = token.clone();
    api.store
        .pulls()
        .only(move |queue| allow_queue(&token, queue).is_ok())
}

/// `queue` as a pull queue `token` may use: 404 `not_found` for a queue
/// not in the configuration, 400 `not_a_pull_queue` for one that is
/// pushed, 403 for one the token may not use.
fn pull_queue(api: &Api, token: &Token, queue: &str) -> Answer<()> {
    let Some(configured) = api.settings.queues.iter().find(|q| q.name == queue) else {
        return Err(
            Code::NotFound.refuse(format!("no queue {queue:?} in this server's configuration"))
        );
    };
    if !matches!(configured.target, Some(TargetSettings::Pull)) {
        return Err(Code::NotAPullQueue.refuse(format!(
            "queue {queue:?} is not a pull queue (its [[queues]] entry has no pull = true)"
        )));
    }
    allow_queue(token, queue)
}

/// The workers that claimed from pull queue `queue` in the last day.
pub(crate) async fn workers(api: &Api, token: &Arc<Token>, queue: &str) -> Answer<WorkerList> {
    pull_queue(api, token, queue)?;
    let workers = api.store.pulls().workers(Some(queue)).await?;
    Ok(WorkerList {
        workers: workers.iter().map(WorkerView::from).collect(),
    })
}

/// The claim of `request` on `queue` (see [`pull_queue`]), within the
/// request's bounds.
pub(crate) async fn claim(
    api: &Api,
    token: &Arc<Token>,
    queue: &str,
    request: ClaimRequest,
) -> Answer<ClaimedList> {
    pull_queue(api, token, queue)?;
    let max = request.max.unwrap_or(1);
    if max == 0 || max as usize > MAX_CLAIM {
        return Err(Code::InvalidRequest.refuse(format!("max: must be 1 to {MAX_CLAIM}")));
    }
    if request.worker.is_empty() || request.worker.len() > MAX_WORKER_NAME {
        return Err(
            Code::InvalidRequest.refuse(format!("worker: must be 1 to {MAX_WORKER_NAME} bytes"))
        );
    }
    let wait = match &request.wait {
        Some(text) => duration(Code::InvalidWait, "wait", text)?,
        None => Duration::ZERO,
    };
    let lease = match &request.lease {
        Some(text) => duration(Code::InvalidLease, "lease", text)?,
        None => DEFAULT_LEASE,
    };
    let mut claim = ttw_durable::ClaimRequest::new(request.worker)
        .max(max as usize)
        .wait(wait)
        .lease(lease);
    if let Some(kinds) = request.kinds {
        claim = claim.kinds(kinds);
    }
    let held = pulls(api, token).claim(queue, claim).await?;
    Ok(ClaimedList {
        tasks: held.iter().map(ClaimedTask::from).collect(),
    })
}

/// A claim's token as the request gives it: a text no claim has is stale.
fn parse_claim(text: &str) -> Answer<Claim> {
    text.parse::<Claim>().map_err(Into::into)
}

/// The ack of task `id`'s claim.
pub(crate) async fn ack(
    api: &Api,
    token: &Arc<Token>,
    id: &str,
    request: AckRequest,
) -> Answer<SettledView> {
    let id = parse_id(id)?;
    let claim = parse_claim(&request.claim)?;
    pulls(api, token)
        .ack(id, claim, request.answer.as_deref())
        .await?;
    Ok(SettledView {
        id: id.get(),
        outcome: SettleOutcome::Done,
        run_at: None,
        lease_until: None,
    })
}

/// The nack of task `id`'s claim.
pub(crate) async fn nack(
    api: &Api,
    token: &Arc<Token>,
    id: &str,
    request: NackRequest,
) -> Answer<SettledView> {
    let id = parse_id(id)?;
    let claim = parse_claim(&request.claim)?;
    let mut nack = ttw_durable::Nack::new(request.error);
    if let Some(text) = &request.retry_in {
        nack = nack.retry_in(duration(Code::InvalidDelay, "retry_in", text)?);
    }
    if request.dead == Some(true) {
        nack = nack.dead();
    }
    let outcome = pulls(api, token)
        .nack(id, claim, nack)
        .await
        .map_err(|err| {
            if err.is_out_of_range() {
                Code::InvalidDelay.refuse(format!("retry_in: {err}"))
            } else {
                err.into()
            }
        })?;
    Ok(match outcome {
        NackOutcome::Retry(at) => SettledView {
            id: id.get(),
            outcome: SettleOutcome::Retry,
            run_at: Some(rfc3339(at)),
            lease_until: None,
        },
        NackOutcome::Dead => SettledView {
            id: id.get(),
            outcome: SettleOutcome::Dead,
            run_at: None,
            lease_until: None,
        },
    })
}

/// The extend of task `id`'s claim.
pub(crate) async fn extend(
    api: &Api,
    token: &Arc<Token>,
    id: &str,
    request: ExtendRequest,
) -> Answer<SettledView> {
    let id = parse_id(id)?;
    let claim = parse_claim(&request.claim)?;
    let lease = duration(Code::InvalidLease, "lease", &request.lease)?;
    let until = pulls(api, token).extend(id, claim, lease).await?;
    Ok(SettledView {
        id: id.get(),
        outcome: SettleOutcome::Extended,
        run_at: None,
        lease_until: Some(rfc3339(until)),
    })
}
