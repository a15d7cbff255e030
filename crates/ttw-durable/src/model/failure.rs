//! A failed attempt as a handler or a [`Target`](crate::Target) reports it:
//! what went wrong, and what should happen next.

use std::fmt;
use std::time::Duration;

/// The longest wait a [`Failure::retry_after`] can ask for: a longer one
/// is cut to this (one day).
pub const MAX_RETRY_AFTER: Duration = Duration::from_secs(24 * 3600);

/// Why an attempt failed, and what should follow it.
///
/// By default a failure schedules a retry after the scheduler's
/// [`Backoff`](crate::Backoff), or marks the task dead when it is out of
/// attempts. A failure can instead name when the next attempt should run
/// ([`retry_after`](Self::retry_after), as an HTTP `Retry-After` does), or
/// say that no attempt will ever succeed ([`permanent`](Self::permanent)):
/// the task is dead at once, with this failure as its last error, and
/// [`Store::redrive`](crate::Store::redrive) runs it again.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use ttw_durable::Failure;
///
/// let busy = Failure::new("HTTP 429").retry_after(Duration::from_secs(30));
/// assert_eq!(busy.next_attempt_after(), Some(Duration::from_secs(30)));
/// assert!(!busy.is_permanent());
///
/// let gone = Failure::new("HTTP 410: the endpoint is gone").permanent();
/// assert!(gone.is_permanent());
/// assert_eq!(gone.to_string(), "HTTP 410: the endpoint is gone");
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    message: String,
    retry_after: Option<Duration>,
    permanent: bool,
    status: Option<u16>,
}

impl Failure {
    /// A failed attempt with this error (the task's last error): retried
    /// after the backoff.
    pub fn new(message: impl Into<String>) -> Failure {
        Failure {
            message: message.into(),
            retry_after: None,
            permanent: false,
            status: None,
        }
    }

    /// The status of the answer that made the attempt fail (an HTTP
    /// status), kept in the attempt's history.
    #[must_use]
    pub fn with_status(mut self, status: u16) -> Failure {
        self.status = Some(status);
        self
    }

    /// The status [`with_status`](Self::with_status) set.
    pub fn status(&self) -> Option<u16> {
        self.status
    }

    /// The next attempt runs `wait` from now instead of after the backoff
    /// (at most [`MAX_RETRY_AFTER`]). It is still an attempt: a task out of
    /// attempts is dead.
    #[must_use]
    pub fn retry_after(mut self, wait: Duration) -> Failure {
        self.retry_after = Some(wait.min(MAX_RETRY_AFTER));
        self
    }

    /// No later attempt can succeed: the task is dead at once.
    #[must_use]
    pub fn permanent(mut self) -> Failure {
        self.permanent = true;
        self
    }

    /// The error, as the task's last error records it.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// The wait [`retry_after`](Self::retry_after) set.
    pub fn next_attempt_after(&self) -> Option<Duration> {
        self.retry_after
    }

    /// Whether [`permanent`](Self::permanent) was set.
    pub fn is_permanent(&self) -> bool {
        self.permanent
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Failure {}

impl From<String> for Failure {
    fn from(message: String) -> Failure {
        Failure::new(message)
    }
}

impl From<&str> for Failure {
    fn from(message: &str) -> Failure {
        Failure::new(message)
    }
}
