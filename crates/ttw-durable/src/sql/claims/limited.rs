//! The limited claim: the claim of a paused or limited queue's fired tasks,
//! under its settings in `ttw_queues`, one node at a time.
//!
//! In one transaction: the queue's row is taken first (on PostgreSQL its
//! row lock, on SQLite the one writer), so the limited claims of every node
//! in the queue go one at a time; its token bucket is refilled by the
//! database's clock read under that lock, never moved back; the tasks of
//! the queue running now are counted (`running` with a lock that has not
//! run out: a dead node's tasks stop counting when their locks run out);
//! and of the fired tasks still claimable, as many as both limits allow are
//! claimed and paid for from the bucket. The places go to partition keys in
//! turn: within a priority, a task's turn is the number of its key's tasks
//! running now plus those before it in due order, so a key with a backlog
//! due first takes one place, then every other key with a task waiting
//! takes one, and so on (tasks without a key are one key); due time, then
//! id, decide within a turn. With a per-key concurrency, a task whose key
//! is at its cap is left behind while others of other keys are claimed.

use std::collections::HashMap;

use super::*;
use crate::sql::queues::{greatest, least};

/// Why a limited claim left claimable tasks behind, and when to try again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Wait {
    /// Nothing was left behind.
    No,
    /// The queue is paused.
    Paused,
    /// As many of the queue's tasks run as its concurrency allows: try when
    /// one ends.
    Full,
    /// The bucket is empty: the next token comes in this many ms.
    Rate(i64),
}

/// What a limited claim did.
#[derive(Debug)]
pub(crate) struct LimitedClaim {
    pub(crate) claimed: Vec<Claimed>,
    /// The ids it could have claimed but for the limits (in the order it
    /// would claim them).
    pub(crate) held: Vec<i64>,
    pub(crate) wait: Wait,
    /// The partition keys (as [`key_hash`] gives them) that are at their
    /// cap: their tasks wait until one of theirs ends.
    pub(crate) full_keys: Vec<u64>,
    /// Whether the queue has flow control at all; if not, its tasks are
    /// claimed by the plain claim again.
    pub(crate) controlled: bool,
}

/// A queue's settings and bucket, as the refill returned them.
#[derive(Debug, sqlx::FromRow)]
pub(super) struct Bucket {
    pub(super) paused: i64,
    pub(super) concurrency: Option<i64>,
    pub(super) rate_count: Option<i64>,
    pub(super) rate_period: Option<i64>,
    pub(super) key_concurrency: Option<i64>,
    pub(super) tokens: f64,
}

/// The statement that refills queue `$1`'s bucket to now and answers its
/// settings and tokens (a [`Bucket`]); on PostgreSQL its update locks the
/// settings row until the transaction ends, so that the limited claims of
/// every node and worker go one at a time.
pub(super) fn refill_sql(db: &Db) -> String {
    let (least, greatest) = (least(db), greatest(db));
    format!(
        "WITH c AS (SELECT {} AS now) UPDATE ttw_queues SET \
         tokens = CASE WHEN rate_count IS NULL THEN tokens ELSE {least}(\
         CAST(rate_burst AS DOUBLE PRECISION), tokens + CAST({greatest}(0, c.now - refilled_at) \
         AS DOUBLE PRECISION) * rate_count / rate_period) END, \
         refilled_at = {greatest}(refilled_at, c.now) \
         FROM c WHERE queue = $1 \
         RETURNING paused, concurrency, rate_count, rate_period, key_concurrency, tokens",
        db.clock_sql()
    )
}

/// What pays `$2` tokens from queue `$1`'s bucket.
pub(super) const PAY: &str = "UPDATE ttw_queues SET tokens = tokens - $2 WHERE queue = $1";

impl Bucket {
    /// The whole tokens in the bucket and, when that is fewer than `want`,
    /// the ms until the next one; `None` without a rate.
    pub(super) fn rate_room(&self, want: usize) -> Option<(usize, Option<i64>)> {
        let (Some(count), Some(period)) = (self.rate_count, self.rate_period) else {
            return None;
        };
        // Whole tokens; a tiny float error never pays one that is not
        // there.
        let whole = (self.tokens + 1e-9).floor().max(0.0) as usize;
        if whole >= want {
            return Some((whole, None));
        }
        let short = 1.0 - (self.tokens - whole as f64).clamp(0.0, 1.0);
        let after = (short * period as f64 / count as f64).ceil() as i64;
        Some((whole, Some(after.max(1))))
    }

    fn controlled(&self) -> bool {
        self.paused != 0
            || self.concurrency.is_some()
            || self.rate_count.is_some()
            || self.key_concurrency.is_some()
    }
}

/// A claimable task: its id, priority and partition key.
#[derive(Debug, sqlx::FromRow)]
struct Eligible {
    id: i64,
    priority: i64,
    partition_key: Option<String>,
}

/// How long a node's wait for a place, by key, holds places on other nodes
/// (`ttw_key_waits`): a waiting node asks again every few tens of ms, so a
/// row it no longer renews is soon forgotten.
const KEY_WAIT: i64 = 1_000;

/// The key a task takes turns under: its partition key, or `""` for the
/// tasks without one (a partition key has at least one byte).
fn turn_key(task: &Eligible) -> &str {
    task.partition_key.as_deref().unwrap_or("")
}

/// One place in the order of a limited claim: a task of this node's, or a
/// key waiting on another node, which the place is left to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct Turn {
    priority: i64,
    /// The key's tasks running now plus its tasks before this one.
    turn: i64,
    /// This node's task first at a tie: a place is not left idle for a
    /// node that may be slow to come for it.
    theirs: bool,
    /// Due order within a turn (the index in `eligible`), or the waiting
    /// key's index.
    index: usize,
}

/// The order in which a limited claim hands out its places: `eligible`
/// (in due order within each priority) and the keys waiting on other
/// nodes (`theirs`, at the default priority), by priority, then by turn,
/// so that the keys take turns across nodes.
fn in_turns(
    eligible: &[Eligible],
    theirs: &[String],
    running_by_key: &HashMap<String, i64>,
) -> Vec<Turn> {
    let running = |key: &str| running_by_key.get(key).copied().unwrap_or(0);
    let mut seen: HashMap<&str, i64> = HashMap::new();
    let mut order = Vec::with_capacity(eligible.len() + theirs.len());
    for (index, task) in eligible.iter().enumerate() {
        let key = turn_key(task);
        let before = seen.entry(key).or_insert(0);
        order.push(Turn {
            priority: task.priority,
            turn: running(key) + *before,
            theirs: false,
            index,
        });
        *before += 1;
    }
    for (index, key) in theirs.iter().enumerate() {
        order.push(Turn {
            priority: 0,
            turn: running(key),
            theirs: true,
            index,
        });
    }
    order.sort_unstable();
    order
}

impl Claims {
    /// Claims, of `fired` (in id order, all of `queue`), as many as the
    /// queue's settings allow now (see the module's notes), under the same
    /// fence as [`claim`](Self::claim).
    pub(crate) async fn claim_limited(
        &self,
        queue: &str,
        claim: Claiming<'_>,
    ) -> Result<LimitedClaim, Error> {
        let Claiming {
            fired,
            now,
            locked_until,
        } = claim;
        let refill = refill_sql(&self.db);
        let running = "SELECT COUNT(*) FROM ttw_tasks \
                       WHERE queue = $1 AND state = 'running' AND locked_until > $2";
        let per_key = "SELECT COALESCE(partition_key, ''), COUNT(*) FROM ttw_tasks \
                       WHERE queue = $1 AND state = 'running' AND locked_until > $2 \
                       GROUP BY COALESCE(partition_key, '')";
        let waiting = "SELECT DISTINCT partition_key FROM ttw_key_waits \
                       WHERE queue = $1 AND session <> $2 AND wait_until > $3";
        let forget =
            "DELETE FROM ttw_key_waits WHERE queue = $1 AND (session = $2 OR wait_until <= $3)";
        let wait = "INSERT INTO ttw_key_waits (queue, partition_key, session, wait_until) \
                    VALUES ($1, $2, $3, $4)";
        let eligible = format!(
            "SELECT id, CAST(priority AS BIGINT) AS priority, partition_key FROM ttw_tasks \
             WHERE {} AND {} ORDER BY priority, run_at, id",
            self.ids_are(4, fired.len()),
            checked(&format!(
                "state = 'scheduled' AND run_at <= $3 AND {}",
                in_held_shard("$1", "$2")
            ))
        );
        let outcome = write_with_pool!(&self.db, Urgency::Urgent, pool => {
            let mut tx = pool.begin().await?;
            let bucket: Option<Bucket> = sqlx::query_as(&refill)
                .bind(queue)
                .fetch_optional(&mut *tx)
                .await?;
            let eligible: Vec<Eligible> = {
                let query = sqlx::query_as(&eligible)
                    .bind(&self.session)
                    .bind(self.shards)
                    .bind(now);
                bind_ids!(self, query, fired.iter().map(|due| due.id))
                    .fetch_all(&mut *tx)
                    .await?
            };
            let controlled = bucket.as_ref().is_some_and(Bucket::controlled);
            let (room, wait_for) = match &bucket {
                None => (eligible.len(), Wait::No),
                Some(b) if b.paused != 0 => (0, Wait::Paused),
                Some(b) => {
                    let mut room = eligible.len();
                    let mut wait = Wait::No;
                    if let Some(limit) = b.concurrency {
                        let running: i64 = sqlx::query_scalar(running)
                            .bind(queue)
                            .bind(now)
                            .fetch_one(&mut *tx)
                            .await?;
                        let free = usize::try_from((limit - running).max(0)).unwrap_or(0);
                        if free < room {
                            (room, wait) = (free, Wait::Full);
                        }
                    }
                    if let Some((whole, Some(after))) = b.rate_room(room) {
                        (room, wait) = (whole, Wait::Rate(after));
                    }
                    (room, wait)
                }
            };
            // The keys whose tasks wait for a place on other nodes (but for
            // those this node serves itself).
            let paused = bucket.as_ref().is_some_and(|b| b.paused != 0);
            let theirs: Vec<String> = if paused || eligible.is_empty() {
                Vec::new()
            } else {
                let keys: Vec<String> = sqlx::query_scalar(waiting)
                    .bind(queue)
                    .bind(&self.session)
                    .bind(now)
                    .fetch_all(&mut *tx)
                    .await?;
                keys.into_iter()
                    .filter(|key| !eligible.iter().any(|t| turn_key(t) == key))
                    .collect()
            };
            // The places in turns by key, across nodes: each goes to the
            // next of this node's tasks whose key is under its cap, or is
            // left to a key waiting on another node; the rest are held.
            let mut running_by_key: HashMap<String, i64> = HashMap::new();
            let key_cap = bucket.as_ref().and_then(|b| b.key_concurrency).filter(|_| room > 0);
            let keyed = !theirs.is_empty() || eligible.iter().any(|task| task.partition_key.is_some());
            let order = if room > 0 && keyed {
                let rows: Vec<(String, i64)> = sqlx::query_as(per_key)
                    .bind(queue)
                    .bind(now)
                    .fetch_all(&mut *tx)
                    .await?;
                running_by_key.extend(rows);
                in_turns(&eligible, &theirs, &running_by_key)
            } else {
                in_turns(&eligible, &[], &HashMap::new())
            };
            let mut take: Vec<Due> = Vec::with_capacity(room);
            let mut held = Vec::new();
            let mut full_keys = Vec::new();
            let mut left_to_others = 0;
            let mut waits: Vec<&str> = Vec::new();
            for turn in order {
                if turn.theirs {
                    if take.len() + left_to_others < room {
                        left_to_others += 1;
                    }
                    continue;
                }
                let task = &eligible[turn.index];
                let has_room = take.len() + left_to_others < room;
                let capped = match (&task.partition_key, key_cap) {
                    (Some(key), Some(cap)) => {
                        let running = running_by_key.entry(key.clone()).or_insert(0);
                        if *running >= cap {
                            let hash = key_hash(Some(key));
                            if !full_keys.contains(&hash) {
                                full_keys.push(hash);
                            }
                            true
                        } else {
                            if has_room {
                                *running += 1;
                            }
                            false
                        }
                    }
                    _ => false,
                };
                match fired.binary_search_by_key(&task.id, |d| d.id) {
                    Ok(at) if !capped && has_room => take.push(fired[at]),
                    _ => {
                        held.push(task.id);
                        // Waiting for a place, not for its own key's cap.
                        if !capped && !paused && !waits.contains(&turn_key(task)) {
                            waits.push(turn_key(task));
                        }
                    }
                }
            }
            if left_to_others > 0 {
                if let Some(channel) = &self.channel {
                    sqlx::query("SELECT pg_notify($1, $2)")
                        .bind(channel)
                        .bind(crate::sql::announce::ROOM)
                        .fetch_all(&mut *tx)
                        .await?;
                }
            }
            if keyed {
                sqlx::query(forget)
                    .bind(queue)
                    .bind(&self.session)
                    .bind(now)
                    .execute(&mut *tx)
                    .await?;
                for key in &waits {
                    sqlx::query(wait)
                        .bind(queue)
                        .bind(*key)
                        .bind(&self.session)
                        .bind(now + KEY_WAIT)
                        .execute(&mut *tx)
                        .await?;
                }
            }
            take.sort_unstable_by_key(|d| d.id);
            let claimed = if take.is_empty() {
                Vec::new()
            } else {
                let sql = self.claim_sql(take.len(), false);
                let query = sqlx::query_as::<_, ClaimedRow>(&sql)
                    .bind(&self.session)
                    .bind(self.shards)
                    .bind(locked_until)
                    .bind(now);
                let rows = bind_ids!(self, query, take.iter().map(|due| due.id))
                    .fetch_all(&mut *tx)
                    .await?;
                claimed(rows, &take)
            };
            if bucket.as_ref().is_some_and(|b| b.rate_count.is_some()) && !claimed.is_empty() {
                sqlx::query(PAY)
                    .bind(queue)
                    .bind(claimed.len() as f64)
                    .execute(&mut *tx)
                    .await?;
            }
            tx.commit().await?;
            // The queue waits only if its own limits left tasks behind, not
            // only full keys.
            let left_by_queue = eligible.len() - take.len() > held_by_keys(&eligible, &take, &full_keys);
            let wait = match (left_by_queue, wait_for) {
                (false, _) => Wait::No,
                // Places left to keys waiting on other nodes: look again
                // as when the queue is full.
                (true, Wait::No) if left_to_others > 0 => Wait::Full,
                (true, wait) => wait,
            };
            LimitedClaim {
                claimed,
                held,
                wait,
                full_keys,
                controlled,
            }
        });
        Ok(outcome)
    }
}

/// How many of the claimable tasks not taken were left behind only because
/// their key was full.
fn held_by_keys(eligible: &[Eligible], take: &[Due], full_keys: &[u64]) -> usize {
    eligible
        .iter()
        .filter(|t| take.binary_search_by_key(&t.id, |d| d.id).is_err())
        .filter(|t| {
            t.partition_key.is_some() && full_keys.contains(&key_hash(t.partition_key.as_deref()))
        })
        .count()
}
