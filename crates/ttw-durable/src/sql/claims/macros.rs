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

/// Binds the parameters `$1`-`$9` of [`Claims::fail_many`]'s update for
/// one [`Failing`] to `query` (the two backends' queries are different
/// types).
macro_rules! bind_failed {
    ($query:expr, $failing:expr, $now:expr, $default_max:expr, $session:expr, $shards:expr) => {
        $query
            .bind($failing.id)
            .bind($failing.claim)
            .bind($now)
            .bind($session)
            .bind($shards)
            .bind($default_max)
            .bind($failing.retry_at)
            .bind(&*$failing.error)
            .bind(i64::from($failing.dead_now))
    };
}
