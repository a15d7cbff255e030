//! A store's recurring schedules: registered, changed, paused, resumed,
//! deleted and listed ([`Store`]'s methods).

use super::*;

impl Store {
    /// The shard a schedule lives in.
    fn recurring_shard(&self, name: &str) -> i64 {
        (fnv1a(name.as_bytes()) % u64::from(self.shards())) as i64
    }

    /// Registers a recurring schedule. Registering the same definition again
    /// (every node at its start, say) changes nothing and answers
    /// [`Registered::Unchanged`]; a different definition under a name taken
    /// is refused: change a schedule with [`Store::update_recurring`].
    ///
    /// The schedulers of this process hear of it at once, those of other
    /// processes over `NOTIFY` on PostgreSQL, and on SQLite at their next
    /// window load (every half window).
    ///
    /// # Errors
    ///
    /// [`Error::is_invalid_schedule`], writing nothing, for a cron
    /// expression that does not parse (the message names the field at
    /// fault), an unknown time zone, an interval of zero or under
    /// [`MIN_INTERVAL`], a time zone given to an interval, a name that is
    /// empty, longer than [`MAX_RECURRING_NAME`] or holds other than
    /// letters, digits and `_ - . :`, or a name registered with another
    /// definition; [`Error::is_payload_too_large`]; [`Error::is_config`] for
    /// zero attempts; [`Error::is_database`].
    ///
    /// # Examples
    ///
    /// ```
    /// use ttw_durable::{Recurring, Registered, Store};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), ttw_durable::Error> {
    /// let store = Store::sqlite_in_memory().await?;
    /// let every_5_min = Recurring::cron("cleanup", "*/5 * * * *").payload("clean");
    /// assert_eq!(store.register_recurring(every_5_min.clone()).await?, Registered::Created);
    /// assert_eq!(store.register_recurring(every_5_min).await?, Registered::Unchanged);
    ///
    /// let err = store
    ///     .register_recurring(Recurring::cron("bad", "61 * * * *"))
    ///     .await
    ///     .unwrap_err();
    /// assert!(err.is_invalid_schedule());
    /// assert!(err.to_string().contains("minute"), "{err}");
    /// # Ok(())
    /// # }
    /// ```
    pub async fn register_recurring(&self, schedule: Recurring) -> Result<Registered, Error> {
        // Checked, and its first occurrence counted from now, before the
        // write goes to a task of its own.
        let rule = schedule.check()?;
        let now = self.clock().now_ms();
        let next_at = rule.first(now)?;
        self.to_completion(
            move |store| async move { store.register_here(schedule, now, next_at).await },
        )
        .await
    }

    /// [`register_recurring`](Self::register_recurring) on this task, the
    /// schedule checked at `now` and first due at `next_at`.
    async fn register_here(
        &self,
        schedule: Recurring,
        now: i64,
        next_at: i64,
    ) -> Result<Registered, Error> {
        let found = sql::register(
            self.db(),
            self.names(),
            self.definition(&schedule, next_at),
            now,
        )
        .await?
        .map(StoredRow::from_row)
        .transpose()?;
        match found {
            None => {
                self.notifier().wake_recurring();
                Ok(Registered::Created)
            }
            Some(stored) if stored.definition() == schedule => Ok(Registered::Unchanged),
            Some(stored) => Err(Error::invalid_schedule(format!(
                "a schedule named '{}' is registered already with another definition ({:?}); \
                 change it with Store::update_recurring",
                schedule.name,
                stored.definition()
            ))),
        }
    }

    /// Changes a registered schedule to `schedule`'s definition (found by
    /// its name). Its occurrences made tasks and not yet started are
    /// deleted, and it goes on from the new definition's first occurrence
    /// after now (an interval: one interval from now). Returns whether the
    /// schedule exists. A paused schedule stays paused.
    ///
    /// # Errors
    ///
    /// As [`Store::register_recurring`], but for the name taken.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use ttw_durable::{Recurring, Store};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), ttw_durable::Error> {
    /// let store = Store::sqlite_in_memory().await?;
    /// store.register_recurring(Recurring::every("poll", Duration::from_secs(60))).await?;
    /// assert!(store.update_recurring(Recurring::every("poll", Duration::from_secs(30))).await?);
    /// let list = store.list_recurring().await?;
    /// assert_eq!(list[0].every, Some(Duration::from_secs(30)));
    /// # Ok(())
    /// # }
    /// ```
    pub async fn update_recurring(&self, schedule: Recurring) -> Result<bool, Error> {
        let rule = schedule.check()?;
        let now = self.clock().now_ms();
        let next_at = rule.first(now)?;
        self.to_completion(move |store| async move {
            let def = store.definition(&schedule, next_at);
            store
                .change_recurring(&schedule.name, Change::Define(def), true)
                .await
        })
        .await
    }

    /// Pauses a schedule: no more of its occurrences become tasks, and
    /// those made tasks and not yet started are deleted (a task running, or
    /// waiting for a retry, goes on). Returns whether it was running.
    /// Resumed, its catch-up policy decides about the occurrences missed
    /// meanwhile.
    ///
    /// # Errors
    ///
    /// [`Error::is_database`].
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use ttw_durable::{Recurring, Store};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), ttw_durable::Error> {
    /// let store = Store::sqlite_in_memory().await?;
    /// store.register_recurring(Recurring::every("poll", Duration::from_secs(60))).await?;
    /// assert!(store.pause_recurring("poll").await?);
    /// assert!(!store.pause_recurring("poll").await?);
    /// assert!(store.list_recurring().await?[0].paused);
    /// assert!(store.resume_recurring("poll").await?);
    /// # Ok(())
    /// # }
    /// ```
    pub async fn pause_recurring(&self, name: &str) -> Result<bool, Error> {
        let name = name.to_owned();
        self.to_completion(move |store| async move {
            store.change_recurring(&name, Change::Pause, false).await
        })
        .await
    }

    /// Resumes a paused schedule. Returns whether it was paused.
    ///
    /// # Errors
    ///
    /// [`Error::is_database`].
    pub async fn resume_recurring(&self, name: &str) -> Result<bool, Error> {
        let name = name.to_owned();
        self.to_completion(move |store| async move {
            store.change_recurring(&name, Change::Resume, true).await
        })
        .await
    }

    /// Deletes a schedule, and its occurrences made tasks and not yet
    /// started (a task running, or waiting for a retry, goes on). Returns
    /// whether it existed.
    ///
    /// # Errors
    ///
    /// [`Error::is_database`].
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use ttw_durable::{Recurring, Store};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), ttw_durable::Error> {
    /// let store = Store::sqlite_in_memory().await?;
    /// store.register_recurring(Recurring::every("poll", Duration::from_secs(60))).await?;
    /// assert!(store.delete_recurring("poll").await?);
    /// assert!(store.list_recurring().await?.is_empty());
    /// # Ok(())
    /// # }
    /// ```
    pub async fn delete_recurring(&self, name: &str) -> Result<bool, Error> {
        let name = name.to_owned();
        self.to_completion(move |store| async move {
            store.change_recurring(&name, Change::Delete, false).await
        })
        .await
    }

    /// Every recurring schedule, by name, with its next occurrence not yet
    /// made a task.
    ///
    /// # Errors
    ///
    /// [`Error::is_database`].
    pub async fn list_recurring(&self) -> Result<Vec<RecurringInfo>, Error> {
        sql::list(self.db())
            .await?
            .into_iter()
            .map(|row| StoredRow::from_row(row).map(|stored| stored.info))
            .collect()
    }

    /// One change of an operator to schedule `name` (see
    /// [`sql::change`]); when `wake`, this process's schedulers are told.
    async fn change_recurring(
        &self,
        name: &str,
        change: Change<'_>,
        wake: bool,
    ) -> Result<bool, Error> {
        let changing = sql::Changing {
            name,
            change,
            now: self.clock().now_ms(),
        };
        let changed = sql::change(self.db(), self.names(), changing).await?;
        if changed && wake {
            self.notifier().wake_recurring();
        }
        Ok(changed)
    }

    /// `schedule` as its row is written, first due at `next_at`.
    fn definition<'a>(&self, schedule: &'a Recurring, next_at: i64) -> Definition<'a> {
        Definition {
            name: &schedule.name,
            shard: self.recurring_shard(&schedule.name),
            cron: schedule.cron_text(),
            time_zone: schedule.time_zone.as_deref(),
            every_ms: schedule.every_ms(),
            catch_up: schedule.catch_up.as_sql(),
            missed_after_ms: ms(schedule.missed_after),
            payload: &schedule.payload,
            max_attempts: schedule.max_attempts.map(i64::from),
            queue: &schedule.queue,
            priority: i64::from(schedule.priority),
            kind: schedule.kind.as_deref(),
            next_at,
        }
    }
}
