//! The macro of the claim statements that bind a list of ids: one
//! parameter each on SQLite, one array on PostgreSQL (the queries of the
//! two backends are different types). Declared first in `claims.rs`, so
//! that every module after it has it.

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
