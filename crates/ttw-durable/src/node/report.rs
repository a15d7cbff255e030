//! Warnings about failing database calls, at most one per kind of call per
//! interval: a full disk or a database outage fails every claim, outcome and
//! heartbeat, and a log line per task would bury the one line that matters.

use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

use crate::error::Error;

/// Until when locks may run out without an outcome in the shards held: a
/// failed claim or outcome may have left a task claimed (or committed with
/// its answer lost), and shards taken from a silent owner hold its locks.
/// The rescuer reclaims every period while this is watched (see
/// [`Rescuer`](crate::node::duties::rescuer::Rescuer)).
#[derive(Debug)]
pub(crate) struct LockWatch {
    /// How long from now every such lock has surely run out and a reclaim
    /// come after.
    span: Duration,
    until: Mutex<Option<Instant>>,
}

impl LockWatch {
    pub(crate) fn new(span: Duration) -> LockWatch {
        LockWatch {
            span,
            until: Mutex::new(None),
        }
    }

    /// Locks may run out unseen from now on, for a span.
    pub(crate) fn watch(&self) {
        let until = Instant::now() + self.span;
        let mut watched = self.until.lock().unwrap_or_else(|e| e.into_inner());
        *watched = Some(watched.map_or(until, |t| t.max(until)));
    }

    /// Whether locks may still run out unseen.
    pub(crate) fn watching(&self) -> bool {
        self.until
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .is_some_and(|t| Instant::now() < t)
    }
}

/// The shortest time between two warnings of one kind.
pub(crate) const REPORT_INTERVAL: Duration = Duration::from_secs(10);

/// What failed: each kind is reported on its own schedule.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Failing {
    /// A heartbeat (membership, lease renewal, reclaims).
    Heartbeat,
    /// A window load, catch-up poll or retention sweep.
    Control,
    /// A claim of fired tasks, or the lookup of why some were not claimed.
    Claim,
    /// Recording an outcome (done, retry, dead).
    Outcome,
}

const KINDS: usize = 4;

impl Failing {
    fn index(self) -> usize {
        self as usize
    }

    /// The kind as the `kind` label of `ttw_database_errors_total`.
    pub(crate) fn label(self) -> &'static str {
        match self {
            Failing::Heartbeat => "heartbeat",
            Failing::Control => "control",
            Failing::Claim => "claim",
            Failing::Outcome => "outcome",
        }
    }

    fn what(self) -> &'static str {
        match self {
            Failing::Heartbeat => "heartbeat failed; retrying at the next one",
            Failing::Control => "window load or catch-up poll failed; retrying",
            Failing::Claim => "claim failed; the tasks stay scheduled and are tried again",
            Failing::Outcome => {
                "could not record an outcome; the task stays claimed and is delivered again once its lock runs out"
            }
        }
    }
}

/// When each kind was last reported, and how many failures were not.
#[derive(Debug, Default)]
pub(crate) struct Reports {
    kinds: Mutex<[Kind; KINDS]>,
}

#[derive(Debug, Default, Clone, Copy)]
struct Kind {
    last: Option<Instant>,
    suppressed: u64,
}

impl Reports {
    /// Logs `err` as a warning unless this kind was reported within
    /// [`REPORT_INTERVAL`]; then it is only counted, and the count goes out
    /// with the next warning of the kind.
    pub(crate) fn failed(&self, node: &str, kind: Failing, err: &Error) {
        let now = Instant::now();
        let suppressed = {
            let mut kinds = self.kinds.lock().unwrap_or_else(|e| e.into_inner());
            let k = &mut kinds[kind.index()];
            if k.last
                .is_some_and(|t| now.duration_since(t) < REPORT_INTERVAL)
            {
                k.suppressed += 1;
                return;
            }
            k.last = Some(now);
            std::mem::take(&mut k.suppressed)
        };
        let disk_full = err.is_disk_full();
        tracing::warn!(
            node,
            %err,
            disk_full,
            suppressed,
            "durable scheduler: {}",
            kind.what()
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn locks_are_watched_for_a_span_from_the_last_failure() {
        let locks = LockWatch::new(Duration::from_secs(10));
        assert!(!locks.watching());
        locks.watch();
        tokio::time::advance(Duration::from_secs(6)).await;
        locks.watch();
        tokio::time::advance(Duration::from_secs(9)).await;
        assert!(locks.watching(), "10 s from the second failure");
        tokio::time::advance(Duration::from_secs(2)).await;
        assert!(!locks.watching());
    }

    #[test]
    fn a_second_failure_within_the_interval_is_counted_not_logged() {
        let reports = Reports::default();
        let err = Error::config("x");
        reports.failed("n", Failing::Claim, &err);
        reports.failed("n", Failing::Claim, &err);
        reports.failed("n", Failing::Outcome, &err);
        let kinds = reports.kinds.lock().unwrap();
        assert_eq!(kinds[Failing::Claim.index()].suppressed, 1);
        assert!(kinds[Failing::Outcome.index()].last.is_some());
        assert_eq!(kinds[Failing::Outcome.index()].suppressed, 0);
        assert!(kinds[Failing::Heartbeat.index()].last.is_none());
    }
}
