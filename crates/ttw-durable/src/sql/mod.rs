//! The database: pools on SQLite or PostgreSQL and their write turns,
//! placeholders and times in milliseconds (`db.rs`), the embedded
//! migrations and lease rows (`schema.rs`), and the scheduler's statements
//! on `ttw_tasks` (`claims.rs`), and the moves of finished tasks to
//! `ttw_history` and back (`history.rs`).

#[cfg(feature = "sqlite")]
pub(crate) mod checkpoint;
pub(crate) mod claims;
pub(crate) mod db;
pub(crate) mod history;
pub(crate) mod schema;
