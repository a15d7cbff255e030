//! Which tasks a request means: the filters of `GET /v1/tasks` (in its
//! query) and of the bulk actions `POST /v1/tasks/cancel` and `POST
//! /v1/tasks/redrive` (in their bodies), the same names with the same
//! meaning, so that the console's confirmation counts what its action then
//! does. Each struct names its fields itself (a body refuses unknown
//! fields, which `serde`'s `flatten` cannot); [`Selection`] is what they
//! share.

use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use super::wire::StateName;

/// The filters a request names, borrowed from it.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Selection<'a> {
    pub(crate) state: Option<&'a str>,
    pub(crate) queue: Option<&'a str>,
    pub(crate) partition_key: Option<&'a str>,
    pub(crate) kind: Option<&'a str>,
    pub(crate) idempotency_key: Option<&'a str>,
    pub(crate) due_from: Option<&'a str>,
    pub(crate) due_before: Option<&'a str>,
    pub(crate) created_from: Option<&'a str>,
    pub(crate) created_before: Option<&'a str>,
}

/// The filters of a struct with the nine fields of a [`Selection`].
macro_rules! selection {
    ($s:expr) => {
        Selection {
            state: $s.state.as_deref(),
            queue: $s.queue.as_deref(),
            partition_key: $s.partition_key.as_deref(),
            kind: $s.kind.as_deref(),
            idempotency_key: $s.idempotency_key.as_deref(),
            due_from: $s.due_from.as_deref(),
            due_before: $s.due_before.as_deref(),
            created_from: $s.created_from.as_deref(),
            created_before: $s.created_before.as_deref(),
        }
    };
}

/// The filters and the page of `GET /v1/tasks`.
#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub(crate) struct ListQuery {
    /// Only tasks in this state: scheduled, running, done, dead,
    /// cancelled.
    #[param(value_type = Option<StateName>)]
    pub(crate) state: Option<String>,
    /// Only tasks of this queue (required of a token limited to some
    /// queues).
    pub(crate) queue: Option<String>,
    /// Only tasks of this partition key.
    pub(crate) partition_key: Option<String>,
    /// Only typed jobs of this kind.
    pub(crate) kind: Option<String>,
    /// Only tasks of this idempotency key.
    pub(crate) idempotency_key: Option<String>,
    /// Due at or after (RFC 3339).
    #[param(format = DateTime)]
    pub(crate) due_from: Option<String>,
    /// Due before (RFC 3339).
    #[param(format = DateTime)]
    pub(crate) due_before: Option<String>,
    /// Scheduled (created) at or after (RFC 3339).
    #[param(format = DateTime)]
    pub(crate) created_from: Option<String>,
    /// Scheduled (created) before (RFC 3339).
    #[param(format = DateTime)]
    pub(crate) created_before: Option<String>,
    /// `asc` (the default: the oldest id first), `desc` (the newest
    /// first), `due` (the soonest due first) or `due_desc` (the latest due
    /// first).
    pub(crate) order: Option<Order>,
    /// The `next_cursor` of the page before.
    pub(crate) cursor: Option<String>,
    /// At most this many (default 100).
    #[param(minimum = 1, maximum = 1000)]
    pub(crate) limit: Option<u32>,
}

impl ListQuery {
    pub(crate) fn selection(&self) -> Selection<'_> {
        selection!(self)
    }
}

/// The order of a page: by id (`asc`, `desc`), or by due time, ties by id
/// (`due`: the soonest first; `due_desc`: the latest first). With the state
/// scheduled, running or dead, a page in due order is a keyset read of the
/// due index however many tasks the filter selects.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Order {
    Asc,
    Desc,
    Due,
    DueDesc,
}

/// Scheduled tasks to cancel, chosen by the filters of `GET /v1/tasks`
/// (whose state, if named, must be scheduled).
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct CancelRequest {
    /// scheduled, or absent.
    #[schema(value_type = Option<StateName>)]
    pub(crate) state: Option<String>,
    pub(crate) queue: Option<String>,
    pub(crate) partition_key: Option<String>,
    /// Only typed jobs of this kind.
    pub(crate) kind: Option<String>,
    pub(crate) idempotency_key: Option<String>,
    #[schema(format = DateTime)]
    pub(crate) due_from: Option<String>,
    #[schema(format = DateTime)]
    pub(crate) due_before: Option<String>,
    #[schema(format = DateTime)]
    pub(crate) created_from: Option<String>,
    #[schema(format = DateTime)]
    pub(crate) created_before: Option<String>,
    /// At most this many (default 1,000; at most 1,000,000), the oldest
    /// ids first.
    #[schema(minimum = 1, maximum = 1000000)]
    pub(crate) limit: Option<u64>,
    /// Only count what would be cancelled (at most `limit`); change
    /// nothing.
    #[serde(default)]
    pub(crate) dry_run: bool,
}

impl CancelRequest {
    pub(crate) fn selection(&self) -> Selection<'_> {
        selection!(self)
    }
}

/// How many tasks were cancelled (or, in a dry run, would be).
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct CancelledManyView {
    pub(crate) cancelled: u64,
    pub(crate) dry_run: bool,
}

/// Finished tasks to run again, their attempts reset, chosen by the
/// filters of `GET /v1/tasks`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct RedriveRequest {
    /// dead (default), done or cancelled.
    #[schema(value_type = Option<StateName>)]
    pub(crate) state: Option<String>,
    /// Only tasks of this queue.
    pub(crate) queue: Option<String>,
    pub(crate) partition_key: Option<String>,
    /// Only typed jobs of this kind.
    pub(crate) kind: Option<String>,
    pub(crate) idempotency_key: Option<String>,
    #[schema(format = DateTime)]
    pub(crate) due_from: Option<String>,
    #[schema(format = DateTime)]
    pub(crate) due_before: Option<String>,
    #[schema(format = DateTime)]
    pub(crate) created_from: Option<String>,
    #[schema(format = DateTime)]
    pub(crate) created_before: Option<String>,
    /// At most this many (default 1,000; at most 1,000,000).
    #[schema(minimum = 1, maximum = 1000000)]
    pub(crate) limit: Option<u64>,
    /// Their due times spread from now over this (`"10m"`; default: all
    /// at once).
    pub(crate) spread: Option<String>,
    /// Only count what would be redriven (at most `limit`); change
    /// nothing.
    #[serde(default)]
    pub(crate) dry_run: bool,
}

impl RedriveRequest {
    pub(crate) fn selection(&self) -> Selection<'_> {
        selection!(self)
    }
}

/// How many tasks were redriven (or, in a dry run, would be).
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct RedrivenView {
    pub(crate) redriven: u64,
    pub(crate) dry_run: bool,
}

/// One task redriven.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct RedrivenOneView {
    pub(crate) id: i64,
    pub(crate) redriven: bool,
}
