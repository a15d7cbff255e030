//! Single schedules written in groups: each `POST /v1/tasks` hands its
//! checked task to the service's writers; a writer takes every task that
//! arrived while its previous insert ran (at most [`MAX_GROUP`]) and writes
//! them as one batch, in one transaction, then answers each. A lone request
//! is written at once, never held back to wait for company, and each is
//! answered only after its commit. On SQLite one writer (writes take turns
//! anyway); on PostgreSQL two, so one group forms while the other commits.
//!
//! A group the store refused because of one task (an invalid task, which
//! the API's checks should have caught) is written again one task at a
//! time, so each request gets its own answer. A group the database failed
//! is not: the commit may have happened with its answer lost, and writing
//! again would store tasks twice; every request of the group is answered
//! with the failure, and a client retries with its idempotency key.

use std::sync::Arc;

use tokio::sync::{mpsc, oneshot, Mutex};
use ttw_durable::{NewTask, Scheduled, Store};

/// The most tasks one group writes.
pub(crate) const MAX_GROUP: usize = 512;

struct Pending {
    task: NewTask,
    reply: oneshot::Sender<Result<Scheduled, Refused>>,
}

/// Why a request's task was not scheduled.
#[derive(Debug)]
pub(crate) enum Refused {
    /// The store's own answer to this task.
    Store(ttw_durable::Error),
    /// The database failed the write of the group this task was in: this
    /// is what it said.
    Group(String),
}

/// The handle the API schedules single tasks through.
#[derive(Clone)]
pub(crate) struct Grouper {
    tx: mpsc::UnboundedSender<Pending>,
}

impl Grouper {
    /// Starts the writers on the current runtime; they end when every
    /// handle is gone and what was sent is written.
    pub(crate) fn start(store: Store) -> Grouper {
        let writers = if store.is_postgres() { 2 } else { 1 };
        let (tx, rx) = mpsc::unbounded_channel();
        let rx = Arc::new(Mutex::new(rx));
        for _ in 0..writers {
            tokio::spawn(run(rx.clone(), store.clone()));
        }
        Grouper { tx }
    }

    /// Schedules `task` in the next group; answers once it is committed.
    /// `None` if the writers are gone (the server is stopping).
    pub(crate) async fn schedule(&self, task: NewTask) -> Option<Result<Scheduled, Refused>> {
        let (reply, answer) = oneshot::channel();
        self.tx.send(Pending { task, reply }).ok()?;
        answer.await.ok()
    }
}

async fn run(rx: Arc<Mutex<mpsc::UnboundedReceiver<Pending>>>, store: Store) {
    let mut group: Vec<Pending> = Vec::with_capacity(MAX_GROUP);
    loop {
        let taken = rx.lock().await.recv_many(&mut group, MAX_GROUP).await;
        if taken == 0 {
            break;
        }
        let tasks: Vec<NewTask> = group.iter().map(|p| p.task.clone()).collect();
        match store.schedule_batch(tasks).await {
            Ok(results) => {
                for (pending, result) in group.drain(..).zip(results) {
                    let _ = pending.reply.send(Ok(result));
                }
            }
            Err(err) if err.batch_index().is_some() && group.len() > 1 => {
                for pending in group.drain(..) {
                    let answer = store
                        .schedule_batch([pending.task])
                        .await
                        .map(|mut r| r.remove(0))
                        .map_err(Refused::Store);
                    let _ = pending.reply.send(answer);
                }
            }
            Err(err) => {
                let said = err.to_string();
                let mut drained = group.drain(..);
                if let Some(first) = drained.next() {
                    let _ = first.reply.send(Err(Refused::Store(err)));
                }
                for pending in drained {
                    let _ = pending.reply.send(Err(Refused::Group(said.clone())));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Tasks sent together are answered each with its own id, in one group
    /// or several; a key given twice answers the first task's id.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn each_request_gets_its_own_answer() {
        let store = Store::sqlite_in_memory().await.unwrap();
        let grouper = Grouper::start(store.clone());
        let mut answers = Vec::new();
        for n in 0..200u32 {
            let g = grouper.clone();
            answers.push(tokio::spawn(async move {
                g.schedule(NewTask::new(n.to_be_bytes().to_vec()))
                    .await
                    .unwrap()
                    .unwrap()
            }));
        }
        let mut ids = std::collections::BTreeSet::new();
        for a in answers {
            let s = a.await.unwrap();
            assert!(s.is_created());
            ids.insert(s.id());
        }
        assert_eq!(ids.len(), 200);
        assert_eq!(store.counts().await.unwrap().scheduled, 200);
        let first = grouper
            .schedule(NewTask::new("a").idempotency_key("k"))
            .await
            .unwrap()
            .unwrap();
        let again = grouper
            .schedule(NewTask::new("b").idempotency_key("k"))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(again, Scheduled::Existing(first.id()));
    }
}
