//! The delay futures (`sleep.rs`, `timeout.rs`, `interval.rs`; a wheel's
//! handle makes them, in `handle/delays.rs`), and the wheels of wakers
//! they wait in, a shard per thread (`sleeps.rs` and `sleeps/`), which the
//! driver fires.

pub(crate) mod interval;
pub(crate) mod sleep;
pub(crate) mod sleeps;
pub(crate) mod timeout;
