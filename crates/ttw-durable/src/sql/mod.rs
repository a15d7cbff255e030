//! The database: every statement on the task system's tables.
//!
//! - `db.rs`: pools on SQLite or PostgreSQL and their write turns, a
//!   borrowed connection of either backend, placeholders and times.
//! - `names.rs`: how a store's statements name its tables, its `NOTIFY`
//!   channel and the database's clock; `announce.rs`: what a statement
//!   that makes tasks due returns and the `NOTIFY` it sends.
//! - `schema.rs`: the embedded migrations and the lease rows.
//! - `tasks.rs`: the one task insert, and one task read, cancelled, moved.
//! - `keys.rs`: idempotency keys, the key-in-history protocol, replacement.
//! - `claims.rs`: the scheduler's claims and outcomes; `attempts.rs`: the
//!   history of each attempt they write, and its read.
//! - `leases.rs`: node membership and shard leases.
//! - `history.rs`: finished tasks moved to `ttw_history`, and the sweep.
//! - `recurring.rs`: recurring schedules and their occurrences.
//! - `admin.rs`: an operator's reads and bulk redrives, and the counts.
//! - `queues.rs`: queue settings (pause, concurrency, rate); the claim
//!   that obeys them is `claims/limited.rs`.
//! - `checkpoint.rs` and `reserve.rs` (SQLite): WAL checkpoints off the
//!   write path, and the disk reserve that lets one finish after a full disk.

pub(crate) mod admin;
pub(crate) mod announce;
pub(crate) mod attempts;
pub(crate) mod callbacks;
#[cfg(feature = "sqlite")]
pub(crate) mod checkpoint;
pub(crate) mod claims;
pub(crate) mod commits;
#[cfg(feature = "postgres")]
pub(crate) mod copy;
pub(crate) mod db;
pub(crate) mod history;
pub(crate) mod keys;
pub(crate) mod leases;
pub(crate) mod names;
#[cfg(feature = "postgres")]
pub(crate) mod primary;
pub(crate) mod queues;
pub(crate) mod recurring;
#[cfg(feature = "sqlite")]
pub(crate) mod reserve;
pub(crate) mod schema;
pub(crate) mod tasks;
#[cfg(test)]
pub(crate) mod testing;
#[cfg(feature = "sqlite")]
pub(crate) mod wal;
