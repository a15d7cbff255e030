//! The fenced claim of fired tasks in queues without flow control (the
//! limited claim is `limited.rs`), and the look at why a fired task was
//! not claimed.

use super::*;

impl Claims {
    /// The claim, in one statement: of the fired tasks (in id order),
    /// those still scheduled, due by `now`, in a lane whose lease this
    /// session holds, and in a queue with no flow control (see
    /// [`uncontrolled`]) move to running, with the attempt counted, the
    /// session and lease epoch stamped, and a lock until `locked_until`.
    /// The tasks of a paused or limited queue are left to
    /// [`claim_limited`](Self::claim_limited).
    pub(crate) async fn claim(&self, claim: Claiming<'_>) -> Result<Vec<Claimed>, Error> {
        let Claiming {
            fired,
            now,
            locked_until,
        } = claim;
        let sql = self.claim_sql(fired.len(), true);
        let claimed = write_with_pool!(&self.db, Urgency::Urgent, pool => {
            let query = sqlx::query_as::<_, ClaimedRow>(&sql)
                .persistent(self.keeps_plans())
                .bind(&self.session)
                .bind(self.shards)
                .bind(locked_until)
                .bind(now);
            let query = bind_ids!(self, query, fired.iter().map(|due| due.id));
            claimed(query.fetch_all(pool).await?, fired)
        });
        Ok(claimed)
    }

    /// The claim statement for `n` ids: parameters `$1` session, `$2`
    /// shards, `$3` the lock, `$4` now, `$5...` the ids. `guarded`: only
    /// tasks of queues without flow control.
    pub(super) fn claim_sql(&self, n: usize, guarded: bool) -> String {
        let guard = if guarded {
            format!(" AND {}", uncontrolled())
        } else {
            String::new()
        };
        format!(
            "UPDATE ttw_tasks SET state = 'running', attempts = attempts + 1, claims = claims + 1, locked_by = $1, \
             lock_epoch = (SELECT l.epoch FROM ttw_leases l WHERE {}), \
             locked_until = $3, started_at = $4, updated_at = {} \
             WHERE {} AND {} \
             RETURNING id, run_at, attempts, claims, payload, idempotency_key, envelope, kind",
            task_lane("$2"),
            self.db.clock_sql(),
            self.ids_are(5, n),
            checked(&format!(
                "state = 'scheduled' AND run_at <= $4 AND {}{guard}",
                in_held_shard("$1", "$2")
            )),
        )
    }

    /// Of `ids`, which a claim did not take, each as it is now, and whether
    /// this session holds its shard.
    pub(crate) async fn why_unclaimed(&self, ids: &[i64]) -> Result<Vec<Unclaimed>, Error> {
        let sql = format!(
            "SELECT ttw_tasks.id, ttw_tasks.state, ttw_tasks.run_at, \
             CASE WHEN {} THEN 1 ELSE 0 END AS held, \
             CASE WHEN {} THEN 0 ELSE 1 END AS controlled \
             FROM ttw_tasks WHERE {}",
            in_held_shard("$1", "$2"),
            uncontrolled(),
            self.ids_are(3, ids.len()).replace("id ", "ttw_tasks.id ")
        );
        let rows = with_pool!(&self.db, pool => {
            let query = sqlx::query_as::<_, UnclaimedRow>(&sql)
                .persistent(self.keeps_plans())
                .bind(&self.session)
                .bind(self.shards);
            bind_ids!(self, query, ids.iter().copied()).fetch_all(pool).await?
        });
        rows.into_iter().map(Unclaimed::try_from).collect()
    }
}
