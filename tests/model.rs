//! The whole handle (channel, driver, wheel, stream) against a `BTreeMap`
//! model, under Tokio's paused clock, over random set / move / remove /
//! cancel / drain / advance sequences with delays across every level.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use futures::{FutureExt, StreamExt};
use proptest::prelude::*;
use tokio_timing_wheel::{Expirations, TimingWheel};

/// Pending timers in firing order: (effective deadline in ms, order set).
/// A deadline already reached when set counts as "now".
#[derive(Default)]
struct Model {
    now: u64,
    seq: u64,
    by_key: HashMap<u8, (u64, u64)>,
    queue: BTreeMap<(u64, u64), (u8, u32)>,
}

impl Model {
    fn set(&mut self, key: u8, value: u32, deadline: u64) {
        self.remove(key);
        self.seq += 1;
        let order = (deadline.max(self.now), self.seq);
        self.by_key.insert(key, order);
        self.queue.insert(order, (key, value));
    }

    fn reschedule(&mut self, key: u8, deadline: u64) {
        if let Some(order) = self.by_key.get(&key) {
            let (_, value) = self.queue[order];
            self.set(key, value, deadline);
        }
    }

    fn remove(&mut self, key: u8) -> Option<u32> {
        let order = self.by_key.remove(&key)?;
        self.queue.remove(&order).map(|(_, value)| value)
    }

    fn advance(&mut self, by: u64) -> Vec<(u8, u32)> {
        self.now += by;
        let mut fired = Vec::new();
        while let Some(entry) = self.queue.first_entry() {
            if entry.key().0 > self.now {
                break;
            }
            let (key, value) = entry.remove();
            self.by_key.remove(&key);
            fired.push((key, value));
        }
        fired
    }

    fn drain(&mut self) -> Vec<(u8, u32)> {
        self.by_key.clear();
        let mut all: Vec<_> = std::mem::take(&mut self.queue).into_values().collect();
        all.sort_unstable();
        all
    }
}

#[derive(Debug, Clone)]
enum Op {
    Set(u8, u32, u64),
    Move(u8, u64),
    Remove(u8),
    Cancel(u8),
    Drain,
    Advance(u64),
}

/// Delays in ms: every level of a 1 ms wheel, and beyond two years.
fn delay() -> impl Strategy<Value = u64> {
    prop_oneof![
        4 => 0..70u64,
        3 => 0..5_000u64,
        2 => 0..300_000u64,
        1 => 0..(1u64 << 26),
        1 => (1u64 << 30)..(1u64 << 37),
    ]
}

fn op() -> impl Strategy<Value = Op> {
    let key = 0..16u8;
    prop_oneof![
        5 => (key.clone(), any::<u32>(), delay()).prop_map(|(k, v, d)| Op::Set(k, v, d)),
        2 => (key.clone(), delay()).prop_map(|(k, d)| Op::Move(k, d)),
        1 => key.clone().prop_map(Op::Remove),
        1 => key.prop_map(Op::Cancel),
        1 => Just(Op::Drain),
        4 => delay().prop_map(Op::Advance),
    ]
}

fn ready(expired: &mut Expirations<u8, u32>) -> Vec<(u8, u32)> {
    std::iter::from_fn(|| {
        expired
            .next()
            .now_or_never()
            .flatten()
            .map(|e| e.into_parts())
    })
    .collect()
}

async fn run(start: u64, ops: Vec<Op>) -> Result<(), TestCaseError> {
    tokio::time::advance(Duration::from_millis(start)).await;
    let (wheel, mut expired) = TimingWheel::<u8, u32>::new();
    let mut model = Model::default();
    let ms = Duration::from_millis;
    for op in ops {
        match op {
            Op::Set(k, v, d) => {
                wheel.set_timer(k, v, ms(d)).await.unwrap();
                model.set(k, v, model.now + d);
            }
            Op::Move(k, d) => {
                wheel.move_timer(k, ms(d)).await.unwrap();
                model.reschedule(k, model.now + d);
            }
            Op::Remove(k) => {
                prop_assert_eq!(wheel.remove_timer(k).await.unwrap(), model.remove(k));
            }
            Op::Cancel(k) => {
                wheel.cancel_timer(k).await.unwrap();
                model.remove(k);
            }
            Op::Drain => {
                let mut all = wheel.drain().await.unwrap();
                all.sort_unstable();
                prop_assert_eq!(all, model.drain());
            }
            Op::Advance(d) => {
                tokio::time::advance(ms(d)).await;
                let stats = wheel.stats().await.unwrap();
                prop_assert_eq!(ready(&mut expired), model.advance(d));
                prop_assert_eq!(stats.pending, model.by_key.len());
            }
        }
    }
    let mut rest = wheel.stop().await.unwrap();
    rest.sort_unstable();
    prop_assert_eq!(rest, model.drain());
    prop_assert!(expired.next().await.is_none());
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    #[test]
    fn handle_matches_the_model(
        start in prop_oneof![Just(0u64), 0..(1u64 << 36)],
        ops in prop::collection::vec(op(), 1..120),
    ) {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .start_paused(true)
            .build()
            .unwrap();
        rt.block_on(run(start, ops))?;
    }
}
