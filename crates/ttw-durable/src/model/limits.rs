//! The limits every task is held to.

use std::time::Duration;

/// The largest payload a task may carry: 1 MiB.
pub const MAX_PAYLOAD: usize = 1 << 20;

/// The longest idempotency key, in bytes: 1 KiB. Keys are unique in an
/// index, which PostgreSQL caps at about 2.7 kB per entry; a longer natural
/// key can be hashed into one.
pub const MAX_IDEMPOTENCY_KEY: usize = 1024;

/// The longest partition key
/// ([`Schedule::partition_key`](crate::Schedule::partition_key)), in bytes.
pub const MAX_PARTITION_KEY: usize = 128;

/// The latest `run_at`, as a span after the Unix epoch: the end of the year
/// 9999.
pub const MAX_RUN_AT: Duration = Duration::from_millis(253_402_300_799_999);

/// The longest kind of a typed job ([`JobArgs::KIND`](crate::JobArgs::KIND)),
/// in bytes.
pub const MAX_KIND: usize = 64;
