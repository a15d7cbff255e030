//! The window loads: the tasks of this session's shards due before a
//! horizon, and the catch-up poll of those changed since the last one.

use super::*;

impl Claims {
    /// Scheduled tasks of this session's shards due before `horizon`.
    pub(crate) async fn due_before(&self, horizon: i64) -> Result<Vec<Due>, Error> {
        let sql = format!(
            "SELECT {DUE_COLUMNS} FROM ttw_tasks WHERE state = 'scheduled' AND run_at < $1 AND {}",
            in_held_shard("$3", "$2")
        );
        let rows: Vec<DueRow> = with_pool!(&self.db, pool => {
            sqlx::query_as(&sql)
                .bind(horizon)
                .bind(self.shards)
                .bind(&self.session)
                .fetch_all(pool)
                .await?
        });
        Ok(rows.into_iter().filter_map(|row| self.due(row)).collect())
    }

    /// One catch-up poll in one statement: the database's clock, and the
    /// scheduled tasks of this session's shards due before `horizon` whose
    /// change stamp is at or after `since` (or, on the first poll, `slack`
    /// before that clock).
    pub(crate) async fn changed_since(&self, look: Since) -> Result<Changes, Error> {
        let Since {
            horizon,
            since,
            slack,
        } = look;
        let sql = format!(
            "WITH c AS (SELECT {} AS db_now) \
             SELECT c.db_now, {DUE_COLUMNS} FROM c LEFT JOIN ttw_tasks \
             ON ttw_tasks.state = 'scheduled' AND ttw_tasks.run_at < $1 \
             AND ttw_tasks.updated_at >= COALESCE($2, c.db_now - $5) AND {}",
            self.db.clock_sql(),
            in_held_shard("$4", "$3")
        );
        let rows: Vec<ChangedRow> = with_pool!(&self.db, pool => {
            sqlx::query_as(&sql)
                .bind(horizon)
                .bind(since)
                .bind(self.shards)
                .bind(&self.session)
                .bind(slack)
                .fetch_all(pool)
                .await?
        });
        let db_now = rows
            .first()
            .map(|r| r.db_now)
            .ok_or_else(|| Error::corrupt("no clock reading came back from the database"))?;
        let due = rows
            .into_iter()
            .filter_map(|row| self.due(row.task()?))
            .collect();
        Ok(Changes { db_now, due })
    }
}
