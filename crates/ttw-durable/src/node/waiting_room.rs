//! The fired tasks a node holds until there is room to claim them: a heap
//! per queue and partition key, the keys and the queues taking turns, and
//! each queue's flow control as the node last saw it (blocked until when,
//! keys parked at their cap).

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, HashSet, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;

use crate::model::due::Due;
use crate::model::lanes::Lanes;
use crate::node::config::Config;
use crate::sql::claims::Wait;

/// How long a node holding fired tasks of a paused queue waits before it
/// looks for the resume.
const PAUSED_RETRY: Duration = Duration::from_millis(500);
/// How long a node holding fired tasks of a queue at its concurrency waits
/// before it tries again, when none of its own deliveries of the queue
/// ends first (a place freed on another node is seen this way).
const FULL_RETRY: Duration = Duration::from_millis(25);

/// The places a node's deliveries take, each a semaphore: one per handler
/// running (or streamed delivery unsettled) up to `max_concurrency`; one
/// per claimed task whose outcome is not yet written, up to twice that (a
/// handler's place is given back when it returns, and this bounds the
/// successes waiting for their write behind it, so claims cannot run ahead
/// of outcomes); and one per delivery in flight in each queue with a limit
/// of its own, by queue index.
struct Places {
    running: Arc<Semaphore>,
    settling: Arc<Semaphore>,
    queues: Vec<Option<Arc<Semaphore>>>,
}

impl Places {
    fn new(config: &Config, lanes: &Lanes) -> Places {
        Places {
            running: Arc::new(Semaphore::new(config.max_concurrency)),
            settling: Arc::new(Semaphore::new(config.max_concurrency.saturating_mul(2))),
            queues: lanes
                .queues()
                .iter()
                .map(|queue| {
                    config
                        .queue_concurrency
                        .get(&**queue)
                        .map(|&n| Arc::new(Semaphore::new(n)))
                })
                .collect(),
        }
    }
}

/// What a delivery holds: its place under the node's `max_concurrency`,
/// and under its queue's if the queue has a limit, while its handler runs;
/// and its place among the tasks claimed and not yet settled until its
/// outcome is written.
pub(crate) struct Permits {
    _places: Option<(OwnedSemaphorePermit, Option<OwnedSemaphorePermit>)>,
    _settling: OwnedSemaphorePermit,
}

impl Permits {
    /// Gives back the places under the node's and the queue's limits,
    /// keeping the one among the tasks not yet settled.
    pub(crate) fn release_places(&mut self) {
        self._places = None;
    }
}

/// A fired task waiting for room: ordered so that the heap's top is the
/// lowest priority number, then the earliest due, then the lowest id.
#[derive(Debug, PartialEq, Eq)]
struct Waiting(Due);

impl Ord for Waiting {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        let key = |d: &Due| Reverse((d.priority, d.run_at, d.id));
        key(&self.0).cmp(&key(&other.0))
    }
}

impl PartialOrd for Waiting {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

/// A queue's fired tasks waiting on the node: a heap per partition key
/// (tasks without a key share one), the keys taking turns, one task each,
/// so one key's backlog does not keep another key's tasks from the claim.
/// A key at its cap (the limited claim says so) is parked until one of
/// the node's deliveries ends or [`FULL_RETRY`] passes.
#[derive(Default)]
struct Keyed {
    heaps: HashMap<u64, BinaryHeap<Waiting>>,
    /// The keys with tasks waiting, not parked, in turn.
    turns: VecDeque<u64>,
    /// The keys parked, until when.
    parked: HashMap<u64, Instant>,
    len: usize,
}

impl Keyed {
    fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Whether a task of `key` waits here already.
    fn has_key(&self, key: u64) -> bool {
        self.heaps.get(&key).is_some_and(|heap| !heap.is_empty())
    }

    fn push(&mut self, due: Due) {
        let heap = self.heaps.entry(due.key).or_default();
        if heap.is_empty() && !self.parked.contains_key(&due.key) {
            self.turns.push_back(due.key);
        }
        heap.push(Waiting(due));
        self.len += 1;
    }

    /// The most urgent task of the next key in turn.
    fn pop(&mut self) -> Option<Due> {
        let key = self.turns.pop_front()?;
        let heap = self.heaps.get_mut(&key)?;
        let due = heap.pop().map(|Waiting(due)| due);
        if !heap.is_empty() {
            self.turns.push_back(key);
        } else if key != 0 {
            // The tasks without a key keep their heap's allocation.
            self.heaps.remove(&key);
        }
        self.len -= due.is_some() as usize;
        due
    }

    /// Whether a task is there to take now: one of a key not parked.
    fn has_turn(&mut self, now: Instant) -> bool {
        if !self.parked.is_empty() {
            self.unpark(|until| until <= now);
        }
        !self.turns.is_empty()
    }

    /// Parks `key` until `until`.
    fn park(&mut self, key: u64, until: Instant) {
        if self.parked.insert(key, until).is_none() {
            self.turns.retain(|&k| k != key);
        }
    }

    /// Takes the parked keys `done` says are done waiting back into turn.
    fn unpark(&mut self, done: impl Fn(Instant) -> bool) {
        let heaps = &self.heaps;
        let turns = &mut self.turns;
        self.parked.retain(|key, until| {
            if !done(*until) {
                return true;
            }
            if heaps.get(key).is_some_and(|h| !h.is_empty()) {
                turns.push_back(*key);
            }
            false
        });
    }

    /// Takes `key` back into turn if it is parked.
    fn unpark_key(&mut self, key: u64) {
        if self.parked.remove(&key).is_some() && self.heaps.get(&key).is_some_and(|h| !h.is_empty())
        {
            self.turns.push_back(key);
        }
    }

    /// When the first parked key may be tried again.
    fn next_unpark(&self) -> Option<Instant> {
        self.parked.values().min().copied()
    }
}

/// The fired tasks not yet claimed, by queue. A task is claimed only once
/// there is room for it, under the node's limit and its queue's, so a task
/// waiting here is still scheduled in the store (and counted so), and when
/// room comes the most urgent of its queue (of its key, the keys taking
/// turns) goes first.
pub(crate) struct WaitingRoom {
    /// The places its tasks take when they are claimed.
    places: Places,
    /// The node's queues and shards: which queue a task's lane is of.
    lanes: Arc<Lanes>,
    queues: Vec<Keyed>,
    /// The ids in the heaps: a task fired twice waits once.
    ids: HashSet<i64>,
    /// The queue served first in the next round, so that queues take
    /// turns when the node's limit is what binds.
    next: usize,
    /// Each queue's flow control as this node last saw it.
    pub(crate) control: Vec<Control>,
}

/// A queue's flow control, as a node sees it: whether its tasks go to the
/// limited claim, and until when they wait after one left some behind.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Control {
    /// Paused or limited in `ttw_queues` when last claimed.
    pub(crate) limited: bool,
    /// Its fired tasks wait until then (the limits left them behind).
    blocked_until: Option<Instant>,
    /// Whether what blocks it is its concurrency: one of this node's
    /// deliveries ending unblocks it.
    full: bool,
}

impl WaitingRoom {
    /// The fired tasks of `lanes`' queues, claimed under `config`'s limits.
    pub(crate) fn new(config: &Config, lanes: Arc<Lanes>) -> WaitingRoom {
        let queues = lanes.queues().len();
        WaitingRoom {
            places: Places::new(config, &lanes),
            lanes,
            queues: (0..queues).map(|_| Keyed::default()).collect(),
            ids: HashSet::new(),
            next: 0,
            control: vec![Control::default(); queues],
        }
    }

    /// Whether queue `index`'s fired tasks wait for its limits now.
    pub(crate) fn blocked(&self, index: usize, now: Instant) -> bool {
        self.control[index].blocked_until.is_some_and(|t| t > now)
    }

    /// When a queue with tasks waiting for its limits may be tried again,
    /// after `now`, the time [`take`](Self::take) last looked: a blocked
    /// queue when it is unblocked, another when its first parked key is
    /// taken back. (A key whose time had come by `now` was taken back by
    /// that look, or its queue was not looked at for want of the node's
    /// room, which a delivery's end brings.)
    pub(crate) fn next_unblock(&self, now: Instant) -> Option<Instant> {
        (0..self.queues.len())
            .filter(|&i| !self.queues[i].is_empty())
            .filter_map(|i| {
                if self.blocked(i, now) {
                    self.control[i].blocked_until
                } else {
                    self.queues[i].next_unpark().filter(|&t| t > now)
                }
            })
            .min()
    }

    /// One of this node's deliveries ended: its queue, if it waits for a
    /// place under its concurrency, and its key, if parked at its cap, are
    /// tried again. (Deliveries of other queues leave them be: a place
    /// freed elsewhere is found every [`FULL_RETRY`].)
    pub(crate) fn delivery_ended(&mut self, ended: Ended) {
        let Some(control) = self.control.get_mut(ended.queue) else {
            return;
        };
        if control.full {
            control.blocked_until = None;
            control.full = false;
        }
        self.queues[ended.queue].unpark_key(ended.key);
    }

    /// Another node's limited claim left a place to a key waiting here:
    /// every queue waiting for a place is tried again.
    pub(crate) fn place_left_here(&mut self) {
        for control in &mut self.control {
            if control.full {
                control.blocked_until = None;
                control.full = false;
            }
        }
    }

    /// What a limited claim of queue `index` said: `wait` for what it left
    /// behind, `limited` whether the queue has flow control still.
    pub(crate) fn limited_claim(
        &mut self,
        index: usize,
        limited: bool,
        wait: Wait,
        full_keys: &[u64],
    ) {
        let now = Instant::now();
        for &key in full_keys {
            self.queues[index].park(key, now + FULL_RETRY);
        }
        let control = &mut self.control[index];
        control.limited = limited;
        (control.blocked_until, control.full) = match wait {
            Wait::No => (None, false),
            Wait::Paused => (Some(now + PAUSED_RETRY), false),
            Wait::Full => (Some(now + FULL_RETRY), true),
            Wait::Rate(ms) => (
                Some(now + Duration::from_millis(u64::try_from(ms).unwrap_or(1))),
                false,
            ),
        };
    }

    /// A task the wheel fired. A key new to a queue waiting for a place
    /// asks at once rather than at the queue's next look: its claim notes
    /// the key as waiting, so the other nodes leave it the next place freed
    /// (see `sql::claims::limited`). (Tasks a claim held back come back by
    /// [`push`](Self::push), which leaves the queue waiting.)
    pub(crate) fn push_fired(&mut self, due: Due) {
        let index = self.lanes.index_of(due.lane);
        let control = &mut self.control[index];
        if control.full && !self.ids.contains(&due.id) && !self.queues[index].has_key(due.key) {
            control.blocked_until = None;
            control.full = false;
        }
        self.push(due);
    }

    pub(crate) fn push(&mut self, due: Due) {
        if self.ids.insert(due.id) {
            self.queues[self.lanes.index_of(due.lane)].push(due);
        }
    }

    /// Takes up to `max` tasks there is room for, a permit each: one from
    /// each queue in turn, most urgent first.
    pub(crate) fn take(&mut self, max: usize, now: Instant) -> Vec<(Due, Permits)> {
        let mut taken = Vec::new();
        let count = self.queues.len();
        let start = self.next;
        self.next = (self.next + 1) % count;
        loop {
            let mut progress = false;
            for k in 0..count {
                if taken.len() == max {
                    return taken;
                }
                let index = (start + k) % count;
                if self.blocked(index, now) || !self.queues[index].has_turn(now) {
                    continue;
                }
                let Ok(settling) = self.places.settling.clone().try_acquire_owned() else {
                    return taken;
                };
                let Ok(node_permit) = self.places.running.clone().try_acquire_owned() else {
                    return taken;
                };
                let queue_permit = match &self.places.queues[index] {
                    None => None,
                    Some(limit) => match limit.clone().try_acquire_owned() {
                        Ok(permit) => Some(permit),
                        Err(_) => continue,
                    },
                };
                let Some(due) = self.queues[index].pop() else {
                    continue;
                };
                self.ids.remove(&due.id);
                taken.push((
                    due,
                    Permits {
                        _places: Some((node_permit, queue_permit)),
                        _settling: settling,
                    },
                ));
                progress = true;
            }
            if !progress {
                return taken;
            }
        }
    }
}

/// A delivery that ended: its queue's index and its partition key's hash,
/// whose limits may have room again.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Ended {
    pub(crate) queue: usize,
    pub(crate) key: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn due(id: i64, key: u64, run_at: i64) -> Due {
        Due {
            id,
            run_at,
            lane: 0,
            priority: 0,
            key,
        }
    }

    /// The keys of a queue take turns, one task each, most urgent first
    /// within a key; a parked key is passed over until it is taken back,
    /// and its tasks wait in order.
    #[tokio::test(start_paused = true)]
    async fn keys_take_turns_and_a_parked_key_waits() {
        let mut q = Keyed::default();
        for id in 1..=5 {
            q.push(due(id, 7, id));
        }
        q.push(due(10, 9, 50));
        q.push(due(11, 9, 40));
        q.push(due(12, 0, 60));
        let order: Vec<i64> = std::iter::from_fn(|| q.pop())
            .map(|d| d.id)
            .take(5)
            .collect();
        assert_eq!(order, [1, 11, 12, 2, 10], "A, B, keyless, A, B");
        assert_eq!(q.len, 3);

        let now = Instant::now();
        q.park(7, now + Duration::from_millis(25));
        assert!(!q.has_turn(now), "only key 7 has tasks, and it is parked");
        q.push(due(13, 9, 70));
        assert!(q.has_turn(now));
        assert_eq!(q.pop().map(|d| d.id), Some(13));
        assert_eq!(q.next_unpark(), Some(now + Duration::from_millis(25)));
        tokio::time::advance(Duration::from_millis(25)).await;
        assert!(
            q.has_turn(Instant::now()),
            "taken back once its time passed"
        );
        let rest: Vec<i64> = std::iter::from_fn(|| q.pop()).map(|d| d.id).collect();
        assert_eq!(rest, [3, 4, 5]);
        assert!(q.is_empty());
    }

    /// A claim takes only the places `WaitingRoom` owns: at most the node's
    /// concurrency, and its queue's; a place given back lets the next task
    /// be taken, while the settling place stays held until the outcome.
    #[tokio::test]
    async fn tasks_are_taken_only_as_places_allow() {
        let config = Config {
            max_concurrency: 2,
            ..Config::default()
        };
        let lanes = Arc::new(Lanes::new(vec!["default".into()], 1).unwrap());
        let mut ready = WaitingRoom::new(&config, lanes);
        for id in 1..=4 {
            ready.push_fired(due(id, 0, id));
        }
        let now = Instant::now();
        let mut taken = ready.take(10, now);
        assert_eq!(taken.iter().map(|(d, _)| d.id).collect::<Vec<_>>(), [1, 2]);
        assert!(ready.take(10, now).is_empty(), "both places held");
        taken[0].1.release_places();
        assert_eq!(
            ready
                .take(10, now)
                .iter()
                .map(|(d, _)| d.id)
                .collect::<Vec<_>>(),
            [3]
        );
        // Every place given back: the last task is taken.
        drop(taken);
        let more = ready.take(10, now);
        assert_eq!(more.iter().map(|(d, _)| d.id).collect::<Vec<_>>(), [4]);
    }
}
