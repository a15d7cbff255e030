//! Group commit of single schedules: [`Store::grouped`] makes a handle
//! that many callers schedule through at once, each its own task, written
//! together (see [`group`](crate::group)).

use crate::client::schedule::Scheduled;
use crate::client::store::Store;
use crate::error::Error;
use crate::group::{GroupWriter, WriteGroup};
use crate::model::new_task::{NewRow, NewTask};

/// The most tasks one group writes.
pub const MAX_GROUP: usize = 512;

/// Writers on PostgreSQL: one group forms while the other commits.
const POSTGRES_WRITERS: usize = 2;

/// Single schedules written in groups: each caller's task is checked at
/// once (a refusal is its own, before anything is written), then written
/// with every task handed over while the previous group was being written
/// (at most [`MAX_GROUP`]), in one transaction. A lone task is written at
/// once, never held back to wait for company, and each caller is answered
/// after its group's commit. Where many callers schedule one task each (a
/// web service's requests), this takes one commit for many tasks instead
/// of one each. Made by [`Store::grouped`]; clones share the writers.
///
/// What a task scheduled alone can do, it can do here, except
/// [`Schedule::replace_pending`](crate::Schedule::replace_pending) (a
/// debounce reads and replaces a task: schedule it with
/// [`Store::schedule`]).
///
/// # Examples
///
/// ```
/// use ttw_durable::{NewTask, Store};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), ttw_durable::Error> {
/// let store = Store::sqlite_in_memory().await?;
/// let grouped = store.grouped();
/// let requests = (0..100).map(|n| {
///     let grouped = grouped.clone();
///     tokio::spawn(async move { grouped.schedule(NewTask::new(format!("order {n}"))).await })
/// });
/// for request in requests.collect::<Vec<_>>() {
///     assert!(request.await.unwrap()?.is_created());
/// }
/// assert_eq!(store.counts().await?.scheduled, 100);
///
/// // A key given again answers the task it names, as a single schedule does.
/// let first = grouped.schedule(NewTask::new("a").idempotency_key("k")).await?;
/// let again = grouped.schedule(NewTask::new("b").idempotency_key("k")).await?;
/// assert_eq!(again.id(), first.id());
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Debug)]
pub struct Grouped {
    store: Store,
    writer: GroupWriter<Groups>,
}

/// How a group of checked tasks is written.
struct Groups {
    store: Store,
}

impl WriteGroup for Groups {
    type Item = NewRow;
    type Answer = Result<Scheduled, Error>;

    /// One transaction for the group. Its tasks were checked one by one,
    /// so a failure is the database's: the commit may have happened with
    /// its answer lost, and writing again could store tasks twice; every
    /// caller of the group hears of the failure (one of them the error
    /// itself), and retries with its idempotency key.
    async fn write(&self, group: Vec<NewRow>) -> Vec<Result<Scheduled, Error>> {
        let n = group.len();
        match self.store.insert_checked(group).await {
            Ok(scheduled) => scheduled.into_iter().map(Ok).collect(),
            Err(err) => {
                let said = err.to_string();
                let mut answers = Vec::with_capacity(n);
                answers.push(Err(err.without_batch_index()));
                answers.extend((1..n).map(|_| Err(Error::group_failed(&said))));
                answers
            }
        }
    }
}

impl Store {
    /// A handle that schedules single tasks in groups (see [`Grouped`]).
    /// Each call starts writers of its own: make one and clone it.
    ///
    /// # Panics
    ///
    /// Outside a Tokio runtime (its writers are tasks of the runtime).
    pub fn grouped(&self) -> Grouped {
        let writers = if self.is_postgres() {
            POSTGRES_WRITERS
        } else {
            1
        };
        Grouped {
            store: self.clone(),
            writer: GroupWriter::start(
                Groups {
                    store: self.clone(),
                },
                writers,
                MAX_GROUP,
            ),
        }
    }
}

impl Grouped {
    /// Schedules `task` in the next group; answers once its group has
    /// committed: [`Scheduled::Created`], or [`Scheduled::Existing`] for an
    /// idempotency key that names a task already.
    ///
    /// # Errors
    ///
    /// What a single schedule refuses ([`Error::is_payload_too_large`],
    /// [`Error::is_invalid_task`], ...), before anything is written and
    /// without holding up the group; [`Error::is_database`] if its group's
    /// transaction failed (then none of the group's tasks is stored);
    /// [`Error::is_closed`] once the runtime is shutting down.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future once the task was handed over does not take it
    /// back: it is written with its group, and only the answer is lost.
    pub async fn schedule(&self, task: NewTask) -> Result<Scheduled, Error> {
        let row = NewRow::check(task, self.store.clock())?;
        self.writer
            .write(row)
            .await
            .unwrap_or_else(|| Err(Error::closed()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A bad task is refused on its own, and the good tasks sent with it
    /// are written: the check comes before the group.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_bad_task_is_refused_alone() {
        let store = Store::sqlite_in_memory().await.unwrap();
        let grouped = store.grouped();
        let mut answers = Vec::new();
        for n in 0..50u32 {
            let g = grouped.clone();
            answers.push(tokio::spawn(async move {
                let task = if n == 7 {
                    NewTask::new(vec![0; crate::MAX_PAYLOAD + 1])
                } else {
                    NewTask::new(n.to_be_bytes().to_vec())
                };
                g.schedule(task).await
            }));
        }
        let mut created = 0;
        for (n, answer) in answers.into_iter().enumerate() {
            match answer.await.unwrap() {
                Ok(s) => {
                    assert!(s.is_created());
                    created += 1;
                }
                Err(err) => assert!(n == 7 && err.is_payload_too_large(), "{n}: {err}"),
            }
        }
        assert_eq!(created, 49);
        assert_eq!(store.counts().await.unwrap().scheduled, 49);
    }
}
