//! The work behind the API, without HTTP: each function takes the shared
//! state, the caller's token and a request of [`wire`](super::wire), checks
//! everything before it writes anything, and answers a result or a
//! [`Refusal`]. The handlers (`handlers/`) only extract and answer.

use std::sync::Arc;

use ttw_durable::Store;

use super::cluster::Stats;
use super::config::{Scope, Settings, Token};
use super::refusal::{Answer, Code};

pub(crate) mod bulk;
pub(crate) mod counts;
pub(crate) mod envelope;
pub(crate) mod pull;
pub(crate) mod queues;
pub(crate) mod recurring;
pub(crate) mod tasks;

/// What the handlers share.
pub(crate) struct Api {
    pub(crate) store: Store,
    pub(crate) settings: Settings,
    /// Writes single schedules in groups.
    pub(crate) grouped: ttw_durable::Grouped,
    /// This node's counters, sampled for the console's charts.
    pub(crate) stats: Stats,
    /// The last full count of the tasks, for `GET /v1/counts`.
    pub(crate) counts: Arc<counts::CountCache>,
}

pub(crate) type Shared = Arc<Api>;

/// Whether `token` may touch tasks of `queue`: 403 `forbidden` otherwise.
pub(crate) fn allow_queue(token: &Token, queue: &str) -> Answer<()> {
    match &token.queues {
        Some(queues) if !token.scopes.contains(&Scope::Admin) && !queues.contains(queue) => {
            Err(Code::Forbidden.refuse(format!(
                "token {:?} may not use queue {queue:?}",
                token.name
            )))
        }
        _ => Ok(()),
    }
}

/// A queue named in a body: 400 `unknown_queue` unless the configuration
/// has it.
pub(crate) fn known_queue(api: &Api, queue: &str) -> Answer<()> {
    if api.settings.queues.iter().any(|q| q.name == queue) {
        Ok(())
    } else {
        Err(Code::UnknownQueue.refuse(format!("no queue {queue:?} in this server's configuration")))
    }
}

/// A duration as the API writes them (`"15m"`, `"1h 30m"`, `"250ms"`;
/// the one parser of [`crate::parse`]): refused with `code`, naming
/// `what`, when it does not parse.
pub(crate) fn duration(code: Code, what: &str, text: &str) -> Answer<std::time::Duration> {
    crate::parse::duration(text).map_err(|err| code.refuse(format!("{what}: {err}")))
}

/// The time `span` from now, if it is before the year 9999.
pub(crate) fn from_now(span: std::time::Duration) -> Option<std::time::SystemTime> {
    std::time::SystemTime::now()
        .checked_add(span)
        .filter(|&at| at <= std::time::SystemTime::UNIX_EPOCH + ttw_durable::MAX_RUN_AT)
}
