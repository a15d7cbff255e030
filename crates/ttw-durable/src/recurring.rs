//! Recurring schedules: a named cron expression (in a time zone) or fixed
//! interval whose occurrences become ordinary tasks, each exactly once
//! across all nodes.
//!
//! How: a schedule lives in a shard (a hash of its name), and the node that
//! holds that shard's lease makes its occurrences tasks shortly before they
//! are due ([`ahead`]), each under the idempotency key
//! `ttw:recurring:<name>:<occurrence ms>`, in the same transaction that
//! moves the schedule's `next_at` past them, fenced on the `next_at` and
//! `version` it read. Two nodes that both think they hold the shard (a lease
//! moving) write the same keys, and one of them writes nothing; a node that
//! dies leaves the schedule to whoever takes its shard. What happens to
//! occurrences no node made a task in time (all nodes down) is the
//! schedule's [`CatchUp`] policy.

use std::fmt;
use std::str::FromStr;
use std::time::{Duration, SystemTime};

use chrono_tz::Tz;

use crate::client::store::Store;
use crate::error::Error;
use crate::jobs::JobArgs;
use crate::model::queue::{check_queue, DEFAULT_QUEUE};
use crate::model::time::{from_ms, ms};
use crate::sql::db::fnv1a;
use crate::sql::db::priority_from_sql;
use crate::sql::recurring::{self as sql, Change, Definition, RecurringRow};

mod occurrences;
mod rule;
mod store;

use rule::{parse_cron, Rule};

/// The most missed occurrences [`CatchUp::All`] runs after a downtime: the
/// latest this many.
pub const MAX_CATCH_UP: usize = 1000;

/// The shortest interval of an [`Recurring::every`] schedule.
pub const MIN_INTERVAL: Duration = Duration::from_secs(1);

/// The longest name of a recurring schedule, in bytes.
pub const MAX_RECURRING_NAME: usize = 200;

/// The default of [`Recurring::missed_after`].
const DEFAULT_MISSED_AFTER: Duration = Duration::from_secs(60);

/// The most upcoming occurrences one pass makes tasks of, for one schedule.
const MAX_PER_PASS: usize = 1000;

/// How far ahead of an occurrence a node makes it a task: far enough that
/// the task reaches the node that will deliver it (at once in this process
/// and over `NOTIFY`, within a catch-up poll over SQLite) before it is due.
pub(crate) fn ahead(catch_up: Duration) -> i64 {
    ms((catch_up * 2).max(Duration::from_secs(2)))
}

/// What happens to the occurrences of a schedule that no node made a task
/// in time (every node was down, or the schedule was paused), once a node
/// can: those more than [`Recurring::missed_after`] late are *missed*.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum CatchUp {
    /// Missed occurrences are dropped; the schedule goes on with the next
    /// one due. The default: a cron job that ran late is seldom wanted.
    #[default]
    Skip,
    /// The latest missed occurrence runs once, at once; the others are
    /// dropped.
    Last,
    /// Every missed occurrence runs, at once, up to the latest
    /// [`MAX_CATCH_UP`].
    All,
}

impl CatchUp {
    /// Its name: `skip`, `last` or `all`.
    pub fn name(self) -> &'static str {
        self.as_sql()
    }

    /// The policy of a name [`CatchUp::name`] gives, if it is one.
    pub fn from_name(name: &str) -> Option<CatchUp> {
        CatchUp::from_sql(name).ok()
    }

    fn as_sql(self) -> &'static str {
        match self {
            CatchUp::Skip => "skip",
            CatchUp::Last => "last",
            CatchUp::All => "all",
        }
    }

    fn from_sql(s: &str) -> Result<CatchUp, Error> {
        match s {
            "skip" => Ok(CatchUp::Skip),
            "last" => Ok(CatchUp::Last),
            "all" => Ok(CatchUp::All),
            other => Err(Error::corrupt(format!(
                "an unknown catch-up policy '{other}' in ttw_recurring"
            ))),
        }
    }
}

/// A recurring schedule to register with [`Store::register_recurring`] (or
/// to change one with [`Store::update_recurring`]): a name, when it recurs,
/// and the task each occurrence becomes.
///
/// Each occurrence becomes an ordinary task carrying the schedule's payload,
/// due at the occurrence's time, under the idempotency key
/// `ttw:recurring:<name>:<occurrence in ms since the Unix epoch>`, which
/// the handler sees as [`Task::idempotency_key`](crate::Task::idempotency_key).
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use ttw_durable::{CatchUp, Recurring};
///
/// // At 02:30 every night, Berlin time; after a downtime, the last missed
/// // night runs once.
/// let nightly = Recurring::cron("nightly-report", "0 30 2 * * *")
///     .time_zone("Europe/Berlin")
///     .payload("build the report")
///     .catch_up(CatchUp::Last);
/// // Every 90 seconds from registration.
/// let ping = Recurring::every("ping", Duration::from_secs(90)).payload("ping");
/// # drop((nightly, ping));
/// ```
#[derive(Clone, PartialEq, Eq)]
pub struct Recurring {
    name: String,
    when: When,
    time_zone: Option<String>,
    payload: Vec<u8>,
    max_attempts: Option<u32>,
    queue: String,
    priority: i16,
    kind: Option<String>,
    /// Why its payload could not be made (a job's arguments that did not
    /// serialize): refused when it is registered.
    unmade: Option<String>,
    catch_up: CatchUp,
    missed_after: Duration,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum When {
    Cron(String),
    Every(Duration),
}

impl fmt::Debug for Recurring {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Recurring")
            .field("name", &self.name)
            .field("when", &self.when)
            .field("time_zone", &self.time_zone)
            .field("payload_len", &self.payload.len())
            .field("queue", &self.queue)
            .field("priority", &self.priority)
            .field("catch_up", &self.catch_up)
            .finish()
    }
}

impl Recurring {
    fn new(name: impl Into<String>, when: When) -> Recurring {
        Recurring {
            name: name.into(),
            when,
            time_zone: None,
            payload: Vec::new(),
            max_attempts: None,
            queue: DEFAULT_QUEUE.to_string(),
            priority: 0,
            kind: None,
            unmade: None,
            catch_up: CatchUp::default(),
            missed_after: DEFAULT_MISSED_AFTER,
        }
    }

    /// A schedule named `name` that recurs as the cron expression
    /// `expression` says, in UTC unless [`time_zone`](Self::time_zone) says
    /// otherwise.
    ///
    /// The dialect (parsed by the `croner` crate, with two checks of our
    /// own): five fields (minute, hour, day of month, month, day of week)
    /// or six with seconds first, never a year field. Each field is `*`, a
    /// number, a name (`JAN`-`DEC`, `SUN`-`SAT`), a range `a-b`, a step
    /// `*/n` or `a-b/n`, or a list of these (`1,15,30`; an empty item, as
    /// in `1,,2`, is refused naming the field). The day of month also takes
    /// `L` (the last day) and `nW` (the weekday nearest day `n`); the day
    /// of week `L` (`5L`, the last Friday) and `#` (`1#2`, the second
    /// Monday); both day fields take `?`, which means any day, as `*` (as
    /// in Quartz). The nicknames `@yearly`, `@annually`, `@monthly`,
    /// `@weekly`, `@daily` and `@hourly` stand for their five fields. When
    /// both day fields are restricted, a day matches if either does (as in
    /// Vixie cron), or if both do when the day of week starts with `+`
    /// (`0 0 1-7 * +MON`, the first Monday). Anything else is refused with
    /// [`Error::is_invalid_schedule`](crate::Error::is_invalid_schedule),
    /// naming the field at fault.
    ///
    /// Daylight-saving transitions: an occurrence in the hour that does not
    /// exist (spring forward) runs at the first time after the gap; in an
    /// hour that happens twice (fall back) a fixed-time job runs once, at
    /// the first, and a job that runs every minute or second runs through
    /// both.
    pub fn cron(name: impl Into<String>, expression: impl Into<String>) -> Recurring {
        Recurring::new(name, When::Cron(expression.into()))
    }

    /// A schedule named `name` that recurs every `interval` (at least
    /// [`MIN_INTERVAL`]), the first time one interval after it is
    /// registered.
    pub fn every(name: impl Into<String>, interval: Duration) -> Recurring {
        Recurring::new(name, When::Every(interval))
    }

    /// The time zone of a cron schedule, an IANA name such as
    /// `"America/New_York"` (default UTC). An interval has none.
    pub fn time_zone(mut self, zone: impl Into<String>) -> Self {
        self.time_zone = Some(zone.into());
        self
    }

    /// The payload of every occurrence's task (at most
    /// [`MAX_PAYLOAD`](crate::MAX_PAYLOAD) bytes; default empty).
    pub fn payload(mut self, payload: impl Into<Vec<u8>>) -> Self {
        self.payload = payload.into();
        self
    }

    /// The attempt limit of every occurrence's task, instead of the
    /// scheduler's.
    pub fn max_attempts(mut self, n: u32) -> Self {
        self.max_attempts = Some(n);
        self
    }

    /// The queue of every occurrence's task (default
    /// [`DEFAULT_QUEUE`]). The schedule is kept by the nodes that serve
    /// this queue: while none does, no occurrence is made a task, and when
    /// one comes the [`CatchUp`] policy decides about those missed.
    pub fn queue(mut self, queue: impl Into<String>) -> Self {
        self.queue = queue.into();
        self
    }

    /// The priority of every occurrence's task within its queue (default 0;
    /// see [`Schedule::priority`](crate::Schedule::priority)).
    pub fn priority(mut self, priority: i16) -> Self {
        self.priority = priority;
        self
    }

    /// Every occurrence is a typed job of this kind (see
    /// [`NewTask::kind`](crate::NewTask::kind)); [`job`](Self::job) sets
    /// it with the arguments.
    pub fn kind(mut self, kind: impl Into<String>) -> Self {
        self.kind = Some(kind.into());
        self
    }

    /// Every occurrence is the typed job `job`: its JSON the payload, its
    /// kind, and its kind's [`JobOptions`](crate::JobOptions) (queue,
    /// priority, attempts), which later calls may override. Arguments that
    /// do not serialize are refused by
    /// [`register_recurring`](crate::Store::register_recurring)
    /// ([`Error::is_invalid_schedule`](crate::Error::is_invalid_schedule)).
    ///
    /// # Examples
    ///
    /// ```
    /// use serde::{Deserialize, Serialize};
    /// use ttw_durable::{JobArgs, Recurring, Store};
    ///
    /// #[derive(Serialize, Deserialize)]
    /// struct NightlyReport {
    ///     team: String,
    /// }
    ///
    /// impl JobArgs for NightlyReport {
    ///     const KIND: &'static str = "nightly_report";
    /// }
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), ttw_durable::Error> {
    /// let store = Store::sqlite_in_memory().await?;
    /// let nightly = Recurring::cron("nightly-report", "0 3 * * *")
    ///     .job(&NightlyReport { team: "billing".into() });
    /// store.register_recurring(nightly).await?;
    /// let schedules = store.list_recurring().await?;
    /// assert_eq!(schedules[0].kind.as_deref(), Some("nightly_report"));
    /// assert_eq!(schedules[0].payload, br#"{"team":"billing"}"#);
    /// # Ok(())
    /// # }
    /// ```
    pub fn job<J: JobArgs>(mut self, job: &J) -> Self {
        match serde_json::to_vec(job) {
            Ok(payload) => self.payload = payload,
            Err(err) => {
                self.unmade = Some(format!(
                    "the arguments of {} do not serialize: {err}",
                    J::KIND
                ));
            }
        }
        self.kind = Some(J::KIND.to_string());
        let options = J::options();
        if let Some(queue) = options.queue {
            self.queue = queue.to_string();
        }
        if let Some(priority) = options.priority {
            self.priority = priority;
        }
        if let Some(n) = options.max_attempts {
            self.max_attempts = Some(n);
        }
        self
    }

    /// What runs of the occurrences missed during a downtime (default
    /// [`CatchUp::Skip`]).
    pub fn catch_up(mut self, policy: CatchUp) -> Self {
        self.catch_up = policy;
        self
    }

    /// How late an occurrence may be made a task and still run as usual
    /// (default one minute): one later than this is missed, and the
    /// [`CatchUp`] policy decides. Occurrences made tasks in time are not
    /// affected: a downtime shorter than this delays them, and they run
    /// when a node is back.
    pub fn missed_after(mut self, late: Duration) -> Self {
        self.missed_after = late;
        self
    }

    /// Checks everything and parses the rule: nothing is written when this
    /// fails.
    fn check(&self) -> Result<Rule, Error> {
        check_name(&self.name)?;
        check_queue(&self.queue)?;
        if let Some(why) = &self.unmade {
            return Err(Error::invalid_schedule(why.clone()));
        }
        if let Some(kind) = &self.kind {
            crate::model::new_task::check_kind(kind)?;
        }
        if self.payload.len() > crate::model::limits::MAX_PAYLOAD {
            return Err(Error::payload_too_large(
                self.payload.len(),
                crate::model::limits::MAX_PAYLOAD,
            ));
        }
        if self.max_attempts == Some(0) {
            return Err(Error::config("max_attempts must be at least 1"));
        }
        if self.missed_after.as_millis() > i64::MAX as u128 {
            return Err(Error::out_of_range("missed_after"));
        }
        match &self.when {
            When::Cron(expression) => {
                let zone = match &self.time_zone {
                    None => Tz::UTC,
                    Some(name) => Tz::from_str(name).map_err(|_| {
                        Error::invalid_schedule(format!("unknown time zone '{name}'"))
                    })?,
                };
                Ok(Rule::Cron(Box::new(parse_cron(expression)?), zone))
            }
            When::Every(interval) => {
                if self.time_zone.is_some() {
                    return Err(Error::invalid_schedule(
                        "an interval schedule has no time zone; only a cron schedule does",
                    ));
                }
                if interval.is_zero() {
                    return Err(Error::invalid_schedule("the interval is zero"));
                }
                if *interval < MIN_INTERVAL {
                    return Err(Error::invalid_schedule(format!(
                        "the interval {interval:?} is shorter than MIN_INTERVAL ({MIN_INTERVAL:?})"
                    )));
                }
                let every = i64::try_from(interval.as_millis())
                    .map_err(|_| Error::out_of_range("the interval"))?;
                Ok(Rule::Every(every))
            }
        }
    }

    fn cron_text(&self) -> Option<&str> {
        match &self.when {
            When::Cron(e) => Some(e),
            When::Every(_) => None,
        }
    }

    fn every_ms(&self) -> Option<i64> {
        match self.when {
            When::Every(d) => Some(ms(d)),
            When::Cron(_) => None,
        }
    }
}

/// A schedule name: 1 to [`MAX_RECURRING_NAME`] bytes of letters, digits
/// and `_ - . :`.
fn check_name(name: &str) -> Result<(), Error> {
    if name.is_empty() {
        return Err(Error::invalid_schedule("the schedule name is empty"));
    }
    if name.len() > MAX_RECURRING_NAME {
        return Err(Error::invalid_schedule(format!(
            "the schedule name is {} bytes, longer than MAX_RECURRING_NAME ({MAX_RECURRING_NAME})",
            name.len()
        )));
    }
    if let Some(c) = name
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.' | ':')))
    {
        return Err(Error::invalid_schedule(format!(
            "the schedule name holds {c:?}; use letters, digits and _ - . :"
        )));
    }
    Ok(())
}

/// What [`Store::register_recurring`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Registered {
    /// The schedule is new.
    Created,
    /// A schedule of that name and the same definition was registered
    /// already (by another node, or an earlier start): nothing changed.
    Unchanged,
}

/// A recurring schedule as stored, from [`Store::list_recurring`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct RecurringInfo {
    /// Its name.
    pub name: String,
    /// Its cron expression, for a cron schedule.
    pub cron: Option<String>,
    /// Its time zone, for a cron schedule given one.
    pub time_zone: Option<String>,
    /// Its interval, for an interval schedule.
    pub every: Option<Duration>,
    /// Its catch-up policy.
    pub catch_up: CatchUp,
    /// How late an occurrence may be made a task before it counts as missed.
    pub missed_after: Duration,
    /// Whether it is paused.
    pub paused: bool,
    /// Its next occurrence not yet made a task.
    pub next_at: SystemTime,
    /// The payload of its occurrences' tasks.
    pub payload: Vec<u8>,
    /// The attempt limit of its occurrences' tasks, if it has its own.
    pub max_attempts: Option<u32>,
    /// The queue of its occurrences' tasks.
    pub queue: String,
    /// The priority of its occurrences' tasks.
    pub priority: i16,
    /// The kind of its occurrences, if they are typed jobs.
    pub kind: Option<String>,
}

impl RecurringInfo {
    /// Its next `n` occurrences from [`next_at`](Self::next_at) on, by its
    /// rule and time zone (fewer if its rule ends or leaves the range of
    /// times the store holds).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), ttw_durable::Error> {
    /// use std::time::Duration;
    /// use ttw_durable::{Recurring, Store};
    ///
    /// let store = Store::sqlite_in_memory().await?;
    /// store.register_recurring(Recurring::every("sweep", Duration::from_secs(3600))).await?;
    /// let info = &store.list_recurring().await?[0];
    /// let next = info.next_occurrences(3);
    /// assert_eq!(next[0], info.next_at);
    /// assert_eq!(next[2].duration_since(next[0]).unwrap(), Duration::from_secs(7200));
    /// # Ok(())
    /// # }
    /// ```
    pub fn next_occurrences(&self, n: usize) -> Vec<SystemTime> {
        let Ok(rule) = self.to_recurring().check() else {
            return Vec::new();
        };
        let mut times = Vec::with_capacity(n);
        let mut t = ms(self
            .next_at
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap_or_default());
        while times.len() < n {
            times.push(from_ms(t));
            match rule.after(t) {
                Ok(next) if next > t => t = next,
                _ => break,
            }
        }
        times
    }

    /// The schedule to register in another store: the same rule, time
    /// zone, catch-up policy and task. An interval schedule registered anew
    /// counts its first occurrence from then, so its phase is not kept; a
    /// cron schedule's times are its expression's. Whether it is paused is
    /// [`RecurringInfo::paused`], for the caller to apply.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), ttw_durable::Error> {
    /// use ttw_durable::{Recurring, Store};
    ///
    /// let (from, to) = (Store::sqlite_in_memory().await?, Store::sqlite_in_memory().await?);
    /// from.register_recurring(Recurring::cron("nightly", "0 3 * * *").time_zone("Europe/Paris")).await?;
    /// for schedule in from.list_recurring().await? {
    ///     to.register_recurring(schedule.to_recurring()).await?;
    /// }
    /// assert_eq!(to.list_recurring().await?[0].next_at, from.list_recurring().await?[0].next_at);
    /// # Ok(())
    /// # }
    /// ```
    pub fn to_recurring(&self) -> Recurring {
        let mut schedule = match (&self.cron, self.every) {
            (Some(cron), _) => Recurring::cron(self.name.clone(), cron.clone()),
            (None, Some(every)) => Recurring::every(self.name.clone(), every),
            (None, None) => Recurring::every(self.name.clone(), Duration::ZERO),
        };
        if let Some(zone) = &self.time_zone {
            schedule = schedule.time_zone(zone.clone());
        }
        schedule = schedule
            .payload(self.payload.clone())
            .queue(self.queue.clone())
            .priority(self.priority)
            .catch_up(self.catch_up)
            .missed_after(self.missed_after);
        if let Some(n) = self.max_attempts {
            schedule = schedule.max_attempts(n);
        }
        schedule
    }
}

/// A schedule's row, read.
struct StoredRow {
    info: RecurringInfo,
    next_at: i64,
    version: i64,
}

impl StoredRow {
    fn from_row(row: RecurringRow) -> Result<StoredRow, Error> {
        let millis = |ms: i64| Duration::from_millis(u64::try_from(ms).unwrap_or(0));
        Ok(StoredRow {
            info: RecurringInfo {
                every: row.every_ms.map(millis),
                catch_up: CatchUp::from_sql(&row.catch_up)?,
                missed_after: millis(row.missed_after_ms),
                paused: row.paused,
                next_at: from_ms(row.next_at),
                max_attempts: row.max_attempts.map(crate::sql::db::clamp_u32),
                priority: priority_from_sql(row.priority),
                name: row.name,
                cron: row.cron,
                time_zone: row.time_zone,
                payload: row.payload,
                queue: row.queue,
                kind: row.kind,
            },
            next_at: row.next_at,
            version: row.version,
        })
    }

    /// The schedule as a [`Recurring`] again, to compare definitions and
    /// parse its rule.
    fn definition(&self) -> Recurring {
        let i = &self.info;
        Recurring {
            name: i.name.clone(),
            when: match (&i.cron, i.every) {
                (Some(c), _) => When::Cron(c.clone()),
                (None, e) => When::Every(e.unwrap_or_default()),
            },
            time_zone: i.time_zone.clone(),
            payload: i.payload.clone(),
            max_attempts: i.max_attempts,
            queue: i.queue.clone(),
            priority: i.priority,
            kind: i.kind.clone(),
            unmade: None,
            catch_up: i.catch_up,
            missed_after: i.missed_after,
        }
    }
}

/// The occurrence task's idempotency key.
fn occurrence_key(name: &str, at: i64) -> String {
    format!("ttw:recurring:{name}:{at}")
}

#[cfg(test)]
mod tests;
