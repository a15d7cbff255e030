//! The macros of the claim statements: `bind_ids` binds a list of ids (one
//! parameter each on SQLite, one array on PostgreSQL), `bind_failed` the
//! parameters of a failure (the queries of the two backends are different
//! types). Declared first in `claims.rs`, so that every module after it has
//! them.

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

/// Binds the parameters `$1`-`$9` of [`Claims::fail`]'s update to `query`
/// (the two backends' queries are different types).
macro_rules! bind_failed {
    ($query:expr, $attempt:expr, $failed:expr, $session:expr, $shards:expr) => {
        $query
            .bind($attempt.id)
            .bind($attempt.claim)
            .bind($failed.now)
            .bind($session)
            .bind($shards)
            .bind($failed.default_max)
            .bind($failed.retry_at)
            .bind($failed.error)
            .bind(i64::from($failed.dead_now))
    };
}
