//! The fenced outcomes of attempts: successes moved to the history, and
//! failures scheduled again or dead, each with its attempt recorded and
//! its callback written in the same transaction.

use super::*;

/// The ids of the tasks of `batch` that have a callback to tell, among
/// those `written` (id, claim).
fn telling(batch: &[Finished], written: &[(i64, i64)]) -> Vec<i64> {
    let mut written: Vec<i64> = written.iter().map(|(id, _)| *id).collect();
    written.sort_unstable();
    batch
        .iter()
        .filter(|f| f.tell && written.binary_search(&f.success.id).is_ok())
        .map(|f| f.success.id)
        .collect()
}

impl Claims {
    /// Marks done every task of `batch` whose attempt still holds it, each
    /// row under its own fence (see [`fenced`]), and moves it to
    /// `ttw_history` (see [`history`](crate::sql::history)) with its
    /// attempt's receipt (the answer's status and first bytes), in one
    /// transaction: a stale attempt's row is refused and the others are
    /// written. Answers the successes written.
    pub(crate) async fn complete_many(
        &self,
        batch: &[Finished],
        now: i64,
    ) -> Result<Vec<Success>, Error> {
        if batch.is_empty() {
            return Ok(Vec::new());
        }
        let into = into_history("done", &self.db.clock_sql(), "$1");
        let mut told = Vec::new();
        let turn = self.db.write_turn(Urgency::Ordinary).await;
        // Read to its end (see the notes of `db`).
        let written: Vec<(i64, i64)> = match &self.db {
            // One statement: the rows deleted under their fence are the
            // rows inserted into the history. One statement text for every
            // batch size: the ids, claims, statuses and answers as arrays.
            #[cfg(feature = "postgres")]
            Db::Postgres(pool) => {
                crate::sql::primary::unless_moved(async {
                    Ok::<_, Error>({
                        let sql = format!(
                            "WITH moved AS (DELETE FROM ttw_tasks \
                     USING UNNEST($4::BIGINT[], $5::BIGINT[], $6::INT[], $7::TEXT[]) \
                     AS v(task, claim, answer_status, answer) \
                     WHERE ttw_tasks.id = v.task AND {} \
                     RETURNING ttw_tasks.*, v.answer_status, v.answer) \
                     INSERT INTO ttw_history ({HISTORY_COLUMNS}, answer_status, answer) \
                     SELECT {into}, answer_status, answer FROM moved RETURNING id, claims",
                            fence::fence("v.claim", "$2", "$3")
                        );
                        let ids: Vec<i64> = batch.iter().map(|f| f.success.id).collect();
                        let claims: Vec<i64> = batch.iter().map(|f| f.success.claim).collect();
                        let statuses: Vec<Option<i32>> = batch
                            .iter()
                            .map(|f| f.receipt.status_code().map(i32::from))
                            .collect();
                        let answers: Vec<Option<&str>> =
                            batch.iter().map(|f| f.receipt.answer_text()).collect();
                        let query = sqlx::query_as(&sql)
                            .persistent(false)
                            .bind(now)
                            .bind(&self.session)
                            .bind(self.shards)
                            .bind(ids)
                            .bind(claims)
                            .bind(statuses)
                            .bind(answers);
                        if batch.iter().any(|f| f.tell) {
                            // The successes and their callbacks in one transaction.
                            let mut tx = pool.begin().await?;
                            let written: Vec<(i64, i64)> = query.fetch_all(&mut *tx).await?;
                            let ids = telling(batch, &written);
                            told = self
                                .tell(Conn::Postgres(&mut tx), Told::Done, &ids, now)
                                .await?;
                            tx.commit().await?;
                            written
                        } else {
                            query.fetch_all(pool).await?
                        }
                    })
                })
                .await?
            }
            // Two statements in one transaction, under this process's
            // write turn and SQLite's one writer: copy the fenced rows,
            // then delete exactly those copied. A list of (id, claim) rows,
            // padded with rows that match no task to the next power of
            // two, so that a few statements serve every batch size. Only a
            // batch with a receipt to keep (a webhook's) binds each row's
            // status and answer too: twice the parameters, which cost the
            // drain of handlers' tasks a quarter of its rate when every
            // batch bound them.
            #[cfg(feature = "sqlite")]
            Db::Sqlite(pool, _) => {
                let n = batch.len().next_power_of_two();
                let receipts = batch.iter().any(|f| !f.receipt.is_empty());
                let per_row = if receipts { 4 } else { 2 };
                let rows = (0..n)
                    .map(|i| {
                        let p = 4 + per_row * i;
                        if receipts {
                            format!("(${p}, ${}, ${}, ${})", p + 1, p + 2, p + 3)
                        } else {
                            format!("(${p}, ${})", p + 1)
                        }
                    })
                    .collect::<Vec<_>>()
                    .join(", ");
                let fence = checked(&fence::still_held("$2", "$3"));
                let copy = if receipts {
                    format!(
                        "INSERT INTO ttw_history ({HISTORY_COLUMNS}, answer_status, answer) \
                         SELECT {into}, v.column3, v.column4 FROM (VALUES {rows}) AS v \
                         JOIN ttw_tasks ON ttw_tasks.id = v.column1 AND ttw_tasks.claims = v.column2 \
                         WHERE {fence} RETURNING id, claims"
                    )
                } else {
                    format!(
                        "INSERT INTO ttw_history ({HISTORY_COLUMNS}) SELECT {into} FROM ttw_tasks \
                         WHERE (id, claims) IN (VALUES {rows}) AND {fence} RETURNING id, claims"
                    )
                };
                let delete = format!("DELETE FROM ttw_tasks WHERE id IN ({})", placeholders(1, n));
                let mut tx = pool.begin().await?;
                let mut query = sqlx::query_as(&copy)
                    .bind(now)
                    .bind(&self.session)
                    .bind(self.shards);
                for finished in batch {
                    query = query.bind(finished.success.id).bind(finished.success.claim);
                    if receipts {
                        query = query
                            .bind(finished.receipt.status_code().map(i32::from))
                            .bind(finished.receipt.answer_text());
                    }
                }
                for _ in batch.len()..n {
                    query = query.bind(-1_i64).bind(-1_i64);
                    if receipts {
                        query = query.bind(None::<i32>).bind(None::<&str>);
                    }
                }
                let written: Vec<(i64, i64)> = query.fetch_all(&mut *tx).await?;
                if !written.is_empty() {
                    let mut query = sqlx::query(&delete);
                    for (id, _) in &written {
                        query = query.bind(id);
                    }
                    for _ in written.len()..n {
                        query = query.bind(-1_i64);
                    }
                    query.execute(&mut *tx).await?;
                }
                if batch.iter().any(|f| f.tell) {
                    let ids = telling(batch, &written);
                    told = self
                        .tell(Conn::Sqlite(&mut tx), Told::Done, &ids, now)
                        .await?;
                }
                tx.commit().await?;
                written
            }
        };
        drop(turn);
        self.hand_over(told);
        Ok(written
            .into_iter()
            .map(|(id, claim)| Success { id, claim })
            .collect())
    }

    /// Records one failed attempt (see [`fail_many`](Self::fail_many)), as
    /// the conformance cases write them. `None` if the fence refused it.
    #[cfg(test)]
    pub(crate) async fn fail(
        &self,
        attempt: &Attempt,
        failed: AttemptFailed<'_>,
    ) -> Result<Option<Failed>, Error> {
        let failing = Failing {
            id: attempt.id,
            claim: attempt.claim,
            tell_dead: attempt.tells.dead,
            error: failed.error.into(),
            status: failed.status,
            retry_at: failed.retry_at,
            dead_now: failed.dead_now,
        };
        let mut answers = self
            .fail_many(&[failing], failed.now, failed.default_max)
            .await?;
        Ok(answers.pop().flatten())
    }

    /// Records failed attempts under the same fence as
    /// [`complete_many`](Self::complete_many), in one transaction: each a
    /// retry at its `retry_at`, or dead once the attempts reach the task's
    /// limit (`default_max` when neither it nor its queue has one), or at
    /// once when `dead_now`; each attempt's row in `ttw_attempts`; and the
    /// failure callbacks of the tasks that died. Answers each, in order:
    /// `None` where the fence refused it.
    pub(crate) async fn fail_many(
        &self,
        failing: &[Failing],
        now: i64,
        default_max: i64,
    ) -> Result<Vec<Option<Failed>>, Error> {
        if failing.is_empty() {
            return Ok(Vec::new());
        }
        let update = format!(
            "UPDATE ttw_tasks SET {}, last_error = $8, {UNLOCK}, updated_at = {} \
             WHERE {} RETURNING id, claims, attempts, started_at, state, run_at",
            retry_or_dead("$6", "$7", "$3", "$9"),
            self.db.clock_sql(),
            fenced("$1", "$2", "$4", "$5")
        );
        let dead_told = |rows: &[Option<FailedRow>]| -> Vec<i64> {
            failing
                .iter()
                .zip(rows)
                .filter(|(f, row)| f.tell_dead && row.as_ref().is_some_and(|r| r.state == "dead"))
                .map(|(f, _)| f.id)
                .collect()
        };
        let mut told = Vec::new();
        let turn = self.db.write_turn(Urgency::Ordinary).await;
        // Read to its end (see the notes of `db`).
        let rows: Vec<Option<FailedRow>> = match &self.db {
            // One statement a failure: the row updated under its fence is
            // the attempt recorded.
            #[cfg(feature = "postgres")]
            Db::Postgres(pool) => {
                crate::sql::primary::unless_moved(async {
                    let sql = format!(
                        "WITH f AS ({update}), a AS (INSERT INTO ttw_attempts ({ATTEMPT_COLUMNS}) \
                         SELECT id, claims, attempts, $4, started_at, $3, \
                         CASE WHEN state = 'dead' THEN 'dead' ELSE 'failed' END, $10, $11 FROM f \
                         ON CONFLICT DO NOTHING) \
                         SELECT id, claims, attempts, started_at, state, run_at FROM f"
                    );
                    let mut tx = pool.begin().await?;
                    let mut rows = Vec::with_capacity(failing.len());
                    for f in failing {
                        let found: Vec<FailedRow> = bind_failed!(
                            sqlx::query_as(&sql).persistent(self.keeps_plans()),
                            f,
                            now,
                            default_max,
                            &self.session,
                            self.shards
                        )
                        .bind(f.status.map(i32::from))
                        .bind(bounded_str(&f.error))
                        .fetch_all(&mut *tx)
                        .await?;
                        rows.push(found.into_iter().next());
                    }
                    let dead = dead_told(&rows);
                    if !dead.is_empty() {
                        let conn = Conn::Postgres(&mut tx);
                        told = self.tell(conn, Told::Dead, &dead, now).await?;
                    }
                    tx.commit().await?;
                    Ok::<_, Error>(rows)
                })
                .await?
            }
            // Two statements a failure, under SQLite's one writer.
            #[cfg(feature = "sqlite")]
            Db::Sqlite(pool, _) => {
                let record = format!(
                    "INSERT INTO ttw_attempts ({ATTEMPT_COLUMNS}) VALUES \
                     ($1, $2, $3, $4, $5, $6, \
                     CASE WHEN $7 = 'dead' THEN 'dead' ELSE 'failed' END, $8, $9) \
                     ON CONFLICT DO NOTHING"
                );
                let mut tx = pool.begin().await?;
                let mut rows = Vec::with_capacity(failing.len());
                for f in failing {
                    let found: Vec<FailedRow> = bind_failed!(
                        sqlx::query_as(&update).persistent(self.keeps_plans()),
                        f,
                        now,
                        default_max,
                        &self.session,
                        self.shards
                    )
                    .fetch_all(&mut *tx)
                    .await?;
                    let row = found.into_iter().next();
                    if let Some(row) = &row {
                        sqlx::query(&record)
                            .bind(row.id)
                            .bind(row.claims)
                            .bind(row.attempts)
                            .bind(&self.session)
                            .bind(row.started_at)
                            .bind(now)
                            .bind(&row.state)
                            .bind(f.status.map(i32::from))
                            .bind(bounded_str(&f.error))
                            .execute(&mut *tx)
                            .await?;
                    }
                    rows.push(row);
                }
                let dead = dead_told(&rows);
                if !dead.is_empty() {
                    let conn = Conn::Sqlite(&mut tx);
                    told = self.tell(conn, Told::Dead, &dead, now).await?;
                }
                tx.commit().await?;
                rows
            }
        };
        drop(turn);
        self.hand_over(told);
        rows.into_iter()
            .map(|row| match row {
                None => Ok(None),
                Some(row) => Ok(Some(match TaskState::from_sql(&row.state)? {
                    TaskState::Dead => Failed::Dead,
                    _ => Failed::Retry(row.run_at),
                })),
            })
            .collect()
    }
}
