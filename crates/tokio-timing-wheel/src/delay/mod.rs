//! The delay futures: `sleep`, `timeout` and `interval` on a wheel's
//! handle (`handle.rs`), the futures themselves (`sleep.rs`, `timeout.rs`,
//! `interval.rs`), and the wheels of wakers they wait in, a shard per
//! thread (`sleeps.rs` and `sleeps/`), which the driver fires.

pub(crate) mod handle;
pub(crate) mod interval;
pub(crate) mod sleep;
pub(crate) mod sleeps;
pub(crate) mod timeout;
