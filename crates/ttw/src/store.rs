//! Opening the store a `--database` (or a configuration) names.

use std::time::Duration;

use ttw_durable::{Commits, Store};

use crate::error::{fail, Failure, Result};

/// Opens the store `database` names (a SQLite path, or a PostgreSQL URL
/// with one host or several). A SQLite file must exist unless `creating`
/// (only `migrate` creates one: a misspelt path is an error, not a new
/// empty store); its commits reach the disk as `commits` says.
pub(crate) async fn open(
    database: &str,
    schema: Option<&str>,
    creating: bool,
    commits: Commits,
) -> Result<Store> {
    let mut builder = Store::builder().connect_timeout(Duration::from_secs(5));
    if database.starts_with("postgres://") || database.starts_with("postgresql://") {
        if let Some(schema) = schema {
            builder = builder.postgres_schema(schema);
        }
        return builder
            .postgres(database)
            .await
            .map_err(|err| Failure(format!("cannot open the PostgreSQL store: {err}")));
    }
    if database.contains("://") {
        return fail(format!(
            "not a database this tool knows: {database:?} (a SQLite path, or a postgres:// URL)"
        ));
    }
    if schema.is_some() {
        return fail("--schema is for PostgreSQL; this database is a SQLite file");
    }
    let path = database.strip_prefix("sqlite:").unwrap_or(database);
    if !creating && !std::path::Path::new(path).exists() {
        return fail(format!(
            "no database at {path} (create it with `ttw --database {path} migrate`)"
        ));
    }
    builder
        .sqlite_commits(commits)
        .sqlite(path)
        .await
        .map_err(|err| Failure(format!("cannot open the SQLite store at {path}: {err}")))
}
