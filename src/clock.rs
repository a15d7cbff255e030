//! Converting between `tokio::time::Instant` and the wheel's `u64` ticks.
//!
//! Tick `t` is the instant `start + t * tick`. Deadlines round *up* to a tick
//! (nothing fires early); "now" rounds *down* (a tick is only reached once its
//! instant has passed). All arithmetic saturates: a deadline past what a `u64`
//! tick count can hold becomes `u64::MAX`, which never comes.

use std::time::Duration;

use tokio::time::Instant;

#[derive(Debug, Clone, Copy)]
pub(crate) struct Clock {
    start: Instant,
    tick_nanos: u64,
}

const NANOS_PER_SEC: u128 = 1_000_000_000;
const MILLI: u64 = 1_000_000;

impl Clock {
    /// A clock whose tick 0 is `start`. `tick` must be at least 1 ns.
    pub(crate) fn new(start: Instant, tick: Duration) -> Self {
        let tick_nanos = u64::try_from(tick.as_nanos()).unwrap_or(u64::MAX).max(1);
        Clock { start, tick_nanos }
    }

    pub(crate) fn tick(&self) -> Duration {
        Duration::from_nanos(self.tick_nanos)
    }

    fn since_start(&self, instant: Instant) -> u128 {
        instant.saturating_duration_since(self.start).as_nanos()
    }

    /// The last tick reached at `now`.
    pub(crate) fn now_tick(&self, now: Instant) -> u64 {
        match u64::try_from(self.since_start(now)) {
            Ok(nanos) => nanos / self.tick_nanos,
            Err(_) => saturate(self.since_start(now) / u128::from(self.tick_nanos)),
        }
    }

    /// The tick for `deadline`, stamped at `now`: rounded up, except that a
    /// deadline already reached is due at once.
    pub(crate) fn deadline_tick(&self, deadline: Instant, now: Instant) -> u64 {
        if deadline <= now {
            self.now_tick(now)
        } else {
            self.ceil(self.since_start(deadline))
        }
    }

    /// The tick for `delay` after `now`, without ever forming an `Instant`
    /// that could overflow.
    #[inline]
    pub(crate) fn delay_tick(&self, delay: Duration, now: Instant) -> u64 {
        if delay.is_zero() {
            return self.now_tick(now);
        }
        if self.tick_nanos == MILLI {
            // The default tick: whole seconds are whole ticks, so only the
            // sub-second part is divided, by a constant (no 128-bit or
            // variable division on the heartbeat path). Same result as below.
            let total = now.saturating_duration_since(self.start).checked_add(delay);
            if let Some(ticks) = total.and_then(|t| {
                t.as_secs()
                    .checked_mul(1_000)?
                    .checked_add(u64::from(t.subsec_nanos()).div_ceil(MILLI))
            }) {
                return ticks;
            }
        }
        self.ceil(self.since_start(now) + delay.as_nanos())
    }

    /// The instant of `tick`, if it can be represented.
    pub(crate) fn instant(&self, tick: u64) -> Option<Instant> {
        let nanos = u128::from(tick) * u128::from(self.tick_nanos);
        let secs = u64::try_from(nanos / NANOS_PER_SEC).ok()?;
        let offset = Duration::new(secs, (nanos % NANOS_PER_SEC) as u32);
        self.start.checked_add(offset)
    }

    fn ceil(&self, nanos: u128) -> u64 {
        // The common case fits in 64 bits, where division is much cheaper.
        match u64::try_from(nanos) {
            Ok(nanos) => nanos.div_ceil(self.tick_nanos),
            Err(_) => saturate(nanos.div_ceil(u128::from(self.tick_nanos))),
        }
    }
}

fn saturate(ticks: u128) -> u64 {
    u64::try_from(ticks).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    /// The millisecond fast path of `delay_tick` gives exactly the general
    /// rounding, at sub-millisecond offsets, second boundaries and the
    /// saturating extreme.
    #[test]
    fn millisecond_delay_ticks_match_the_general_rounding() {
        let start = Instant::now();
        let clock = Clock::new(start, ms(1));
        let offsets = [
            0u64,
            1,
            999_999,
            1_000_000,
            1_000_001,
            2_500_000,
            999_999_999,
            1_000_000_000,
        ];
        let delays = [
            Duration::from_nanos(1),
            Duration::from_nanos(999_999),
            ms(1),
            Duration::from_nanos(1_000_001),
            Duration::from_secs(1),
            Duration::new(30, 123_456_789),
            Duration::from_secs(u64::MAX / 1_000 + 1),
            Duration::MAX,
        ];
        for offset in offsets {
            let now = start + Duration::from_nanos(offset);
            for delay in delays {
                let general = clock.ceil(clock.since_start(now) + delay.as_nanos());
                assert_eq!(
                    clock.delay_tick(delay, now),
                    general,
                    "offset {offset} delay {delay:?}"
                );
            }
        }
    }

    #[test]
    fn deadlines_round_up_and_now_rounds_down() {
        let start = Instant::now();
        let clock = Clock::new(start, ms(1));
        let mid = start + Duration::from_micros(2_500);
        assert_eq!(clock.now_tick(mid), 2);
        assert_eq!(
            clock.deadline_tick(start + Duration::from_micros(3_500), mid),
            4
        );
        assert_eq!(clock.delay_tick(ms(1), mid), 4);
        assert_eq!(clock.delay_tick(ms(1), start + ms(2)), 3);
    }

    #[test]
    fn reached_deadlines_are_due_now() {
        let start = Instant::now();
        let clock = Clock::new(start, ms(10));
        let now = start + ms(25);
        assert_eq!(clock.delay_tick(Duration::ZERO, now), 2);
        assert_eq!(clock.deadline_tick(now, now), 2);
        assert_eq!(clock.deadline_tick(start, now), 2);
    }

    #[test]
    fn huge_delays_saturate() {
        let start = Instant::now();
        let clock = Clock::new(start, ms(1));
        assert_eq!(clock.delay_tick(Duration::MAX, start), u64::MAX);
        let one_ns = Clock::new(start, Duration::ZERO);
        assert_eq!(one_ns.tick(), Duration::from_nanos(1));
        assert_eq!(one_ns.delay_tick(Duration::MAX, start), u64::MAX);
    }

    #[test]
    fn instants_round_trip() {
        let start = Instant::now();
        let clock = Clock::new(start, ms(1));
        assert_eq!(clock.instant(1500), Some(start + ms(1500)));
        assert_eq!(clock.now_tick(clock.instant(1500).unwrap()), 1500);
    }
}
