//! A task to schedule: [`NewTask`] as the caller gives it (alone, in a
//! [`Schedule`](crate::Schedule), or in a batch), and [`NewRow`], the same
//! checked and ready to bind.

use std::time::{Duration, SystemTime};

use crate::error::Error;
use crate::model::clock::Clock;
use crate::model::envelope::Envelope;
use crate::model::limits::{MAX_IDEMPOTENCY_KEY, MAX_PARTITION_KEY, MAX_PAYLOAD};
use crate::model::queue::{check_queue, DEFAULT_QUEUE};
use crate::model::time::to_ms;

/// One task of a batch for [`Store::schedule_batch`](crate::Store::schedule_batch), with the options a
/// single [`Schedule`](crate::Schedule) takes: due at once unless told
/// otherwise.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use ttw_durable::NewTask;
///
/// let task = NewTask::new(b"remind order 7".to_vec())
///     .delay(Duration::from_secs(600))
///     .idempotency_key("remind:7")
///     .queue("reminders")
///     .priority(2)
///     .max_attempts(3);
/// # drop(task);
/// ```
#[derive(Debug, Clone)]
pub struct NewTask {
    pub(crate) payload: Vec<u8>,
    /// `None`: due at once (or, replacing a pending task, at its time).
    pub(crate) at: Option<When>,
    pub(crate) idempotency_key: Option<String>,
    pub(crate) max_attempts: Option<u32>,
    /// `None`: the default queue.
    pub(crate) queue: Option<String>,
    /// `None`: 0 (or, replacing a pending task, its priority).
    pub(crate) priority: Option<i16>,
    /// A debounce's longest wait (see
    /// [`Schedule::max_wait`](crate::Schedule::max_wait)).
    pub(crate) max_wait: Option<Duration>,
    /// Its partition key (see
    /// [`Schedule::partition_key`](crate::Schedule::partition_key)).
    pub(crate) partition_key: Option<String>,
    /// Its envelope (see [`Schedule::envelope`](crate::Schedule::envelope)).
    pub(crate) envelope: Option<Envelope>,
    /// Its kind (see [`NewTask::kind`]).
    pub(crate) kind: Option<String>,
    /// Why its payload could not be made (a typed job's arguments that did
    /// not serialize): refused when it is checked.
    pub(crate) unmade: Option<String>,
}

impl NewTask {
    /// A task carrying `payload` (at most [`MAX_PAYLOAD`](crate::MAX_PAYLOAD)
    /// bytes), due at once.
    pub fn new(payload: impl Into<Vec<u8>>) -> NewTask {
        NewTask {
            payload: payload.into(),
            at: None,
            idempotency_key: None,
            max_attempts: None,
            queue: None,
            priority: None,
            max_wait: None,
            partition_key: None,
            envelope: None,
            kind: None,
            unmade: None,
        }
    }

    /// The kind of work it is: a typed job's name ([`JobArgs::KIND`], set
    /// by [`NewTask::job`]), stored in a column of its own, shown and
    /// filtered on wherever a task is, and the key a [`Workers`] target
    /// dispatches on. 1 to [`MAX_KIND`](crate::MAX_KIND) bytes of ASCII
    /// letters, digits, `_`, `-`, `.` and `:`.
    ///
    /// [`JobArgs::KIND`]: crate::JobArgs::KIND
    /// [`Workers`]: crate::Workers
    pub fn kind(mut self, kind: impl Into<String>) -> Self {
        self.kind = Some(kind.into());
        self
    }

    /// Due this long from when the batch is stored.
    pub fn delay(mut self, delay: Duration) -> Self {
        self.at = Some(When::Delay(delay));
        self
    }

    /// Due at this time (a time in the past is due at once).
    pub fn at(mut self, at: SystemTime) -> Self {
        self.at = Some(When::At(at));
        self
    }

    /// As [`Schedule::idempotency_key`](crate::Schedule::idempotency_key):
    /// a task of the batch whose key is kept already, or appears earlier in
    /// the same batch, creates nothing and is answered with that task's id.
    pub fn idempotency_key(mut self, key: impl Into<String>) -> Self {
        self.idempotency_key = Some(key.into());
        self
    }

    /// This task's own attempt limit, as
    /// [`Schedule::max_attempts`](crate::Schedule::max_attempts).
    pub fn max_attempts(mut self, n: u32) -> Self {
        self.max_attempts = Some(n);
        self
    }

    /// The queue, as [`Schedule::queue`](crate::Schedule::queue).
    pub fn queue(mut self, queue: impl Into<String>) -> Self {
        self.queue = Some(queue.into());
        self
    }

    /// The priority, as [`Schedule::priority`](crate::Schedule::priority).
    pub fn priority(mut self, priority: i16) -> Self {
        self.priority = Some(priority);
        self
    }

    /// The partition key, as
    /// [`Schedule::partition_key`](crate::Schedule::partition_key).
    pub fn partition_key(mut self, key: impl Into<String>) -> Self {
        self.partition_key = Some(key.into());
        self
    }

    /// The envelope, as [`Schedule::envelope`](crate::Schedule::envelope).
    pub fn envelope(mut self, envelope: Envelope) -> Self {
        self.envelope = Some(envelope);
        self
    }
}

/// When a task is due, as asked.
#[derive(Debug, Clone, Copy)]
pub(crate) enum When {
    At(SystemTime),
    Delay(Duration),
}

/// A task to insert, checked: what one row of an insert binds.
pub(crate) struct NewRow {
    pub(crate) run_at: i64,
    /// Whether the time was asked for (`run_at` is now when it was not):
    /// a replacement keeps the pending task's time unless it was.
    pub(crate) time_given: bool,
    pub(crate) payload: Vec<u8>,
    pub(crate) idempotency_key: Option<String>,
    pub(crate) max_attempts: Option<i64>,
    pub(crate) queue: String,
    /// As given (a replacement keeps the pending task's when it was not).
    pub(crate) priority: Option<i64>,
    /// A debounce's longest wait, in ms: due at the latest this long after
    /// the generation's first request.
    pub(crate) max_wait: Option<i64>,
    pub(crate) partition_key: Option<String>,
    /// Its envelope, checked and encoded (`None` for none).
    pub(crate) envelope: Option<String>,
    /// Its kind, checked.
    pub(crate) kind: Option<String>,
}

impl NewRow {
    /// The priority to insert with.
    pub(crate) fn priority_or_default(&self) -> i64 {
        self.priority.unwrap_or(0)
    }

    /// Checks a task to schedule: the payload's size, the key's length,
    /// the queue's name, the attempt limit, and a due time the store can
    /// hold, a delay counted from `clock`'s now.
    pub(crate) fn check(task: NewTask, clock: &Clock) -> Result<NewRow, Error> {
        let NewTask {
            payload,
            at,
            idempotency_key,
            max_attempts,
            queue,
            priority,
            max_wait,
            partition_key,
            envelope,
            kind,
            unmade,
        } = task;
        if let Some(why) = unmade {
            return Err(Error::invalid_task("payload", why));
        }
        if let Some(kind) = &kind {
            check_kind(kind)?;
        }
        if let Some(envelope) = &envelope {
            envelope.check()?;
            envelope.check_payload(payload.len())?;
        }
        let queue = queue.unwrap_or_else(|| DEFAULT_QUEUE.to_string());
        check_queue(&queue)?;
        if payload.len() > MAX_PAYLOAD {
            return Err(Error::payload_too_large(payload.len(), MAX_PAYLOAD));
        }
        match &idempotency_key {
            Some(key) if key.is_empty() => return Err(Error::invalid_key("it is empty")),
            Some(key) if key.len() > MAX_IDEMPOTENCY_KEY => {
                return Err(Error::invalid_key("it is longer than MAX_IDEMPOTENCY_KEY"))
            }
            _ => {}
        }
        if max_attempts == Some(0) {
            return Err(Error::invalid_task("max_attempts", "at least 1"));
        }
        if let Some(key) = &partition_key {
            if key.is_empty() || key.len() > MAX_PARTITION_KEY {
                return Err(Error::invalid_task(
                    "partition_key",
                    format!("1 to {MAX_PARTITION_KEY} bytes, not {}", key.len()),
                ));
            }
        }
        let run_at = match at {
            None => clock.now_ms(),
            Some(When::At(at)) => to_ms(at)?,
            Some(When::Delay(delay)) => {
                let at = clock
                    .now()
                    .checked_add(delay)
                    .ok_or_else(|| Error::out_of_range("the delay"))?;
                to_ms(at)?
            }
        };
        let max_wait = match max_wait {
            None => None,
            Some(wait) if wait < Duration::from_millis(1) => {
                return Err(Error::invalid_task("max_wait", "at least 1 ms"))
            }
            Some(wait) => {
                Some(i64::try_from(wait.as_millis()).map_err(|_| Error::out_of_range("max_wait"))?)
            }
        };
        // A generation's first request is due at the latest `max_wait` from
        // now; a replacement is capped by the pending task's creation.
        let run_at = match max_wait {
            Some(wait) => run_at.min(clock.now_ms().saturating_add(wait)),
            None => run_at,
        };
        Ok(NewRow {
            run_at,
            time_given: at.is_some(),
            payload,
            idempotency_key,
            max_attempts: max_attempts.map(i64::from),
            queue,
            priority: priority.map(i64::from),
            max_wait,
            partition_key,
            envelope: Envelope::stored(envelope.as_ref()),
            kind,
        })
    }
}

/// Checks a kind: 1 to [`MAX_KIND`](crate::MAX_KIND) bytes of ASCII
/// letters, digits, `_`, `-`, `.` and `:`.
pub(crate) fn check_kind(kind: &str) -> Result<(), Error> {
    let fits = !kind.is_empty() && kind.len() <= crate::model::limits::MAX_KIND;
    let plain = kind
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.' | ':'));
    if fits && plain {
        Ok(())
    } else {
        Err(Error::invalid_task(
            "kind",
            format!(
                "{kind:?}: 1 to {} bytes of ASCII letters, digits, '_', '-', '.' and ':'",
                crate::model::limits::MAX_KIND
            ),
        ))
    }
}
