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
            return self.now_tick(now);
        }
        if self.tick_nanos == MILLI {
            // Same result as below, without its division.
            let since = deadline.saturating_duration_since(self.start);
            if let Some((tick, _)) = milli_tick(since) {
                return tick;
            }
        }
        self.ceil(self.since_start(deadline))
    }

    /// The tick for `delay` after `now`, without ever forming an `Instant`
    /// that could overflow.
    #[inline]
    pub(crate) fn delay_tick(&self, delay: Duration, now: Instant) -> u64 {
        if delay.is_zero() {
            return self.now_tick(now);
        }
        if self.tick_nanos == MILLI {
            // Same result as below, without its division.
            let total = now.saturating_duration_since(self.start).checked_add(delay);
            if let Some((tick, _)) = total.and_then(milli_tick) {
                return tick;
            }
        }
        self.ceil(self.since_start(now) + delay.as_nanos())
    }

    /// [`delay_tick`](Self::delay_tick), with the stretch of instants
    /// whose deadlines round up to that tick ([`window`](Self::window)),
    /// `deadline` being `now + delay`.
    #[inline]
    pub(crate) fn delay_window(
        &self,
        delay: Duration,
        now: Instant,
        deadline: Instant,
    ) -> (u64, Option<(Instant, Instant)>) {
        if self.tick_nanos == MILLI && now >= self.start && !delay.is_zero() {
            // As in `delay_tick`; the tick's instant is the deadline moved
            // on to the next whole millisecond since the start.
            let total = (now - self.start).checked_add(delay);
            if let Some((tick, sub)) = total.and_then(milli_tick) {
                let rest = (MILLI - sub % MILLI) % MILLI;
                let until = deadline.checked_add(Duration::from_nanos(rest));
                let after = until.and_then(|at| at.checked_sub(Duration::from_nanos(MILLI)));
                return (tick, after.zip(until));
            }
        }
        let tick = self.delay_tick(delay, now);
        (tick, self.window(tick))
    }

    /// The instants after which and up to which a deadline rounds up to
    /// `tick`: those of the tick before and of the tick itself, if they can
    /// be represented.
    pub(crate) fn window(&self, tick: u64) -> Option<(Instant, Instant)> {
        let until = self.instant(tick)?;
        Some((until.checked_sub(self.tick())?, until))
    }

    /// [`delay_tick`](Self::delay_tick), with where in that tick the
    /// deadline falls, in 256ths rounded up ([`Clock::frac`]).
    #[inline]
    pub(crate) fn delay_when(&self, delay: Duration, now: Instant) -> (u64, u8) {
        if delay.is_zero() {
            return (self.now_tick(now), WHOLE);
        }
        let since = now.saturating_duration_since(self.start);
        if self.tick_nanos == MILLI {
            // As in `delay_tick`, worked out once for both.
            if let Some((tick, sub)) = since.checked_add(delay).and_then(milli_tick) {
                return (tick, frac_of(sub % MILLI, MILLI));
            }
        }
        let tick = self.delay_tick(delay, now);
        (tick, self.frac(since.as_nanos() + delay.as_nanos(), tick))
    }

    /// [`deadline_tick`](Self::deadline_tick), with where in that tick the
    /// deadline falls ([`Clock::frac`]).
    pub(crate) fn deadline_when(&self, deadline: Instant, now: Instant) -> (u64, u8) {
        let tick = self.deadline_tick(deadline, now);
        if deadline <= now {
            return (tick, WHOLE);
        }
        (tick, self.frac(self.since_start(deadline), tick))
    }

    /// Where a deadline `nanos` after the start falls in its tick `tick`
    /// (the tick it rounds up to): `f` such that the deadline is no later
    /// than `(f + 1) / 256` of the way through the tick. [`WHOLE`] (255)
    /// means the whole tick; it is also what a deadline past what a tick
    /// count can hold gets.
    fn frac(&self, nanos: u128, tick: u64) -> u8 {
        let Some(before) = tick.checked_sub(1) else {
            return WHOLE;
        };
        let tick_nanos = u128::from(self.tick_nanos);
        match nanos.checked_sub(u128::from(before) * tick_nanos) {
            Some(rem) if rem > 0 && rem <= tick_nanos => {
                // rem * 256 / tick, rounded up, minus one: 0 ..= 255.
                ((rem * 256).div_ceil(tick_nanos) - 1) as u8
            }
            _ => WHOLE,
        }
    }

    /// The instant a deadline of tick `tick` and place `frac` in it
    /// ([`Clock::frac`]) is reached by: never before the deadline itself,
    /// and never after the tick's own instant.
    pub(crate) fn early_instant(&self, tick: u64, frac: u8) -> Option<Instant> {
        if frac == WHOLE || tick == 0 {
            return self.instant(tick);
        }
        let offset = (u128::from(frac) + 1) * u128::from(self.tick_nanos);
        let offset = Duration::from_nanos(u64::try_from(offset.div_ceil(256)).ok()?);
        self.instant(tick - 1)?.checked_add(offset)
    }

    /// How far `now` is into tick `tick` (the stretch after tick `tick - 1`
    /// up to tick `tick`), in whole 256ths: a deadline of that tick with
    /// place `frac` has been reached when `frac` is below this. 0 before the
    /// stretch starts; 256 once the tick's instant has come.
    pub(crate) fn frac_reached(&self, now: Instant, tick: u64) -> u16 {
        let Some(before) = tick.checked_sub(1) else {
            return 256;
        };
        let Some(from) = self.instant(before) else {
            return 0;
        };
        let into = now.saturating_duration_since(from).as_nanos();
        (into * 256 / u128::from(self.tick_nanos)).min(256) as u16
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

/// For the default tick of a millisecond: the tick a deadline `total` after
/// the start rounds up to, and its nanoseconds past its whole second.
/// Whole seconds are whole ticks, so only the sub-second part is divided,
/// by a constant (no 128-bit or variable division on the heartbeat path).
#[inline]
fn milli_tick(total: Duration) -> Option<(u64, u64)> {
    let sub = u64::from(total.subsec_nanos());
    let tick = total
        .as_secs()
        .checked_mul(1_000)?
        .checked_add(sub.div_ceil(MILLI))?;
    Some((tick, sub))
}

/// A deadline's place in its tick meaning the whole tick: it is reached
/// only at the tick's instant.
pub(crate) const WHOLE: u8 = u8::MAX;

/// [`Clock::frac`] for `rem` nanoseconds into a tick of `tick_nanos`
/// (`rem` 0 meaning the tick's very end).
#[inline]
fn frac_of(rem: u64, tick_nanos: u64) -> u8 {
    if rem == 0 {
        WHOLE
    } else {
        ((rem * 256).div_ceil(tick_nanos) - 1) as u8
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

    /// A deadline's place in its tick: the instant it stands for is never
    /// before the deadline, never after the tick, less than a 256th of a
    /// tick after the deadline, and reached exactly from that instant on.
    /// The millisecond fast path agrees with the general one.
    #[test]
    fn places_in_a_tick_are_never_early_and_reached_on_time() {
        let start = Instant::now();
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        for tick in [ms(1), Duration::from_nanos(1_000_003), ms(10), ms(7)] {
            let clock = Clock::new(start, tick);
            let general = Clock::new(start, tick + Duration::from_nanos(0));
            for i in 0..20_000u64 {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                let now = start + Duration::from_nanos(x % 5_000_000_000);
                let delay = match i % 4 {
                    0 => Duration::from_nanos(1 + (x >> 20) % 3_000_000),
                    1 => tick * (1 + (x >> 24) as u32 % 100),
                    _ => Duration::from_nanos(1 + (x >> 16) % 100_000_000_000),
                };
                let deadline = now + delay;
                let (when, frac) = clock.delay_when(delay, now);
                assert_eq!(when, clock.delay_tick(delay, now));
                assert_eq!((when, frac), general.deadline_when(deadline, now));
                let at = clock.early_instant(when, frac).unwrap();
                assert!(at >= deadline, "early: {delay:?} from {now:?}");
                assert!(at <= clock.instant(when).unwrap());
                assert!(at - deadline <= tick / 256 + Duration::from_nanos(1));
                assert!(u16::from(frac) < clock.frac_reached(at, when));
                let before = at - Duration::from_nanos(1);
                assert!(u16::from(frac) >= clock.frac_reached(before, when));
            }
        }
        let clock = Clock::new(start, ms(1));
        assert_eq!(clock.delay_when(Duration::ZERO, start), (0, WHOLE));
        assert_eq!(clock.delay_when(ms(3), start), (3, WHOLE));
        assert_eq!(
            clock.delay_when(Duration::from_micros(2_500), start),
            (3, 127)
        );
        assert_eq!(
            clock.delay_when(Duration::from_nanos(2_000_001), start),
            (3, 0)
        );
        assert_eq!(clock.delay_when(Duration::MAX, start).1, WHOLE);
        assert_eq!(clock.frac_reached(start + ms(5), 3), 256);
        assert_eq!(clock.frac_reached(start, 3), 0);
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

    /// The window of a delay's tick holds exactly the deadlines that round
    /// up to that tick, for the default tick's fast path and any other.
    #[test]
    fn a_delay_window_holds_the_deadlines_of_its_tick() {
        let start = Instant::now();
        let mut x = 0x2545_F491_4F6C_DD1Du64;
        for tick in [Duration::from_millis(1), Duration::from_micros(300), ms(10)] {
            let clock = Clock::new(start, tick);
            for _ in 0..2_000 {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                let now = start + Duration::from_nanos(x % 5_000_000_000);
                let delay = Duration::from_nanos(1 + (x >> 20) % 3_000_000_000);
                let deadline = now + delay;
                let (when, window) = clock.delay_window(delay, now, deadline);
                assert_eq!(when, clock.delay_tick(delay, now));
                let (after, until) = window.unwrap();
                assert_eq!(Some(until), clock.instant(when));
                assert_eq!(Some(after), clock.instant(when - 1));
                assert!(
                    after < deadline && deadline <= until,
                    "{delay:?} at {now:?}"
                );
            }
            // A deadline on a tick's instant is that tick's.
            let (when, window) = clock.delay_window(tick * 3, start, start + tick * 3);
            assert_eq!((when, window), (3, clock.window(3)));
        }
    }
}
