//! The two macros of the claim statements: binding a list of ids (one
//! parameter each on SQLite, one array on PostgreSQL) and reading the
//! claimed rows back. Declared first in `claims.rs`, so that every module
//! after it has them.

/// Binds the ids of a [`Claims::ids_are`] condition to `query`: on SQLite
/// one parameter each; on PostgreSQL one, an array in its text form
/// (`{1,2,3}`), which the statement casts.
macro_rules! bind_ids {
    ($claims:expr, $query:expr, $ids:expr) => {{
        let mut query = $query;
        if $claims.on_sqlite() {
            for id in $ids {
                query = query.bind(id);
            }
        } else {
            query = query.bind(array_text($ids));
        }
        query
    }};
}

/// The [`Claimed`] tasks of the rows a claim statement returned, for the
/// `fired` tasks (in id order) it was given.
macro_rules! decode_claimed {
    ($rows:expr, $fired:expr) => {{
        let fired: &[Due] = $fired;
        let rows = $rows;
        let mut out = Vec::with_capacity(rows.len());
        for row in rows {
            let id: i64 = row.try_get("id")?;
            let Ok(at) = fired.binary_search_by_key(&id, |due| due.id) else {
                continue;
            };
            out.push(Claimed {
                attempt: Attempt {
                    id,
                    number: clamp_u32(row.try_get("attempts")?),
                    claim: row.try_get("claims")?,
                    lane: fired[at].lane,
                    priority: fired[at].priority,
                    key: fired[at].key,
                },
                run_at: row.try_get("run_at")?,
                payload: row.try_get("payload")?,
                idempotency_key: row.try_get("idempotency_key")?,
            });
        }
        out
    }};
}
